// FakeSparseClient: an in-process SparseClient (worker/client/sparse_client.h)
// for trainer tests. One worker, BSP, one in-memory table per JobSpec.tables
// entry, plain SGD with the table's optimizer.learning_rate whatever its
// kind (the fake does not model Adagrad, FTRL, admission or eviction).
//
//   JobSpec spec;  // with tables {name: "emb", dim: 4, optimizer {lr: 0.1}}
//   PS_ASSIGN_OR_RETURN(std::unique_ptr<FakeSparseClient> sparse,
//                       FakeSparseClient::Create(spec));
//   Trainer trainer(options, dense.get(), sparse.get());  // borrowed
//   ...
//   std::vector<float> row = sparse->Row("emb", 42);
//
// Semantics, those of the shards for a job of one worker:
//   * The tables share one version (steps applied), starting at
//     Options::initial_version.
//   * A push of step t == version applies, per table, the gradient rows
//     summed per id (repeated ids summed once): row -= lr * sum; then the
//     version is t + 1. t < version is stale (counted, not applied);
//     t > version is kInvalidArgument naming `step`.
//   * The pull part reads the rows after the push; without push, step t
//     needs version >= t, else kFailedPrecondition (no other worker would
//     ever complete it).
//   * A row never pushed reads as its initial value (Options::init, zeros
//     by default) and is not stored.
//   * Bad input is refused before anything changes: CheckSparseStep's
//     checks, and NaN or inf gradients (as the shards refuse them).
// Start runs the whole step at once, calls `done` on the calling thread
// and returns a handle of a step that is over (Wait returns at once).
//
// Thread-safe.
#ifndef WORKER_CLIENT_TESTING_FAKE_SPARSE_CLIENT_H_
#define WORKER_CLIENT_TESTING_FAKE_SPARSE_CLIENT_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "proto/job.pb.h"
#include "worker/client/sparse_client.h"

namespace ps {

struct FakeSparseClientOptions {
  // Fills `row` (dim floats, zeroed) with the initial value of `id` of
  // `table`; empty: zeros.
  std::function<void(const std::string& table, uint64_t id,
                     absl::Span<float> row)>
      init;
  uint64_t initial_version = 0;
};

class FakeSparseClient final : public SparseClient {
 public:
  using Options = FakeSparseClientOptions;
  // One Start, as it arrived (valid or not).
  struct Record {
    uint64_t step = 0;
    bool push = false;
    std::vector<std::string> tables;
    uint64_t pushed_ids = 0;
    uint64_t pulled_ids = 0;
  };

  // kInvalidArgument naming the field for a table of dim 0, or without a
  // positive finite optimizer.learning_rate.
  static absl::StatusOr<std::unique_ptr<FakeSparseClient>> Create(
      const JobSpec& spec, Options options = Options());

  // Runs the whole step, then `done`, before it returns the handle.
  RequestHandle Start(SparseStep s) override;
  // Every step is over once Start returns: nothing to cancel.
  void Cancel(RequestHandle handle) override;
  // rows and requests as the real client counts them (one request per
  // step); bytes are the ids and values moved, without message overhead.
  SparseClientStats stats() const override;

  uint64_t version() const;
  // The row as a pull would read it now; empty for an unknown table.
  std::vector<float> Row(const std::string& table, uint64_t id) const;
  // Rows stored (pushed at least once); 0 for an unknown table.
  size_t stored_rows(const std::string& table) const;
  std::vector<Record> exchanges() const;

 private:
  struct Table {
    std::string name;
    uint32_t dim = 0;
    float learning_rate = 0;
    absl::flat_hash_map<uint64_t, std::vector<float>> rows;
  };

  FakeSparseClient(const JobSpec& spec, Options options);

  absl::Status Run(const SparseStep& s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Apply(Table& t, absl::Span<const uint64_t> ids,
             absl::Span<const float> grads) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReadRow(const Table& t, uint64_t id, float* out) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);

  const JobSpec spec_;
  const Options options_;

  mutable absl::Mutex mu_;
  std::vector<Table> tables_ ABSL_GUARDED_BY(mu_);  // spec_.tables order
  uint64_t version_ ABSL_GUARDED_BY(mu_);
  SparseClientStats stats_ ABSL_GUARDED_BY(mu_);
  std::vector<Record> records_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ps

#endif  // WORKER_CLIENT_TESTING_FAKE_SPARSE_CLIENT_H_
