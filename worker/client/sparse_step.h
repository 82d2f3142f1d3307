// The sparse tables' step (JobSpec.tables): what one step of a worker
// pushes to and pulls from the tables, and its check against the job before
// anything is sent. Transport-free: the SparseClients
// (worker/client/sparse_client.h, worker/client/testing/fake_sparse_client.h)
// take it.
//
//   SparseTableStep emb;
//   emb.table = "emb";
//   emb.push_ids = grad_ids;
//   emb.push_grads = grads;
//   PS_ASSIGN_OR_RETURN(std::vector<int> index,
//                       CheckSparseStep(spec, /*push=*/true, {&emb, 1}));
#ifndef WORKER_CLIENT_SPARSE_STEP_H_
#define WORKER_CLIENT_SPARSE_STEP_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "proto/job.pb.h"

namespace ps {

// One table's part of a step. The spans are borrowed: the id and gradient
// spans are read inside Start (they may be reused once it returns);
// pull_rows is written until the step is over (`done` ran, Wait or Exchange
// returned its status). Ids need not be unique: a pushed id that repeats is
// summed once by the shard; a pulled id that repeats is filled at each
// position.
struct SparseTableStep {
  std::string table;                    // a name from JobSpec.tables
  absl::Span<const uint64_t> push_ids;  // only with push
  absl::Span<const float> push_grads;   // push_ids.size() x dim
  absl::Span<const uint64_t> pull_ids;  // rows to read
  absl::Span<float> pull_rows;          // pull_ids.size() x dim, row-major
};

// One step's exchange with every table it names (each at most once).
struct SparseStep {
  uint64_t step = 0;
  bool push = false;
  std::vector<SparseTableStep> tables;
  // Optional. Runs exactly once when the step is over, with its status,
  // before Wait returns: on the calling thread inside Start (bad input,
  // nothing to send, the fake) or on a network thread. Must not block (nor
  // Wait); may Start or Cancel steps.
  std::function<void(const absl::Status&)> done;
};

// Checks `tables` against the job's tables before anything is sent:
// every name known and named once, push ids only with push, push_grads and
// pull_rows of ids x dim floats, ids below a bounded table's num_ids.
// Returns the index in spec.tables of each entry, or kInvalidArgument
// naming the field ("tables[1].pull_rows: ...").
absl::StatusOr<std::vector<int>> CheckSparseStep(
    const JobSpec& spec, bool push, absl::Span<const SparseTableStep> tables);

}  // namespace ps

#endif  // WORKER_CLIENT_SPARSE_STEP_H_
