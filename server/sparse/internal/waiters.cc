#include "server/sparse/internal/waiters.h"

#include <algorithm>
#include <utility>

#include "absl/types/span.h"

namespace ps {
namespace sparse_internal {

WaiterPtr NewWaiter(const SparseRequestIn& req, SparseReplyOut* resp,
                    std::function<void(absl::Status)> done, uint32_t staleness,
                    absl::Time deadline) {
  auto waiter = std::make_shared<Waiter>();
  waiter->req = &req;
  waiter->resp = resp;
  waiter->done = std::move(done);
  waiter->step = req.step;
  const uint64_t next = req.push ? req.step + 1 : req.step;
  waiter->need_version = next;
  waiter->need_clock = next > staleness ? next - staleness : 0;
  waiter->deadline = deadline;
  return waiter;
}

bool WaitList::Satisfied(const Waiter& w, const StepBarrier& barrier,
                         uint64_t answerable) {
  switch (barrier.mode()) {
    case ASP:
      return w.need_copies <= answerable;
    case SSP:
      return barrier.Slowest() >= w.need_clock && w.need_copies <= answerable;
    default:
      return barrier.version() >= w.need_version &&
             w.need_version <= answerable;
  }
}

void WaitList::CollectReady(const StepBarrier& barrier, uint64_t answerable,
                            std::vector<WaiterPtr>* ready) {
  auto keep =
      std::remove_if(waiters_.begin(), waiters_.end(), [&](const WaiterPtr& w) {
        if (!Satisfied(*w, barrier, answerable)) return false;
        w->answered_version = barrier.version();
        ready->push_back(w);
        return true;
      });
  waiters_.erase(keep, waiters_.end());
}

void WaitList::TakeBeyond(uint64_t version, std::vector<WaiterPtr>* out) {
  auto keep =
      std::remove_if(waiters_.begin(), waiters_.end(), [&](const WaiterPtr& w) {
        if (w->need_version <= version) return false;
        out->push_back(w);
        return true;
      });
  waiters_.erase(keep, waiters_.end());
}

void WaitList::TakeLate(absl::Time now, std::vector<WaiterPtr>* late) {
  auto keep =
      std::remove_if(waiters_.begin(), waiters_.end(), [&](const WaiterPtr& w) {
        if (w->deadline > now) return false;
        late->push_back(w);
        return true;
      });
  waiters_.erase(keep, waiters_.end());
}

std::vector<WaiterPtr> WaitList::TakeAll() {
  std::vector<WaiterPtr> all;
  all.swap(waiters_);
  return all;
}

void Answer(const TableSet& tables, Waiter& w) {
  w.resp->version = w.answered_version;
  w.resp->rows.resize(w.req->pull.size());
  for (size_t i = 0; i < w.req->pull.size(); ++i) {
    const SparseRowsIn& pull = w.req->pull[i];
    const Table& t = *tables.Find(pull.table);
    std::vector<float>& rows = w.resp->rows[i];
    rows.resize(pull.ids.size() * t.spec.dim());
    absl::Status s = t.rows->Pull(pull.ids, absl::MakeSpan(rows));
    if (!s.ok()) {
      w.done(s);
      return;
    }
  }
  w.done(absl::OkStatus());
}

}  // namespace sparse_internal
}  // namespace ps
