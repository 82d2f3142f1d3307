#include "worker/coordinator_session.h"

#include <unistd.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/defaults.h"
#include "common/grpc_status.h"
#include "common/logging.h"
#include "spdlog/spdlog.h"

namespace ps {
namespace {

constexpr absl::Duration kFirstBackoff = absl::Milliseconds(100);
constexpr absl::Duration kMaxBackoff = absl::Seconds(5);

std::string HostPid() {
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  return absl::StrCat(host, "-", getpid());
}

class StubCallsImpl : public CoordinatorCalls {
 public:
  StubCallsImpl(Coordinator::StubInterface* stub, const Security* security)
      : stub_(stub), security_(security) {}

  absl::Status RegisterWorker(const RegisterWorkerRequest& request,
                              RegisterWorkerResponse* response,
                              absl::Time deadline) override {
    grpc::ClientContext ctx;
    Prepare(&ctx, deadline);
    return FromGrpcStatus(stub_->RegisterWorker(&ctx, request, response));
  }
  absl::Status Heartbeat(const HeartbeatRequest& request,
                         HeartbeatResponse* response,
                         absl::Time deadline) override {
    grpc::ClientContext ctx;
    Prepare(&ctx, deadline);
    return FromGrpcStatus(stub_->Heartbeat(&ctx, request, response));
  }

 private:
  void Prepare(grpc::ClientContext* ctx, absl::Time deadline) const {
    ctx->set_deadline(absl::ToChronoTime(deadline));
    security_->Authorize(ctx);
  }

  Coordinator::StubInterface* const stub_;
  const Security* const security_;
};

class ClientCallsImpl : public CoordinatorCalls {
 public:
  explicit ClientCallsImpl(const CoordinatorClient* client) : client_(client) {}

  absl::Status RegisterWorker(const RegisterWorkerRequest& request,
                              RegisterWorkerResponse* response,
                              absl::Time deadline) override {
    return client_->CallUntil(&Coordinator::Stub::RegisterWorker, request,
                              response, deadline);
  }
  absl::Status Heartbeat(const HeartbeatRequest& request,
                         HeartbeatResponse* response,
                         absl::Time deadline) override {
    return client_->CallUntil(&Coordinator::Stub::Heartbeat, request, response,
                              deadline);
  }

 private:
  const CoordinatorClient* const client_;
};

}  // namespace

std::string DefaultWorkerName() { return HostPid(); }

std::string UniqueWorkerName() {
  static std::atomic<uint64_t> joined{0};
  return absl::StrCat(HostPid(), "-", joined++);
}

std::unique_ptr<CoordinatorCalls> StubCalls(Coordinator::StubInterface* stub,
                                            const Security* security) {
  return std::make_unique<StubCallsImpl>(stub, security);
}

std::unique_ptr<CoordinatorCalls> ClientCalls(const CoordinatorClient* client) {
  return std::make_unique<ClientCallsImpl>(client);
}

CoordinatorSession::CoordinatorSession(Options options,
                                       std::unique_ptr<CoordinatorCalls> calls)
    : options_(std::move(options)),
      calls_(std::move(calls)),
      interval_(options_.heartbeat_interval > absl::ZeroDuration()
                    ? options_.heartbeat_interval
                    : absl::Milliseconds(kDefaultHeartbeatIntervalMs)),
      job_(options_.job_id) {}

CoordinatorSession::~CoordinatorSession() { Close(); }

absl::Status CoordinatorSession::RegisterOnce(absl::Time deadline) {
  RegisterWorkerRequest request;
  request.set_name(options_.name);
  if (!options_.job_id.empty()) request.set_job_id(options_.job_id);
  for (const std::string& d : options_.devices) request.add_devices(d);
  RegisterWorkerResponse response;
  absl::Status s = calls_->RegisterWorker(request, &response, deadline);
  if (!s.ok()) return s;
  absl::MutexLock l(&mu_);
  worker_id_ = response.worker_id();
  registered_ = true;
  if (options_.heartbeat_interval <= absl::ZeroDuration()) {
    interval_ = absl::Milliseconds(response.heartbeat_interval_ms() > 0
                                       ? response.heartbeat_interval_ms()
                                       : kDefaultHeartbeatIntervalMs);
  }
  return absl::OkStatus();
}

absl::Status CoordinatorSession::Register() {
  absl::Duration backoff = kFirstBackoff;
  while (!stopping_.HasBeenNotified()) {
    absl::Status s = RegisterOnce(absl::Now() + options_.register_deadline);
    if (s.ok()) {
      spdlog::info("registered with the coordinator at {} as {} ({})",
                   options_.coordinator, worker_id(), options_.name);
      return absl::OkStatus();
    }
    if (s.code() == absl::StatusCode::kUnauthenticated ||
        s.code() == absl::StatusCode::kInvalidArgument) {
      return absl::Status(s.code(),
                          absl::StrCat("RegisterWorker: ", s.message()));
    }
    spdlog::warn("RegisterWorker at {}: {}; retrying in {}",
                 options_.coordinator, s.message(),
                 absl::FormatDuration(backoff));
    stopping_.WaitForNotificationWithTimeout(backoff);
    backoff = std::min(backoff * 2, kMaxBackoff);
  }
  return absl::CancelledError("stopped");
}

void CoordinatorSession::Reregister() {
  absl::MutexLock l(&mu_);
  registered_ = false;
}

bool CoordinatorSession::registered() const {
  absl::MutexLock l(&mu_);
  return registered_;
}

std::string CoordinatorSession::worker_id() const {
  absl::MutexLock l(&mu_);
  return worker_id_;
}

absl::Duration CoordinatorSession::heartbeat_interval() const {
  absl::MutexLock l(&mu_);
  return interval_;
}

void CoordinatorSession::StartHeartbeats() {
  absl::MutexLock l(&mu_);
  if (closed_ || heartbeat_.joinable()) return;
  heartbeat_ = std::thread([this] { HeartbeatLoop(); });
}

void CoordinatorSession::Stop() {
  absl::MutexLock l(&mu_);
  if (!stopping_.HasBeenNotified()) stopping_.Notify();
}

void CoordinatorSession::Close() {
  Stop();
  std::thread heartbeat;
  {
    absl::MutexLock l(&mu_);
    if (closed_) return;
    closed_ = true;
    heartbeat = std::move(heartbeat_);
  }
  if (heartbeat.joinable()) heartbeat.join();
}

void CoordinatorSession::HeartbeatLoop() {
  while (!stopping_.WaitForNotificationWithTimeout(heartbeat_interval())) {
    HeartbeatResponse response;
    if (!Beat(&response)) continue;
    if (options_.on_heartbeat) options_.on_heartbeat(response);
  }
}

bool CoordinatorSession::Beat(HeartbeatResponse* response) {
  HeartbeatRequest request;
  // The job run when the heartbeat left: an answer about who leads counts
  // only for it (one sent before the next job started knows nothing of it).
  std::string job_at_send;
  bool running_at_send;
  absl::Duration interval;
  {
    absl::MutexLock l(&mu_);
    if (!registered_) return false;
    request.set_worker_id(worker_id_);
    job_at_send = job_;
    running_at_send = running_;
    interval = interval_;
  }
  absl::Status s = calls_->Heartbeat(
      request, response,
      absl::Now() + std::min(interval, options_.heartbeat_deadline_cap));
  if (!s.ok()) {
    if (options_.log_events) spdlog::warn("heartbeat: {}", s.message());
    return false;
  }
  absl::MutexLock l(&mu_);
  if (response->abort_job() && !job_.empty() &&
      AbortLocked(response->reason()) && options_.log_events) {
    spdlog::warn("job {} aborted by the coordinator: {}", job_,
                 response->reason());
  }
  if (running_ && running_at_send && job_ == job_at_send) {
    leads_ = response->leads_job() == job_;
  }
  if (response->reregister()) {
    if (options_.when_forgotten == WhenForgotten::kRegisterAgain) {
      if (options_.log_events) {
        spdlog::warn("the coordinator does not know {}; registering again",
                     worker_id_);
      }
      registered_ = false;
    } else {
      AbortLocked(absl::StrCat("the coordinator no longer knows worker ",
                               worker_id_, " (it restarted); join again"));
    }
  }
  return true;
}

void CoordinatorSession::StartJob(const std::string& job_id, uint32_t rank) {
  absl::MutexLock l(&mu_);
  job_ = job_id;
  rank_ = rank;
  running_ = true;
  leads_ = rank == 0;
}

void CoordinatorSession::EndJob() {
  absl::MutexLock l(&mu_);
  job_ = options_.job_id;
  running_ = false;
}

CoordinatorSession::Snapshot CoordinatorSession::snapshot() const {
  absl::MutexLock l(&mu_);
  return Snapshot{worker_id_, job_, rank_};
}

bool CoordinatorSession::AbortLocked(const std::string& reason) {
  if (abort_) return false;
  abort_reason_ = reason;
  abort_ = true;
  return true;
}

bool CoordinatorSession::Abort(const std::string& reason) {
  absl::MutexLock l(&mu_);
  return AbortLocked(reason);
}

void CoordinatorSession::AbortedByCoordinator(const std::string& reason) {
  absl::MutexLock l(&mu_);
  if (AbortLocked(reason) && options_.log_events) {
    spdlog::warn("job {} aborted by the coordinator: {}", job_, reason);
  }
}

void CoordinatorSession::ClearAbort() {
  absl::MutexLock l(&mu_);
  abort_reason_.clear();
  abort_ = false;
}

std::optional<std::string> CoordinatorSession::abort_reason() const {
  absl::MutexLock l(&mu_);
  if (!abort_) return std::nullopt;
  return abort_reason_;
}

}  // namespace ps
