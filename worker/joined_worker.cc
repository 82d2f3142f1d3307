#include "worker/joined_worker.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"

namespace ps {
namespace {

// Longest single GetAssignment long-poll; Join polls again until its timeout.
constexpr absl::Duration kAssignmentPoll = absl::Seconds(5);

// The session of a worker that joins one job: its name unique per
// JoinedWorker (UniqueWorkerName), quiet (the caller sees statuses), and a
// coordinator that forgot it aborts the job (it cannot take its rank back).
CoordinatorSession::Options SessionOptions(
    const JoinOptions& options, const std::string& coordinator,
    std::shared_ptr<RelocateSignal> relocate) {
  CoordinatorSession::Options o;
  // A new replica epoch: the client looks the shards up now.
  o.on_heartbeat = [relocate](const HeartbeatResponse& r) {
    relocate->OnReplicaEpoch(r.replica_epoch());
  };
  o.name = options.name.empty() ? UniqueWorkerName() : options.name;
  o.devices = {"cpu:0"};
  o.job_id = options.job_id;
  o.coordinator = coordinator;
  o.heartbeat_deadline_cap = options.control_deadline;
  o.when_forgotten = CoordinatorSession::WhenForgotten::kAbortJob;
  o.log_events = false;
  return o;
}

}  // namespace

absl::StatusOr<ParamOp> ParseParamOp(absl::string_view op,
                                     absl::string_view field) {
  if (op == "pull") return ParamOp::kPull;
  if (op == "push") return ParamOp::kPush;
  if (op == "pushpull" || op == "push_pull") return ParamOp::kPushPull;
  return absl::InvalidArgumentError(
      absl::StrCat(field, ": \"", op, "\" is not pull, push or pushpull"));
}

const char* ParamOpName(ParamOp op) {
  switch (op) {
    case ParamOp::kPull:
      return "pull";
    case ParamOp::kPush:
      return "push";
    case ParamOp::kPushPull:
      return "pushpull";
  }
  return "?";
}

JoinedWorker::JoinedWorker(const Connection& connection,
                           const JoinOptions& options)
    : connection_(connection),
      options_(options),
      coordinator_(connection_),
      session_(SessionOptions(options_, connection_.coordinator, relocate_),
               ClientCalls(&coordinator_)) {}

absl::StatusOr<std::unique_ptr<JoinedWorker>> JoinedWorker::Join(
    const Connection& connection, const JoinOptions& options) {
  if (options.job_id.empty())
    return absl::InvalidArgumentError("job_id: empty");
  if (options.timeout <= absl::ZeroDuration())
    return absl::InvalidArgumentError("timeout: not a positive duration");
  // Not make_unique: the constructor is private.
  std::unique_ptr<JoinedWorker> w(new JoinedWorker(connection, options));
  PS_RETURN_IF_ERROR(w->Register());
  w->session_.StartHeartbeats();
  PS_RETURN_IF_ERROR(w->AwaitAssignment());
  PS_RETURN_IF_ERROR(w->Setup());
  return w;
}

JoinedWorker::~JoinedWorker() { Close(); }

absl::Status JoinedWorker::Register() {
  absl::Status s = session_.RegisterOnce(
      absl::Now() + std::min(options_.timeout, options_.control_deadline));
  if (!s.ok()) {
    return absl::Status(
        s.code(), absl::StrCat("registering for job ", options_.job_id,
                               " with the coordinator at ",
                               connection_.coordinator, ": ", s.message()));
  }
  worker_id_ = session_.worker_id();
  return absl::OkStatus();
}

absl::Status JoinedWorker::AwaitAssignment() {
  const absl::Time give_up = absl::Now() + options_.timeout;
  while (true) {
    if (aborted()) return AbortedStatus("waiting for its assignment");
    absl::Duration left = give_up - absl::Now();
    if (left <= absl::ZeroDuration()) return JoinTimeout();
    GetAssignmentRequest req;
    req.set_worker_id(worker_id_);
    req.set_wait_ms(static_cast<uint32_t>(
        absl::ToInt64Milliseconds(std::min(left, kAssignmentPoll))));
    GetAssignmentResponse resp;
    absl::Status s =
        coordinator_.CallUntil(&Coordinator::Stub::GetAssignment, req, &resp,
                               absl::Now() + std::min(left, kAssignmentPoll) +
                                   options_.control_deadline);
    if (s.code() == absl::StatusCode::kDeadlineExceeded) continue;
    if (!s.ok()) {
      return absl::Status(s.code(),
                          absl::StrCat("waiting for the assignment of job ",
                                       options_.job_id, ": ", s.message()));
    }
    if (!resp.has_assignment()) continue;
    if (resp.assignment().job_id() != options_.job_id) {
      return absl::InternalError(absl::StrCat(
          "the coordinator assigned job ", resp.assignment().job_id(),
          " to a worker registered for job ", options_.job_id));
    }
    assignment_ = resp.assignment();
    session_.StartJob(assignment_.job_id(), assignment_.rank());
    return absl::OkStatus();
  }
}

absl::Status JoinedWorker::JoinTimeout() const {
  GetJobRequest req;
  req.set_job_id(options_.job_id);
  JobStatus job;
  absl::Status s = coordinator_.Call(&Coordinator::Stub::GetJob, req, &job);
  std::string state =
      s.ok() ? absl::StrCat(JobState_Name(job.state()),
                            job.reason().empty() ? "" : ": ", job.reason())
             : absl::StrCat("state unknown: ", s.message());
  return absl::DeadlineExceededError(absl::StrCat(
      "job ", options_.job_id, " did not assign this worker (", worker_id_,
      ") within ", absl::FormatDuration(options_.timeout), "; the job is ",
      state));
}

absl::Status JoinedWorker::Setup() {
  PsClientOptions client_options = options_.client;
  // A shard that keeps failing is looked for at the coordinator: it may
  // have restarted at another address (worker/client/shard_relocator.h). The
  // client is destroyed in Close, before the coordinator connection.
  client_options.relocate_signal = relocate_;
  client_options.locate_shards =
      [this](absl::Time deadline) -> absl::StatusOr<ShardAddressesResponse> {
    // This job's: a failed shard's chunks are served where it holds their
    // backups.
    ShardAddressesRequest req;
    req.set_job_id(assignment_.job_id());
    ShardAddressesResponse resp;
    PS_RETURN_IF_ERROR(coordinator_.CallUntil(
        &Coordinator::Stub::GetShardAddresses, req, &resp, deadline));
    return resp;
  };
  PS_ASSIGN_OR_RETURN(std::unique_ptr<AsyncPsClient> client,
                      AsyncPsClient::Create(client_options, assignment_,
                                            &connection_.security));
  for (const TensorSpec& t : assignment_.spec().tensors()) {
    FlatTensor f;
    f.name = t.name();
    f.shape.assign(t.shape().begin(), t.shape().end());
    PS_ASSIGN_OR_RETURN(auto range, client->plan().TensorRange(t.name()));
    f.offset = range.first;
    f.size = range.second;
    tensors_.push_back(std::move(f));
  }
  params_.assign(client->num_parameters(), 0.0f);
  grads_.assign(client->num_parameters(), 0.0f);
  absl::MutexLock l(&mu_);
  client_ = std::move(client);
  return absl::OkStatus();
}

std::optional<std::string> JoinedWorker::aborted() const {
  std::optional<std::string> reason = session_.abort_reason();
  if (reason && reason->empty()) return "no reason given";
  return reason;
}

absl::Status JoinedWorker::AbortedStatus(absl::string_view during) const {
  return absl::AbortedError(absl::StrCat("job ", options_.job_id,
                                         " was aborted (", during,
                                         "): ", aborted().value_or("")));
}

absl::StatusOr<RequestHandle> JoinedWorker::Start(
    ParamOp op, uint64_t step, const std::vector<std::string>& tensors,
    int priority) {
  std::shared_ptr<AsyncPsClient> client;
  {
    absl::MutexLock l(&mu_);
    if (closed_) return ClosedStatus();
    client = client_;
  }
  for (const std::string& t : tensors) {
    if (!client->plan().TensorRange(t).ok()) {
      std::vector<std::string> names;
      for (const FlatTensor& f : tensors_) names.push_back(f.name);
      return absl::NotFoundError(absl::StrCat(
          "tensor \"", t, "\": job ", options_.job_id,
          " has no such tensor (it has ", absl::StrJoin(names, ", "), ")"));
    }
  }
  ParamRequest r;
  r.op = op;
  r.step = step;
  if (tensors.size() == 1) {
    r.tensor = tensors[0];
  } else {
    r.tensors = tensors;
  }
  if (op != ParamOp::kPull) r.gradient = grads_;
  if (op != ParamOp::kPush) r.params = absl::MakeSpan(params_);
  r.priority = priority;
  RequestHandle h = client->Start(std::move(r));
  absl::MutexLock l(&mu_);
  pending_[h.id()] = Pending{op, step};
  return h;
}

absl::Status JoinedWorker::Wait(RequestHandle handle, absl::Time deadline) {
  std::shared_ptr<AsyncPsClient> client;
  Pending p;
  {
    absl::MutexLock l(&mu_);
    if (closed_) return ClosedStatus();
    auto it = pending_.find(handle.id());
    if (it == pending_.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("handle ", handle.id(), ": not a request of job ",
                       options_.job_id, " that is still to be waited for"));
    }
    if (it->second.waiting) {
      return absl::FailedPreconditionError(absl::StrCat(
          "handle ", handle.id(), ": another thread is waiting for it"));
    }
    it->second.waiting = true;
    p = it->second;
    client = client_;
  }
  absl::Status s = client->Wait(handle, deadline);
  if (s.code() == absl::StatusCode::kDeadlineExceeded) {
    absl::MutexLock l(&mu_);
    auto it = pending_.find(handle.id());
    if (it != pending_.end()) it->second.waiting = false;
    return absl::DeadlineExceededError(absl::StrCat(
        "job ", options_.job_id, ": ", ParamOpName(p.op), " of step ", p.step,
        " (handle ", handle.id(), ") is not over yet; it carries on"));
  }
  {
    absl::MutexLock l(&mu_);
    pending_.erase(handle.id());
    if (s.ok() && p.op != ParamOp::kPull) {
      next_step_ = std::max(next_step_, p.step + 1);
    }
  }
  if (s.ok()) return s;
  if (aborted()) {
    return AbortedStatus(absl::StrCat(ParamOpName(p.op), " of step ", p.step,
                                      ": ", s.message()));
  }
  return absl::Status(
      s.code(), absl::StrCat("job ", options_.job_id, ": ", ParamOpName(p.op),
                             " of step ", p.step, ": ", s.message()));
}

absl::Status JoinedWorker::Cancel(RequestHandle handle) {
  std::shared_ptr<AsyncPsClient> client;
  {
    absl::MutexLock l(&mu_);
    if (closed_) return ClosedStatus();
    if (!pending_.contains(handle.id())) return absl::OkStatus();
    client = client_;
  }
  if (client != nullptr) client->Cancel(handle);
  return absl::OkStatus();
}

absl::Status JoinedWorker::ClosedStatus() const {
  return absl::FailedPreconditionError(
      absl::StrCat("worker of job ", options_.job_id, " is closed"));
}

bool JoinedWorker::closed() const {
  absl::MutexLock l(&mu_);
  return closed_;
}

absl::Status JoinedWorker::Report(const Progress& progress, bool finished,
                                  const std::string& error) {
  // Before any wait: a closed worker has no session to report for.
  if (closed()) return ClosedStatus();
  ProgressReport r;
  r.set_worker_id(worker_id_);
  r.set_job_id(options_.job_id);
  r.set_rank(assignment_.rank());
  *r.mutable_progress() = progress;
  r.set_finished(finished);
  r.set_error(error);
  ProgressReportResponse resp;
  absl::Status s =
      coordinator_.CallUntil(&Coordinator::Stub::ReportProgress, r, &resp,
                             absl::Now() + options_.control_deadline);
  if (!s.ok()) {
    return absl::Status(
        s.code(),
        absl::StrCat("progress report of job ", options_.job_id, " to ",
                     connection_.coordinator, ": ", s.message()));
  }
  if (resp.abort_job()) {
    session_.AbortedByCoordinator(resp.reason());
    return AbortedStatus("progress report");
  }
  return absl::OkStatus();
}

void JoinedWorker::Close() {
  std::shared_ptr<AsyncPsClient> client;
  std::vector<RequestHandle> cancel, wait;
  {
    absl::MutexLock l(&mu_);
    if (closed_) return;
    closed_ = true;
    client = std::move(client_);
    for (const auto& [id, p] : pending_) {
      cancel.push_back(RequestHandle(id));
      // A handle that another thread waits for is that thread's to finish
      // (AsyncPsClient takes one waiter per handle).
      if (!p.waiting) wait.push_back(RequestHandle(id));
    }
    pending_.clear();
  }
  session_.Close();  // the heartbeats
  if (client != nullptr) {
    for (const RequestHandle& h : cancel) client->Cancel(h);
    for (const RequestHandle& h : wait) (void)client->Wait(h);
    // Waits still running in other threads hold their own reference; the
    // last one out destroys the client, which waits for every request.
  }
  if (!worker_id_.empty()) Leave();
}

void JoinedWorker::Leave() {
  UnregisterRequest req;
  req.set_worker_id(worker_id_);
  {
    absl::MutexLock l(&mu_);
    req.set_next_step(next_step_);
  }
  req.set_reason("close()");
  UnregisterResponse resp;
  // Its failure is nobody's to handle: unheard, the coordinator loses the
  // worker after its timeout, as without Unregister.
  coordinator_
      .CallUntil(&Coordinator::Stub::Unregister, req, &resp,
                 absl::Now() + options_.control_deadline)
      .IgnoreError();
}

}  // namespace ps
