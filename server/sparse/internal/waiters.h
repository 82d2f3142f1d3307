// The SparseExchange calls of a job's tables that wait for their answer
// (the sparse side of server/internal/waits.h): what each waits for, the
// list of them, and the answer (the pulled rows) once one is ready.
//
//   WaiterPtr w = NewWaiter(req, resp, std::move(done), staleness, deadline);
//   waits.Add(w);
//   waits.CollectReady(barrier, &ready);
//   for (auto& r : ready) Answer(tables, *r);   // under no lock
//
// Thread-compatible: JobTables guards the WaitList with its mutex.
#ifndef SERVER_SPARSE_INTERNAL_WAITERS_H_
#define SERVER_SPARSE_INTERNAL_WAITERS_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "proto/job.pb.h"
#include "server/sparse/internal/step_barrier.h"
#include "server/sparse/internal/table_set.h"
#include "server/sparse/sparse_request.h"

namespace ps {
namespace sparse_internal {

// A pending SparseExchange: answered once the list finds it satisfied.
struct Waiter {
  const SparseRequestIn* req = nullptr;
  SparseReplyOut* resp = nullptr;
  std::function<void(absl::Status)> done;
  uint64_t step = 0;
  uint64_t need_version = 0;  // BSP
  uint64_t need_clock = 0;    // SSP
  // ASP/SSP: the version the answer waits to be `answerable` (the tables'
  // version when it was added: its own push, and every push before it,
  // held by the copies; JobTables::GateOnReplicas).
  uint64_t need_copies = 0;
  absl::Time deadline;
  uint64_t answered_version = 0;  // set when it becomes ready
};
using WaiterPtr = std::shared_ptr<Waiter>;

// The wait of `req` (borrowed with `resp` until `done` runs): BSP, the
// version after its step (its step without a push); SSP, that version less
// `staleness` as the slowest clock; failed at `deadline`.
WaiterPtr NewWaiter(const SparseRequestIn& req, SparseReplyOut* resp,
                    std::function<void(absl::Status)> done, uint32_t staleness,
                    absl::Time deadline);

class WaitList {
 public:
  void Add(WaiterPtr w) { waiters_.push_back(std::move(w)); }
  // Moves the waits that `barrier` satisfies (ASP: all; SSP: the slowest
  // clock; BSP: the version; and need_version (BSP) or need_copies at most
  // `answerable`, the newest version held durable or by the copies where
  // answers wait for them) to `ready`, stamped with its version.
  void CollectReady(const StepBarrier& barrier, uint64_t answerable,
                    std::vector<WaiterPtr>* ready);
  // Moves the waits that need a version beyond `version` to `out`.
  void TakeBeyond(uint64_t version, std::vector<WaiterPtr>* out);
  // Moves the waits whose deadline is not after `now` to `late`.
  void TakeLate(absl::Time now, std::vector<WaiterPtr>* late);
  // Moves every wait out.
  std::vector<WaiterPtr> TakeAll();

 private:
  static bool Satisfied(const Waiter& w, const StepBarrier& barrier,
                        uint64_t answerable);

  std::vector<WaiterPtr> waiters_;
};

// Reads the rows `w` asks for into its response (one buffer per pull
// entry, which the reply's encoder sends as is) and runs its callback (with
// the error of a read that failed). Call with no lock held.
void Answer(const TableSet& tables, Waiter& w);

}  // namespace sparse_internal
}  // namespace ps

#endif  // SERVER_SPARSE_INTERNAL_WAITERS_H_
