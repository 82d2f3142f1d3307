// JoinedWorker: one worker of one job, driven by the user's own training
// loop (the Python client's Worker) rather than by workerd's trainer. It
// registers with the coordinator for that job only, heartbeats from its own
// thread, long-polls for the assignment, and then moves the job's flat
// parameter and gradient buffers through an AsyncPsClient.
//
//   JoinOptions o;
//   o.job_id = "j-3";
//   PS_ASSIGN_OR_RETURN(std::unique_ptr<JoinedWorker> w,
//                       JoinedWorker::Join(connection, o));
//   PS_ASSIGN_OR_RETURN(RequestHandle h, w->Start(ParamOp::kPull, 0, {}, 0));
//   PS_RETURN_IF_ERROR(w->Wait(h, absl::Now() + absl::Seconds(30)));
//   ... compute into w->grads() from w->params() ...
//   PS_ASSIGN_OR_RETURN(h, w->Start(ParamOp::kPushPull, 0, {}, 0));
//   PS_RETURN_IF_ERROR(w->Wait(h, absl::InfiniteFuture()));
//   PS_RETURN_IF_ERROR(w->Report(progress, /*finished=*/true, ""));
//
// Life cycle:
//
//   Join --register(job_id)--> waiting --assignment--> joined --Close--> closed
//             |                   |  timeout: DEADLINE_EXCEEDED naming the
//             |                   |  job's state and pending reason
//             +-- heartbeats from here until Close; an abort answer sets
//                 aborted() and fails later Waits and Reports with ABORTED.
//
// The buffers live as long as the JoinedWorker (Close keeps them).
#ifndef WORKER_JOINED_WORKER_H_
#define WORKER_JOINED_WORKER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/coordinator_client.h"
#include "common/defaults.h"
#include "proto/coordinator.pb.h"
#include "worker/client/async_ps_client.h"
#include "worker/client/request_handle.h"
#include "worker/client/shard_relocator.h"
#include "worker/coordinator_session.h"

namespace ps {

struct JoinOptions {
  std::string job_id;  // the job to run; it must exist
  // "" = "<host>-<pid>-<n>". Names must be unique among live workers: the
  // coordinator takes a second registration under one for a restart.
  std::string name;
  // How long Join waits for the assignment (the job starts once it has
  // all its workers).
  absl::Duration timeout = absl::Seconds(60);
  // Deadline of each control call (register, heartbeat, report).
  absl::Duration control_deadline =
      absl::Seconds(kDefaultConnectTimeoutSeconds);
  PsClientOptions client;
};

// One tensor of the job in the flat buffers.
struct FlatTensor {
  std::string name;
  std::vector<uint64_t> shape;
  size_t offset = 0;  // elements
  size_t size = 0;    // elements
};

// Thread-safe: any thread may Start, Wait, Report and Close.
class JoinedWorker {
 public:
  // Registers for `options.job_id` and waits for its assignment. Blocks up
  // to options.timeout (DEADLINE_EXCEEDED naming the job, its state and
  // why it is pending), or until the coordinator answers that the job was
  // aborted (ABORTED). `connection` is copied.
  static absl::StatusOr<std::unique_ptr<JoinedWorker>> Join(
      const Connection& connection, const JoinOptions& options);
  ~JoinedWorker();  // Close()

  JoinedWorker(const JoinedWorker&) = delete;
  JoinedWorker& operator=(const JoinedWorker&) = delete;

  const Assignment& assignment() const { return assignment_; }
  const std::string& worker_id() const { return worker_id_; }
  // The job's tensors in its order, as laid out in the flat buffers.
  const std::vector<FlatTensor>& tensors() const { return tensors_; }
  // The flat buffers (num_parameters floats each, zero at first). A
  // request reads grads and writes params over its tensors' ranges until
  // it is over; the caller must not write them meanwhile.
  absl::Span<float> params() { return absl::MakeSpan(params_); }
  absl::Span<float> grads() { return absl::MakeSpan(grads_); }

  // Starts a request over `tensors` (empty = all) and returns its handle
  // (worker/client/request_handle.h: Wait for it, or Cancel it). Never
  // blocks on the network. NOT_FOUND naming an unknown tensor;
  // FAILED_PRECONDITION once closed.
  absl::StatusOr<RequestHandle> Start(ParamOp op, uint64_t step,
                                      const std::vector<std::string>& tensors,
                                      int priority);
  // Blocks until the request is over or `deadline` passes (then
  // DEADLINE_EXCEEDED; the request carries on and may be waited for
  // again). A failed request's status names the job (ABORTED with the
  // coordinator's reason when the job was aborted). One thread at a time
  // waits for a handle (FAILED_PRECONDITION for a second); each is waited
  // for until it returns other than DEADLINE_EXCEEDED.
  absl::Status Wait(RequestHandle handle, absl::Time deadline);
  // Ends the request early (its Wait then returns CANCELLED, naming the
  // job, unless it was over). Does not block; an unknown handle is
  // ignored. FAILED_PRECONDITION once closed.
  absl::Status Cancel(RequestHandle handle);
  // Sends a progress report (blocks up to the control deadline). ABORTED
  // naming the job and the reason when the coordinator answers abort;
  // FAILED_PRECONDITION once closed, at once.
  absl::Status Report(const Progress& progress, bool finished,
                      const std::string& error);
  // The reason the job was aborted (heartbeat or report answer), if it was.
  std::optional<std::string> aborted() const;
  // Whether this worker leads its job now: rank 0, or the lowest rank left
  // after SHRINK lost rank 0 (HeartbeatResponse.leads_job, so it changes up
  // to a heartbeat interval after the coordinator's view). The leader is
  // the one whose reports are the job's progress: the one to evaluate.
  bool leads() const { return session_.leads(); }
  // Stops the heartbeats, cancels every request and waits until each is
  // over, then leaves the coordinator at once (Unregister, naming the
  // first step whose push it did not complete): its rank leaves the job's
  // quorum now, not after the worker timeout. A push cancelled here may
  // have reached some shards: call it between steps. Idempotent; blocks
  // (up to the control deadline for Unregister). Start, Wait, Cancel and
  // Report fail with FAILED_PRECONDITION "worker of job J is closed"
  // after it.
  void Close();

 private:
  // A started request, by its AsyncPsClient handle's id.
  struct Pending {
    ParamOp op = ParamOp::kPull;
    uint64_t step = 0;
    bool waiting = false;  // a thread is in Wait for it
  };

  JoinedWorker(const Connection& connection, const JoinOptions& options);
  absl::Status Register();
  // Close's Unregister; a failure leaves the worker to the timeout.
  void Leave();
  absl::Status AwaitAssignment();
  absl::Status Setup();
  absl::Status AbortedStatus(absl::string_view during) const;
  // DEADLINE_EXCEEDED for Join: the job's state and pending reason.
  absl::Status JoinTimeout() const;

  const Connection connection_;
  const JoinOptions options_;
  const CoordinatorClient coordinator_;
  // Given each heartbeat's replica epoch (declared before session_,
  // which holds it); when the epoch moves, the client looks the shards up.
  const std::shared_ptr<RelocateSignal> relocate_ =
      std::make_shared<RelocateSignal>();
  // Registration, heartbeats, leader and abort flags; uses coordinator_.
  CoordinatorSession session_;
  std::string worker_id_;  // the session's, once registered
  Assignment assignment_;
  std::vector<FlatTensor> tensors_;
  std::vector<float> params_;
  std::vector<float> grads_;

  mutable absl::Mutex mu_;
  // Shared with the Waits in progress, so Close may drop it while they run.
  std::shared_ptr<AsyncPsClient> client_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, Pending> pending_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  // One past the highest step whose push (or push-pull) completed.
  uint64_t next_step_ ABSL_GUARDED_BY(mu_) = 0;
  // FAILED_PRECONDITION naming the job: what every call answers once closed.
  absl::Status ClosedStatus() const;
  bool closed() const ABSL_LOCKS_EXCLUDED(mu_);
};

// "pull", "push" or "pushpull" (also "push_pull"); INVALID_ARGUMENT
// naming `field` otherwise.
absl::StatusOr<ParamOp> ParseParamOp(absl::string_view op,
                                     absl::string_view field);
const char* ParamOpName(ParamOp op);

}  // namespace ps

#endif  // WORKER_JOINED_WORKER_H_
