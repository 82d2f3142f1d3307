#include "worker/workerd.h"

#include <algorithm>
#include <deque>
#include <string>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/grpc_status.h"
#include "common/logging.h"
#include "common/socket_pacing.h"
#include "common/status_macros.h"
#include "spdlog/spdlog.h"
#include "worker/backend/backend_factory.h"

namespace ps {
namespace {

// Long-poll wait for an assignment, and the margin its RPC deadline adds.
constexpr uint32_t kAssignmentWaitMs = 5000;
constexpr absl::Duration kControlDeadline = absl::Seconds(10);
constexpr absl::Duration kMaxBackoff = absl::Seconds(5);

// Sends the trainer's progress to the coordinator from its own thread, so
// the training loop never waits on the coordinator. Only the newest report
// matters; older unsent ones are replaced.
class ProgressReporter {
 public:
  using Send = std::function<void(const ProgressReport&)>;
  explicit ProgressReporter(Send send)
      : send_(std::move(send)), thread_([this] { Loop(); }) {}
  ~ProgressReporter() {
    {
      absl::MutexLock l(&mu_);
      closing_ = true;
    }
    thread_.join();
  }
  void Offer(const ProgressReport& r) {
    absl::MutexLock l(&mu_);
    pending_ = r;
    has_pending_ = true;
  }

 private:
  void Loop() {
    while (true) {
      ProgressReport r;
      {
        absl::MutexLock l(&mu_);
        mu_.Await(absl::Condition(
            +[](ProgressReporter* p) ABSL_EXCLUSIVE_LOCKS_REQUIRED(p->mu_) {
              return p->closing_ || p->has_pending_;
            },
            this));
        if (!has_pending_) return;
        r = pending_;
        has_pending_ = false;
      }
      send_(r);
    }
  }
  Send send_;
  absl::Mutex mu_;
  ProgressReport pending_ ABSL_GUARDED_BY(mu_);
  bool has_pending_ ABSL_GUARDED_BY(mu_) = false;
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

PsClientOptions ClientOptions(const WorkerdConfig& c) {
  PsClientOptions options;
  options.rpc_deadline = absl::Milliseconds(c.rpc_deadline_ms());
  options.max_attempts = static_cast<int>(c.rpc_max_attempts());
  options.max_inflight_per_shard = static_cast<int>(c.max_inflight_per_shard());
  options.max_request_bytes = c.max_request_bytes();
  options.max_message_bytes = static_cast<int>(c.max_message_bytes());
  options.channels_per_shard = static_cast<int>(c.channels_per_shard());
  options.link_bytes_per_s = LinkBytesPerSecond(c.link_rate_mbit());
  options.delta_pulls = !c.disable_delta_pulls();
  options.locate_interval = absl::Milliseconds(c.shard_locate_interval_ms());
  return options;
}

// The final evaluation for the log: a ctr model's AUC, another's accuracy,
// nothing where this rank evaluates nothing (-1).
std::string FinalScore(const Progress& p) {
  if (p.test_auc() >= 0) {
    return absl::StrFormat(", test AUC %.4f (teacher %.4f)", p.test_auc(),
                           p.teacher_auc());
  }
  if (p.test_accuracy() >= 0) {
    return absl::StrFormat(", test accuracy %.4f", p.test_accuracy());
  }
  return "";
}

}  // namespace

absl::Status CheckDevices(const WorkerdConfig& config, bool cuda_built,
                          int gpu_count) {
  for (int i = 0; i < config.devices_size(); ++i) {
    absl::string_view device = config.devices(i);
    uint32_t index = 0;
    // Config loading has checked the "cpu:N" / "gpu:N" form.
    if (!absl::ConsumePrefix(&device, "gpu:") ||
        !absl::SimpleAtoi(device, &index)) {
      continue;
    }
    std::string problem;
    if (!cuda_built) {
      problem = "this workerd was built without CUDA (no nvcc at build time)";
    } else if (gpu_count <= 0) {
      problem = "no CUDA devices visible";
    } else if (index >= static_cast<uint32_t>(gpu_count)) {
      problem = absl::StrCat("only ", gpu_count, " CUDA device",
                             gpu_count == 1 ? "" : "s",
                             " visible (gpu:0..gpu:", gpu_count - 1, ")");
    }
    if (!problem.empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "devices[", i, "] \"", config.devices(i), "\": ", problem));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckDevices(const WorkerdConfig& config) {
  return CheckDevices(config, CudaBuilt(), GpuCount());
}

namespace {

// The table cpu_kernels "auto" keeps its choices in: the configured file,
// the default one, or (with "none", or a file that cannot be read) memory.
std::unique_ptr<KernelChoices> OpenKernelChoices(const WorkerdConfig& c) {
  if (c.cpu_kernels() != "auto") return std::make_unique<KernelChoices>();
  std::string path = c.cpu_kernel_choices_file();
  if (path == "none") return std::make_unique<KernelChoices>();
  if (path.empty()) path = DefaultKernelChoicesPath();
  absl::StatusOr<std::unique_ptr<KernelChoices>> choices =
      KernelChoices::Open(path);
  if (!choices.ok()) {
    spdlog::warn(
        "cpu_kernel_choices_file: {}; kernel choices kept in memory only, "
        "timed at every start",
        choices.status().message());
    return std::make_unique<KernelChoices>();
  }
  if ((*choices)->skipped_lines() > 0) {
    spdlog::warn(
        "cpu_kernel_choices_file {}: {} lines skipped (not KEY<TAB>"
        "onednn|openblas); those shapes are timed again",
        path, (*choices)->skipped_lines());
  }
  spdlog::info("cpu kernel choices: {}", path);
  return *std::move(choices);
}

}  // namespace

Workerd::Workerd(LoadedWorkerdConfig config)
    : config_(std::move(config)),
      name_(config_.workerd.name().empty() ? DefaultWorkerName()
                                           : config_.workerd.name()),
      kernel_choices_(OpenKernelChoices(config_.workerd)) {}

Workerd::~Workerd() {
  Stop();
  // Joins the heartbeats, which call back into this Workerd.
  if (session_ != nullptr) session_->Close();
}

void Workerd::Stop() {
  absl::MutexLock l(&mu_);
  if (!stopping_.HasBeenNotified()) stopping_.Notify();
  if (session_ != nullptr) {
    session_->Abort("");
    session_->Stop();
  }
  if (poll_context_ != nullptr) poll_context_->TryCancel();
  // Leaving: the step in flight completes, so that no push of it is left
  // half-applied when the rank leaves the quorum.
  if (job_client_ != nullptr && !config_.workerd.leave_on_term()) {
    job_client_->CancelAll("workerd stopping");
  }
}

void Workerd::Leave(const std::string& reason) {
  if (session_ == nullptr || !session_->registered()) return;
  UnregisterRequest req;
  req.set_worker_id(session_->worker_id());
  req.set_next_step(next_step_);
  req.set_reason(reason);
  UnregisterResponse resp;
  absl::Status s = FromGrpcStatus(
      stub_->Unregister(NewContext(kControlDeadline).get(), req, &resp));
  if (!s.ok()) {
    spdlog::warn(
        "Unregister: {}; the coordinator loses this worker after "
        "its timeout",
        s.message());
  } else {
    spdlog::info("left the coordinator{} before step {}",
                 resp.known() ? "" : " (it did not know this worker)",
                 next_step_);
  }
}

PsClientOptions Workerd::JobClientOptions(const std::string& job_id) {
  PsClientOptions options = ClientOptions(config_.workerd);
  options.tracer = &tracer_;
  // A shard that keeps failing is looked for at the coordinator: it may
  // have restarted at another address (worker/client/shard_relocator.h).
  options.locate_shards =
      [this,
       job_id](absl::Time deadline) -> absl::StatusOr<ShardAddressesResponse> {
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(deadline));
    security_.Authorize(&ctx);
    ShardAddressesRequest req;
    req.set_job_id(job_id);
    ShardAddressesResponse resp;
    PS_RETURN_IF_ERROR(
        FromGrpcStatus(stub_->GetShardAddresses(&ctx, req, &resp)));
    return resp;
  };
  options.relocate_signal = relocate_;
  return options;
}

std::unique_ptr<grpc::ClientContext> Workerd::NewContext(
    absl::Duration deadline) const {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(absl::ToChronoTime(absl::Now() + deadline));
  security_.Authorize(ctx.get());
  return ctx;
}

absl::Status Workerd::Connect() {
  PS_ASSIGN_OR_RETURN(security_, Security::FromCluster(config_.cluster.config));
  absl::Duration backoff = absl::Milliseconds(100);
  while (!stopping_.HasBeenNotified()) {
    absl::StatusOr<std::string> address = ResolveCoordinatorAddress(
        config_.cluster, absl::Now() + absl::Seconds(10), &stopping_);
    if (address.ok()) {
      coordinator_address_ = *address;
      stub_ = Coordinator::NewStub(security_.NewChannel(coordinator_address_));
      StartSession();
      return absl::OkStatus();
    }
    spdlog::warn("coordinator address: {}; retrying",
                 address.status().message());
    stopping_.WaitForNotificationWithTimeout(backoff);
    backoff = std::min(backoff * 2, kMaxBackoff);
  }
  return absl::CancelledError("stopped");
}

void Workerd::StartSession() {
  CoordinatorSession::Options options;
  options.name = name_;
  options.devices.assign(config_.workerd.devices().begin(),
                         config_.workerd.devices().end());
  options.coordinator = coordinator_address_;
  options.heartbeat_interval =
      absl::Milliseconds(config_.workerd.heartbeat_interval_ms());
  // register_deadline: the session's generous default (a registration may
  // wait for the job it starts to be created on the shards).
  options.when_forgotten = CoordinatorSession::WhenForgotten::kRegisterAgain;
  options.on_heartbeat = [this](const HeartbeatResponse& resp) {
    OnHeartbeat(resp);
  };
  absl::MutexLock l(&mu_);
  session_ = std::make_unique<CoordinatorSession>(
      std::move(options), StubCalls(stub_.get(), &security_));
  if (stopping_.HasBeenNotified()) session_->Stop();
}

void Workerd::OnHeartbeat(const HeartbeatResponse& resp) {
  // A new replica epoch: a shard may have failed over; the job's clients
  // look the shards up now (worker/client/shard_relocator.h).
  relocate_->OnReplicaEpoch(resp.replica_epoch());
  if (!resp.leave_job().empty() &&
      resp.leave_job() == session_->snapshot().job_id &&
      !scaled_down_.exchange(true)) {
    // The trainer stops before its next step; RunJob then unregisters.
    spdlog::info("job {}: scaled down, leaving after the step in flight",
                 resp.leave_job());
    session_->Abort("scaled down");
  }
  if (resp.has_trace() &&
      resp.trace().job_id() == session_->snapshot().job_id) {
    tracer_.SetWindow(resp.trace());
  }
  MaybeUploadTrace(/*job_over=*/false);
}

void Workerd::MaybeUploadTrace(bool job_over) {
  absl::MutexLock upload_lock(&trace_mu_);
  const TraceWindow window = tracer_.window();
  if (window.job_id().empty() ||
      (window.job_id() == trace_uploaded_.job_id() &&
       window.begin_step() == trace_uploaded_.begin_step() &&
       window.end_step() == trace_uploaded_.end_step())) {
    return;
  }
  if (!job_over && !tracer_.Complete()) return;
  TraceRecorder::Snapshot snap = tracer_.Copy();
  UploadTraceRequest req;
  const CoordinatorSession::Snapshot now = session_->snapshot();
  if (now.job_id != window.job_id()) return;  // a job that is gone
  req.set_worker_id(now.worker_id);
  req.set_rank(now.rank);
  *req.mutable_window() = snap.window;
  req.set_name(name_);
  *req.mutable_devices() = config_.workerd.devices();
  req.mutable_spans()->Reserve(static_cast<int>(snap.spans.size()));
  for (TraceSpan& s : snap.spans) *req.add_spans() = std::move(s);
  req.set_dropped(snap.dropped);
  UploadTraceResponse resp;
  absl::Status s = FromGrpcStatus(
      stub_->UploadTrace(NewContext(kControlDeadline).get(), req, &resp));
  if (!s.ok()) {
    spdlog::warn("UploadTrace of job {} steps [{}, {}): {}", window.job_id(),
                 window.begin_step(), window.end_step(), s.message());
    if (!job_over) return;  // the next heartbeat tries again
  } else {
    spdlog::info("job {}: trace of steps [{}, {}) uploaded, {} spans",
                 window.job_id(), window.begin_step(), window.end_step(),
                 req.spans_size());
  }
  trace_uploaded_ = window;
}

absl::Status Workerd::StartMetrics() {
  const WorkerdConfig& c = config_.workerd;
  if (c.metrics_address().empty()) return absl::OkStatus();
  absl::StatusOr<Security> security =
      Security::FromCluster(config_.cluster.config);
  if (!security.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(config_.cluster.path, ": ", security.status().message()));
  }
  metrics_security_ = *std::move(security);
  MetricsServer::Options options;
  options.listen_address = c.metrics_address();
  options.address_file = c.metrics_address_file();
  absl::StatusOr<std::unique_ptr<MetricsServer>> server =
      MetricsServer::Start(options, metrics_, &metrics_security_);
  if (!server.ok()) {
    return absl::Status(
        server.status().code(),
        absl::StrCat(config_.path, ": ", server.status().message()));
  }
  metrics_server_ = *std::move(server);
  spdlog::info("metrics on http://{}/metrics", metrics_server_->address());
  return absl::OkStatus();
}

absl::Status Workerd::Run() {
  absl::Status s = Connect();
  if (!s.ok())
    return s.code() == absl::StatusCode::kCancelled ? absl::OkStatus() : s;
  session_->StartHeartbeats();
  uint32_t jobs_done = 0;
  absl::Duration backoff = absl::Milliseconds(100);
  while (!stopping_.HasBeenNotified()) {
    if (!session_->registered()) {
      s = session_->Register();
      if (!s.ok())
        return s.code() == absl::StatusCode::kCancelled ? absl::OkStatus() : s;
      continue;
    }
    GetAssignmentRequest req;
    req.set_worker_id(session_->worker_id());
    req.set_wait_ms(kAssignmentWaitMs);
    GetAssignmentResponse resp;
    std::unique_ptr<grpc::ClientContext> ctx =
        NewContext(absl::Milliseconds(kAssignmentWaitMs) + kControlDeadline);
    {
      absl::MutexLock l(&mu_);
      if (stopping_.HasBeenNotified()) break;
      poll_context_ = ctx.get();
    }
    s = FromGrpcStatus(stub_->GetAssignment(ctx.get(), req, &resp));
    {
      absl::MutexLock l(&mu_);
      poll_context_ = nullptr;
    }
    if (stopping_.HasBeenNotified()) break;
    if (s.code() == absl::StatusCode::kNotFound) {
      session_->Reregister();
      continue;
    }
    if (!s.ok()) {
      spdlog::warn("GetAssignment: {}; retrying in {}", s.message(),
                   absl::FormatDuration(backoff));
      stopping_.WaitForNotificationWithTimeout(backoff);
      backoff = std::min(backoff * 2, kMaxBackoff);
      continue;
    }
    backoff = absl::Milliseconds(100);
    if (!resp.has_assignment()) continue;
    RunJob(resp.assignment());
    ++jobs_done;
    if (config_.workerd.max_jobs() > 0 &&
        jobs_done >= config_.workerd.max_jobs())
      break;
  }
  if (config_.workerd.leave_on_term() && stopping_.HasBeenNotified()) {
    Leave("SIGTERM (leave_on_term)");
  }
  return absl::OkStatus();
}

void Workerd::SendProgress(const ProgressReport& r) {
  ProgressReportResponse resp;
  absl::Status s = FromGrpcStatus(
      stub_->ReportProgress(NewContext(kControlDeadline).get(), r, &resp));
  if (!s.ok()) {
    spdlog::warn("ReportProgress: {}", s.message());
  } else if (resp.abort_job()) {
    session_->AbortedByCoordinator(resp.reason());
  }
}

void Workerd::RunJob(const Assignment& a) {
  session_->ClearAbort();
  scaled_down_ = false;
  session_->StartJob(a.job_id(), a.rank());
  next_step_ = a.start_step();
  tracer_.Clear();
  if (stopping_.HasBeenNotified()) session_->Abort("");
  const std::string worker_id = session_->worker_id();
  spdlog::info("job {}: rank {} of {}, starting at step {}", a.job_id(),
               a.rank(), a.num_workers(), a.start_step());

  auto send = [this](const ProgressReport& r) { SendProgress(r); };
  ProgressReport base;
  base.set_worker_id(worker_id);
  base.set_job_id(a.job_id());
  base.set_rank(a.rank());

  absl::Status status;
  Progress last;
  {
    ProgressReporter reporter(send);
    status = Train(
        a,
        [&](const Progress& p) {
          metrics_->Update(a.job_id(), a.rank(), p);
          ProgressReport r = base;
          *r.mutable_progress() = p;
          reporter.Offer(r);
        },
        &last);
  }  // the reporter flushes and stops here
  MaybeUploadTrace(/*job_over=*/true);

  metrics_->Update(a.job_id(), a.rank(), last);
  ProgressReport final_report = base;
  *final_report.mutable_progress() = last;
  if (status.ok()) {
    final_report.set_finished(true);
    spdlog::info("job {}: finished{}", a.job_id(), FinalScore(last));
  } else if (status.code() == absl::StatusCode::kCancelled ||
             stopping_.HasBeenNotified()) {
    // Stop cancels the job's calls: whatever they failed with, the worker
    // stopped; the job's fate is the coordinator's (lost worker).
    status = absl::CancelledError("workerd stopping");
    const std::string reason = session_->abort_reason().value_or("");
    spdlog::info("job {}: stopped ({})", a.job_id(),
                 reason.empty() ? "worker stopping" : reason);
  } else {
    final_report.set_error(absl::StrCat(name_, ": ", status.message()));
    spdlog::error("job {}: {}", a.job_id(), status.message());
  }
  if (status.code() != absl::StatusCode::kCancelled) send(final_report);
  session_->EndJob();
  if (scaled_down_.exchange(false) && !stopping_.HasBeenNotified()) {
    // Our rank leaves the quorum now; registered again, this worker is
    // idle for the next job (or the next scale up).
    Leave("scaled down");
    session_->Reregister();
  }
}

}  // namespace ps
