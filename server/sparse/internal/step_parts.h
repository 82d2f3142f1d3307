// The pushes of split steps being put back together: a worker whose step's
// rows for this shard do not fit one message sends them as `parts` requests
// (SparseExchangeRequest.part/parts, proto/ps.proto). Each part's rows are
// buffered here with its wait until every part of the (worker, step) is in;
// then the parts' rows, concatenated in part order (the order of the
// unsplit push), become the step's one push, and every part's wait goes on
// to the WaitList to be answered with its own pulled rows.
//
//   StepParts parts(max_bytes);
//   std::vector<WaiterPtr> dropped;
//   absl::StatusOr<StepParts::Added> a = parts.Add(std::move(p), &dropped);
//   if (!a.ok()) ... fail p's waiter and `dropped` with a.status() ...
//   if (a->complete) ... push a->merged once; wait a->waiters ...
//
// Thread-compatible: JobTables guards it with its mutex.
#ifndef SERVER_SPARSE_INTERNAL_STEP_PARTS_H_
#define SERVER_SPARSE_INTERNAL_STEP_PARTS_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/btree_map.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/sparse/internal/table_set.h"
#include "server/sparse/internal/waiters.h"

namespace ps {
namespace sparse_internal {

// One part of a split push, checked (part < parts <= the bound).
struct SplitPart {
  uint32_t worker = 0;
  uint64_t step = 0;
  uint32_t part = 0;
  uint32_t parts = 0;
  TablePushes pushed;
  // Accounted against the bound: its rows, its pull's ids and a fixed
  // overhead (the request the waiter holds).
  uint64_t bytes = 0;
  WaiterPtr waiter;  // its answer; its deadline is the set's
};

class StepParts {
 public:
  explicit StepParts(uint64_t max_bytes) : max_bytes_(max_bytes) {}

  struct Added {
    // The part was already held (a retry with the same contents): its
    // waiter is held beside the first one's, and nothing else changed.
    bool duplicate = false;
    // Every part is in: `merged` is the step's push, `waiters` every part's
    // (retries included); the set is forgotten.
    bool complete = false;
    TablePushes merged;
    std::vector<WaiterPtr> waiters;
  };
  // Holds `p`. Errors drop the whole set (its buffered rows; the tables
  // never saw them) and move the waiters it held to `*dropped` for the
  // caller to fail with the same status; p's own waiter is not among them.
  // INVALID_ARGUMENT: `parts` differs from the count the set's first part
  // gave, or `part` was held with other contents. RESOURCE_EXHAUSTED: the
  // held parts would exceed max_bytes.
  absl::StatusOr<Added> Add(SplitPart p, std::vector<WaiterPtr>* dropped);

  // A set whose first part's deadline passed, taken out whole.
  struct Expired {
    uint32_t worker = 0;
    uint64_t step = 0;
    uint32_t parts = 0;
    std::vector<uint32_t> missing;  // the parts never received
    std::vector<WaiterPtr> waiters;
  };
  void TakeLate(absl::Time now, std::vector<Expired>* late);
  // The waiters of (worker, step)'s set, which is dropped (none: empty).
  std::vector<WaiterPtr> Take(uint32_t worker, uint64_t step);
  // Every held waiter; the sets are dropped.
  std::vector<WaiterPtr> TakeAll();

  // Bytes of the held parts (counted as SplitPart.bytes).
  uint64_t bytes() const { return bytes_; }
  size_t sets() const { return sets_.size(); }

 private:
  struct Set {
    uint32_t parts = 0;
    uint32_t received = 0;
    absl::Time deadline;
    std::vector<TablePushes> pushed;  // by part
    std::vector<uint64_t> fingerprint;
    std::vector<uint8_t> have;
    uint64_t bytes = 0;
    std::vector<WaiterPtr> waiters;
  };
  using Key = std::pair<uint32_t, uint64_t>;  // (worker, step)

  // Forgets `it`'s set, moving its waiters to `out`.
  void Drop(absl::btree_map<Key, Set>::iterator it,
            std::vector<WaiterPtr>* out);
  // The parts concatenated in order, per table.
  static TablePushes Merge(std::vector<TablePushes>& parts);

  const uint64_t max_bytes_;
  absl::btree_map<Key, Set> sets_;
  uint64_t bytes_ = 0;
};

// A hash of the rows of `p` (table by table, ids and values), to tell a
// retried part from a different one.
uint64_t Fingerprint(const TablePushes& p);

}  // namespace sparse_internal
}  // namespace ps

#endif  // SERVER_SPARSE_INTERNAL_STEP_PARTS_H_
