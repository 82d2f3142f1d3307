// CtrDataSource: where a CtrTrainer's examples come from, one per data set a
// ctr model trains on (DataSpec.dataset):
//   "ctr-synthetic"  the generator (worker/data/ctr_synthetic.h), any slice
//                    computed on demand; test examples carry the planted
//                    teacher's probabilities;
//   "criteo-tsv"     Criteo TSV files streamed from disk
//                    (worker/trainer/ctr_data_tsv.h); no teacher.
//
//   CtrDataOptions o;  o.rank = 1;  o.num_workers = 4;  o.test_set = false;
//   PS_ASSIGN_OR_RETURN(std::unique_ptr<CtrDataSource> data,
//                       CreateCtrDataSource(job, o));
//   for (uint64_t t = 0; t < data->steps_per_epoch() * epochs; ++t) {
//     PS_RETURN_IF_ERROR(data->TrainBatch(t, &batch));  ...
//   }
//
// The contract every source keeps: steps_per_epoch is known at creation
// and the same on every rank; TrainBatch(t) is this rank's batch of step t,
// a pure function of (job, rank, num_workers, t) whatever the order of
// calls (a restart at any step reads what an undisturbed run read), and the
// ranks' batches of a step are disjoint; the test set is the same for every
// evaluation.
#ifndef WORKER_TRAINER_CTR_DATA_H_
#define WORKER_TRAINER_CTR_DATA_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "proto/job.pb.h"
#include "worker/data/ctr_example.h"

namespace ps {

// DataSpec.dataset values a ctr model trains on (the coordinator's
// KnownDatasets lists the same names).
inline constexpr char kCtrSyntheticDatasetName[] = "ctr-synthetic";
inline constexpr char kCriteoTsvDatasetName[] = "criteo-tsv";

struct CtrDataOptions {
  uint32_t rank = 0;
  uint32_t num_workers = 1;
  // Whether this rank may evaluate: only then is the test set opened (and, for
  // criteo-tsv, checked at creation).
  bool test_set = true;
  // criteo-tsv: how often the pass that counts a file's rows logs its
  // progress.
  absl::Duration count_log_interval = absl::Seconds(10);
  // criteo-tsv: bad rows logged with file:line:column per file; the rest
  // are only counted.
  int logged_bad_rows = 5;
};

// Not thread-safe: one trainer thread calls it.
class CtrDataSource {
 public:
  // A chunk of the test set and, when the source has a teacher, its
  // probabilities (teacher[0, batch.size)); else null.
  using TestBatchFn =
      std::function<absl::Status(const CtrBatch& batch, const double* teacher)>;

  virtual ~CtrDataSource() = default;

  // Steps in one pass over the training set; >= 1.
  virtual uint64_t steps_per_epoch() const = 0;
  // This rank's batch_size examples of step t (any t; epoch t /
  // steps_per_epoch) into *batch. Errors name the file and line.
  virtual absl::Status TrainBatch(uint64_t t, CtrBatch* batch) = 0;
  // Calls fn on the whole test set in order, in chunks of at most
  // max_batch >= 1 examples; stops at fn's first error and returns it.
  // kFailedPrecondition when created with test_set false.
  virtual absl::Status ForEachTestBatch(size_t max_batch,
                                        const TestBatchFn& fn) = 0;

  // Sources that read any training example by its index (ctr-synthetic),
  // as an elastic data job needs (JobSpec.max_workers): the training set's
  // size, and the examples at `indices` (each below it) into *batch. 0 and
  // kUnimplemented for the others.
  virtual uint64_t train_examples() const { return 0; }
  virtual absl::Status ExamplesAt(absl::Span<const uint32_t> indices,
                                  CtrBatch* batch);
};

// The source for job.data().dataset. kInvalidArgument naming the field for
// another data set, a batch_size of 0, or a training set too small for one
// batch per rank; kNotFound naming the path for a missing file. May read
// the whole training file once (criteo-tsv; see ctr_data_tsv.h).
absl::StatusOr<std::unique_ptr<CtrDataSource>> CreateCtrDataSource(
    const JobSpec& job, const CtrDataOptions& options);

// `file` when absolute or `dir` is empty, else dir/file.
std::string ResolveDataPath(const std::string& dir, const std::string& file);

}  // namespace ps

#endif  // WORKER_TRAINER_CTR_DATA_H_
