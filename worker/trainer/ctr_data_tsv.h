// CtrTsvSource: the "criteo-tsv" data set, Criteo TSV files
// (worker/data/ctr_tsv.h, plain or gzipped) streamed from disk; neither
// file is ever loaded whole (Criteo's train.txt is 45M lines, 11 GB).
//
//   CtrTsvSource::Options o;
//   o.train_path = "/data/criteo/train.tsv.gz";  o.test_path = ...;
//   o.batch_size = 512;  o.rank = r;  o.num_workers = W;
//   PS_ASSIGN_OR_RETURN(std::unique_ptr<CtrTsvSource> source,
//                       CtrTsvSource::Create(o));   // the count pass
//
// Training set: its first L lines, L = max_lines (0 = every line). Rank r
// of W owns the lines i (0-based) with i % W == r, in file order; a bad row
// among them is skipped. In each epoch the rank's batch k (step t, k = t %
// steps_per_epoch) is its good rows [k * B, (k + 1) * B), so every epoch
// reads the file again from the top.
//
// The count pass (Create): steps_per_epoch must be the same on every rank
// and known before training, so Create reads and parses the L lines once,
// counting each rank's good rows g_r: steps_per_epoch = min_r g_r / B
// (every rank has the same g_r list, so every rank agrees). It logs its
// progress every count_log_interval and the first logged_bad_rows bad rows
// as file:line:column. It costs one parse of the file: 0.75M lines/s
// plain, 0.3-0.5M gzipped on one core of the dev box, so a minute or two for
// Criteo's 45M lines; max_train_examples bounds it.
//
// Bad rows (wrong column count, a label not 0/1, a bad integer or hex
// value, a line over 1 MiB) are skipped and counted, never fatal; a file
// with too few good rows for one batch per rank is kInvalidArgument naming
// it and the counts. A read error or a corrupt gzip stream is kDataLoss
// naming file and line and fails the job, as does a training file that
// ran out of rows after it was counted (it changed on disk).
//
// Test set: every good row of test_path, read from the top on each
// evaluation. With options.test_set the count pass covers it too, so a
// test file without a good row fails at Create, not after training.
//
// Not thread-safe.
#ifndef WORKER_TRAINER_CTR_DATA_TSV_H_
#define WORKER_TRAINER_CTR_DATA_TSV_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "worker/data/ctr_example.h"
#include "worker/data/ctr_tsv.h"
#include "worker/trainer/ctr_data.h"

namespace ps {

// A file's rows as the count pass saw them.
struct CtrTsvCount {
  uint64_t lines = 0;     // lines read
  uint64_t bad_rows = 0;  // of them, rows that did not parse
  // good_per_rank[r]: good rows among the lines i with i % W == r.
  std::vector<uint64_t> good_per_rank;
};

// Reads and parses the first max_lines lines of `path` (0 = all), counting
// good rows per rank of `num_workers`. `what` names the file in logs
// ("train_file"). Logs progress every `log_interval` and the first
// `logged_bad_rows` bad rows. kNotFound / kPermissionDenied / kDataLoss
// naming the path.
absl::StatusOr<CtrTsvCount> CountCtrTsvRows(
    const std::string& path, const std::string& what, uint64_t max_lines,
    uint32_t num_workers, absl::Duration log_interval, int logged_bad_rows);

class CtrTsvSource : public CtrDataSource {
 public:
  struct Options {
    std::string train_path;
    std::string test_path;
    uint64_t max_lines = 0;  // of train_path; 0 = all
    uint64_t batch_size = 0;
    CtrDataOptions data;  // rank, workers, test_set, logging
  };

  // Runs the count pass (above). kInvalidArgument for batch_size 0, a rank
  // >= num_workers, or too few good rows; file errors name the path.
  static absl::StatusOr<std::unique_ptr<CtrTsvSource>> Create(
      const Options& options);

  uint64_t steps_per_epoch() const override { return steps_per_epoch_; }
  absl::Status TrainBatch(uint64_t t, CtrBatch* batch) override;
  absl::Status ForEachTestBatch(size_t max_batch,
                                const TestBatchFn& fn) override;

  const CtrTsvCount& train_count() const { return train_count_; }
  // Good rows of the test file (0 without options.data.test_set).
  uint64_t test_rows() const { return test_rows_; }

 private:
  CtrTsvSource(Options options, CtrTsvCount train_count, uint64_t test_rows,
               uint64_t steps_per_epoch);

  static constexpr uint64_t kNoStep = ~uint64_t{0};

  absl::Status ReadBatch(uint64_t t, CtrBatch* batch);
  // Opens the training file at its top.
  absl::Status Reopen();
  // The next good row this rank owns into *out.
  absl::Status NextOwnRow(CtrExample* out);

  const Options options_;
  const CtrTsvCount train_count_;
  const uint64_t test_rows_;
  const uint64_t steps_per_epoch_;
  std::unique_ptr<CtrTsvReader> train_;
  uint64_t next_step_ = kNoStep;  // the step train_ is positioned for
  CtrExample example_;
};

}  // namespace ps

#endif  // WORKER_TRAINER_CTR_DATA_TSV_H_
