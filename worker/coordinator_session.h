// CoordinatorSession: one worker's standing with the coordinator, shared by
// workerd and JoinedWorker (the Python client): its name, registration, the
// heartbeats from their own thread, whether it leads its job (the
// heartbeat's leads_job), and whether the job was aborted.
//
//   CoordinatorSession::Options o;
//   o.name = DefaultWorkerName();
//   o.devices = {"cpu:0"};
//   CoordinatorSession session(o, StubCalls(stub.get(), &security));
//   PS_RETURN_IF_ERROR(session.Register());  // retries until it is known
//   session.StartHeartbeats();
//   session.StartJob(assignment.job_id(), assignment.rank());
//   ... train while !session.abort_requested(); evaluate if session.leads() ...
//   session.EndJob();
//   session.Close();
//
// Life cycle:
//
//   unregistered --Register--> registered --heartbeat answers reregister-->
//        ^                         |        kRegisterAgain: unregistered
//        +-- Reregister() ---------+        kAbortJob:      aborted
//
//   no job --StartJob--> job (leads() follows the heartbeat answers; an abort
//                          answer sets abort_requested()) --EndJob--> no job
//
// A worker registered for one job (Options::job_id) is bound to it from the
// start: an abort answer counts before its assignment too.
#ifndef WORKER_COORDINATOR_SESSION_H_
#define WORKER_COORDINATOR_SESSION_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/coordinator_client.h"
#include "common/security.h"
#include "proto/coordinator.grpc.pb.h"
#include "proto/coordinator.pb.h"

namespace ps {

// "<host>-<pid>": workerd's name when its config gives none (one per
// process; a restart registers under the same name and replaces it).
std::string DefaultWorkerName();
// "<host>-<pid>-<n>": unique per call, for several workers in one process
// (the coordinator takes a second registration under a name for a restart
// of the first worker).
std::string UniqueWorkerName();

// How the session's calls reach the coordinator. Implementations are
// thread-safe; each call blocks up to `deadline`.
class CoordinatorCalls {
 public:
  virtual ~CoordinatorCalls() = default;
  virtual absl::Status RegisterWorker(const RegisterWorkerRequest& request,
                                      RegisterWorkerResponse* response,
                                      absl::Time deadline) = 0;
  virtual absl::Status Heartbeat(const HeartbeatRequest& request,
                                 HeartbeatResponse* response,
                                 absl::Time deadline) = 0;
};

// One attempt per call on `stub`, authorized by `security` (workerd: its own
// loops retry). Both are borrowed and must outlive the result.
std::unique_ptr<CoordinatorCalls> StubCalls(Coordinator::StubInterface* stub,
                                            const Security* security);
// Through `client` (borrowed): each call waits for a coordinator that is
// still starting (JoinedWorker).
std::unique_ptr<CoordinatorCalls> ClientCalls(const CoordinatorClient* client);

// Thread-safe. Register on one thread at a time; the heartbeats run on the
// session's own thread, which Close (or the destructor) joins.
class CoordinatorSession {
 public:
  // What a heartbeat answer "reregister" (the coordinator no longer knows
  // this worker: it restarted or lost it) does.
  enum class WhenForgotten {
    kRegisterAgain,  // unregistered: heartbeats pause until Register
    kAbortJob,       // the job is aborted: a joined worker cannot come back
  };

  struct Options {
    std::string name;  // RegisterWorkerRequest.name; must be set
    std::vector<std::string> devices;
    // Set: registers for this job only (RegisterWorkerRequest.job_id).
    std::string job_id;
    // The coordinator's address, for log lines.
    std::string coordinator;
    // Between heartbeats. Zero: the registration answer's interval
    // (kDefaultHeartbeatIntervalMs when it gives none).
    absl::Duration heartbeat_interval = absl::ZeroDuration();
    // A heartbeat's deadline is min(interval, this).
    absl::Duration heartbeat_deadline_cap = absl::InfiniteDuration();
    // The deadline of each of Register's calls. Generous: a registration
    // that lets the coordinator start a job answers once the job's chunks
    // are created on every shard (seconds per GB of parameters), and a
    // retry after a deadline reads as a restart (the first registration is
    // dropped, and with it the job's rank).
    absl::Duration register_deadline = absl::Seconds(60);
    WhenForgotten when_forgotten = WhenForgotten::kRegisterAgain;
    // Warnings for failed heartbeats, aborts and registering again (workerd);
    // off, the session reports only through its state (JoinedWorker).
    bool log_events = true;
    // Called on the heartbeat thread after each answer is applied, outside
    // the session's lock (it may call the session).
    std::function<void(const HeartbeatResponse&)> on_heartbeat;
  };

  // The worker's registration and job at one instant.
  struct Snapshot {
    std::string worker_id;  // "" until registered
    std::string job_id;     // "" when bound to none
    uint32_t rank = 0;
  };

  CoordinatorSession(Options options, std::unique_ptr<CoordinatorCalls> calls);
  ~CoordinatorSession();  // Close()

  CoordinatorSession(const CoordinatorSession&) = delete;
  CoordinatorSession& operator=(const CoordinatorSession&) = delete;

  // One RegisterWorker call with `deadline`; the coordinator's error as is.
  absl::Status RegisterOnce(absl::Time deadline);
  // Registers, retrying with backoff (100 ms doubling to 5 s) while the
  // coordinator is unreachable. Errors that retrying cannot fix
  // (UNAUTHENTICATED, INVALID_ARGUMENT) name RegisterWorker; CANCELLED once
  // stopped. Blocks.
  absl::Status Register();
  // The coordinator answered that it does not know this worker (NOT_FOUND):
  // heartbeats pause until the next Register.
  void Reregister();
  bool registered() const;
  std::string worker_id() const;
  // The interval the heartbeats use (after registration when taken from
  // its answer).
  absl::Duration heartbeat_interval() const;

  // Starts the heartbeat thread; call once. Heartbeats are skipped while
  // unregistered.
  void StartHeartbeats();
  // Ends the heartbeats after the one in flight and makes Register return
  // CANCELLED. Never blocks; idempotent.
  void Stop();
  // Stop, and waits for the heartbeat thread. Idempotent; blocks up to a
  // heartbeat's deadline.
  void Close();

  // The worker runs `job_id` as `rank`: it leads when rank 0 until a
  // heartbeat answer says otherwise. Leaves the abort state as it is.
  void StartJob(const std::string& job_id, uint32_t rank);
  // The job is over (workerd goes back to wait for the next); bound again
  // to Options::job_id, if any.
  void EndJob();
  Snapshot snapshot() const;
  // Whether this worker leads its job now (the one whose reports are the
  // job's progress: the one to evaluate).
  bool leads() const { return leads_.load(); }

  // Aborts the job with `reason` unless it already was (the first reason
  // stays). True when this call aborted it.
  bool Abort(const std::string& reason);
  // An answer (heartbeat, progress report) that aborts the job: Abort, and
  // with log_events a warning naming the job.
  void AbortedByCoordinator(const std::string& reason);
  // For the next job: not aborted.
  void ClearAbort();
  bool abort_requested() const { return abort_.load(); }
  // The reason of the abort ("" when none was given); nullopt when not
  // aborted.
  std::optional<std::string> abort_reason() const;

 private:
  void HeartbeatLoop();
  // One beat; false when none was sent (unregistered) or it failed.
  bool Beat(HeartbeatResponse* response);
  bool AbortLocked(const std::string& reason)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Options options_;
  const std::unique_ptr<CoordinatorCalls> calls_;
  absl::Notification stopping_;
  std::thread heartbeat_;
  std::atomic<bool> leads_{false};
  std::atomic<bool> abort_{false};

  mutable absl::Mutex mu_;
  std::string worker_id_ ABSL_GUARDED_BY(mu_);
  bool registered_ ABSL_GUARDED_BY(mu_) = false;
  absl::Duration interval_ ABSL_GUARDED_BY(mu_);
  // The job bound to (Options::job_id from the start, else StartJob's).
  std::string job_ ABSL_GUARDED_BY(mu_);
  uint32_t rank_ ABSL_GUARDED_BY(mu_) = 0;
  // Between StartJob and EndJob; leads_ follows the heartbeat answers.
  bool running_ ABSL_GUARDED_BY(mu_) = false;
  std::string abort_reason_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace ps

#endif  // WORKER_COORDINATOR_SESSION_H_
