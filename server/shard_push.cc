// Shard: pushes (server/shard.h): a push applied under the job's
// consistency rules, answered at once or, in a replicated ASP/SSP job, once
// every live backup holds it.
#include <algorithm>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/not_retryable.h"
#include "common/status_macros.h"
#include "server/internal/checkpointer.h"
#include "server/internal/consistency.h"
#include "server/internal/job.h"
#include "server/internal/reasons.h"
#include "server/internal/replicator.h"
#include "server/internal/validation.h"
#include "server/internal/waits.h"
#include "server/shard.h"

namespace ps {

using internal::Chunk;
using internal::HeldPushes;
using internal::Job;
using internal::PushCounts;
using internal::WaiterPtr;

bool Shard::HeldForPause(Job& job, uint64_t step, const absl::Status& refused,
                         absl::Time hold_until, std::function<void()> again,
                         std::function<void(absl::Status)> answer) {
  const absl::Time now = absl::Now();
  if (!IsPausedForReplacement(refused) || hold_until <= now) return false;
  internal::HeldPush held{step,
                          std::min(hold_until, now + internal::kMaxPauseHold),
                          again, std::move(answer), refused};
  switch (job.held_pushes.Hold(std::move(held), job.mode, job.pause_step)) {
    case HeldPushes::kHeld:
      return true;
    case HeldPushes::kResume:
      again();
      return true;
    case HeldPushes::kAnswer:
      break;
  }
  return false;
}

absl::StatusOr<PushCounts> Shard::ApplyPush(const JobPtr& job, uint32_t worker,
                                            uint64_t step,
                                            const GradientsIn& gradients,
                                            std::vector<Chunk*>* chunks) {
  PS_RETURN_IF_ERROR(internal::ValidatePush(*job, options_.shard_id, worker,
                                            step, gradients, chunks));
  std::vector<WaiterPtr> ready;
  std::vector<Chunk*> advanced;
  const PushCounts counts = internal::ApplyPush(
      *job, {worker, step, &gradients, chunks}, &ready, &advanced);
  internal::CompleteAll(&ready);
  checkpointer_->MaybeQueue(job, advanced, absl::InfinitePast());
  if (job->replicated && !advanced.empty()) {
    replicator_->Advanced(job, advanced);
  }
  if (counts.paused_at != internal::kNotPaused) {
    // A PAUSE came between the validation and a chunk: the client retries.
    job->rejected.Add(internal::kPaused);
    return internal::PausedError(*job, counts.paused_at);
  }
  return counts;
}

absl::Status Shard::Push(const PushRequest& req, PushResponse* resp) {
  // Answered at once unless the job is replicated: then within the job's
  // step deadline, or DEADLINE_EXCEEDED from here.
  struct Call {
    absl::Notification done;
    absl::Status status;
    PushResponse resp;
  };
  auto call = std::make_shared<Call>();
  absl::Duration limit = absl::InfiniteDuration();
  Push(req, &call->resp, [call](absl::Status s) {
    call->status = std::move(s);
    call->done.Notify();
  });
  if (!call->done.HasBeenNotified()) {
    absl::StatusOr<JobPtr> job = FindJob(req.job_id());
    if (job.ok()) limit = absl::Milliseconds((*job)->deadline_ms);
    if (!call->done.WaitForNotificationWithTimeout(limit)) {
      return absl::DeadlineExceededError(
          absl::StrCat("job ", req.job_id(), " step ", req.step(),
                       ": the push did not reach every live backup in time"));
    }
  }
  *resp = call->resp;
  return call->status;
}

void Shard::Push(const PushRequest& req, PushResponse* resp,
                 std::function<void(absl::Status)> done,
                 absl::Time hold_until) {
  const int64_t start_ns = absl::GetCurrentTimeNanos();
  resp->Clear();
  absl::StatusOr<JobPtr> job = FindJob(req.job_id());
  if (!job.ok()) return done(job.status());
  if (absl::Status st = internal::ValidatePlacementEpoch(
          **job, options_.shard_id, req.placement_epoch());
      !st.ok()) {
    return done(std::move(st));
  }
  std::vector<Chunk*> chunks;
  absl::StatusOr<PushCounts> counts = ApplyPush(
      *job, req.worker(), req.step(), GradientsFrom(req.gradients()), &chunks);
  if (!counts.ok() && HeldForPause(
                          **job, req.step(), counts.status(), hold_until,
                          [this, &req, resp, done, hold_until] {
                            Push(req, resp, done, hold_until);
                          },
                          done)) {
    return;
  }
  if (!counts.ok()) return done(counts.status());
  resp->set_duplicates(counts->duplicates);
  resp->set_stale(counts->stale);
  if (!(*job)->replicated) {
    (*job)->counters.request_ns[internal::kPushMethod].Record(
        static_cast<uint64_t>(absl::GetCurrentTimeNanos() - start_ns));
    return done(absl::OkStatus());
  }
  // Acknowledged once every live backup holds it: a wait without a reply.
  WaiterPtr w = internal::NewWaiter(
      *job, next_waiter_id_.fetch_add(1, std::memory_order_relaxed),
      std::move(chunks), req.step(), /*out=*/nullptr, /*payloads=*/nullptr,
      std::move(done));
  w->worker = req.worker();
  w->start_ns = start_ns;
  w->method = internal::kPushMethod;
  if ((*job)->mode == BSP) {
    // A BSP gradient is held until its step applies: acknowledged, like a
    // PushPull's answer, once the step is applied and replicated (gated),
    // or a primary lost in between would take an acknowledged gradient
    // with it and the step would wait for a push nobody resends.
    w->need_version = req.step() + 1;
  } else {
    SetReplicaNeeds(w.get());
  }
  internal::StartWait(*job, std::move(w));
}

bool Shard::AwaitsReplicas(const Job& job) {
  return job.replicated && job.mode != BSP;
}

void Shard::SetReplicaNeeds(internal::Waiter* w) {
  // Every version up to the chunk's current one: a duplicate (a retry)
  // waits for the replication of the original update too.
  w->need_replicated.reserve(w->chunks.size());
  for (const Chunk* c : w->chunks) w->need_replicated.push_back(c->version);
}

}  // namespace ps
