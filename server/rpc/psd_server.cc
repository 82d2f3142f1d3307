#include "server/rpc/psd_server.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/logging.h"
#include "common/socket_pacing.h"
#include "common/status_macros.h"
#include "common/text_proto.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"
#include "proto/coordinator.grpc.pb.h"
#include "proto/ps.grpc.pb.h"
#include "server/shard_metrics.h"
#include "spdlog/spdlog.h"

namespace ps {
namespace {

// How often deadlines, long-polls and heartbeats are checked.
constexpr absl::Duration kHousekeepingPeriod = absl::Milliseconds(100);
// The job store's file name in state_dir.
constexpr char kJobStoreFile[] = "jobs.sqlite";
// How long the coordinator waits for the other shards' address files.
constexpr absl::Duration kResolveShardsTimeout = absl::Seconds(60);
// How long the status page waits for each other shard's Stats.
constexpr absl::Duration kStatusStatsDeadline = absl::Seconds(2);
// Deadline of the coordinator's calls to the shards (RegisterJob, DropJob,
// SetMembership), including the wait for a shard that is restarting.
constexpr absl::Duration kShardCallDeadline = absl::Seconds(30);

// `status` with "`prefix`: " before its message; OK stays OK.
absl::Status Prefixed(absl::string_view prefix, const absl::Status& status) {
  if (status.ok()) return status;
  return absl::Status(status.code(),
                      absl::StrCat(prefix, ": ", status.message()));
}

}  // namespace

PsdServer::PsdServer(LoadedPsdConfig config) : config_(std::move(config)) {}

PsdServer::~PsdServer() { Stop(); }

bool PsdServer::is_coordinator() const {
  return config_.psd.shard_id() == config_.cluster.config.coordinator_shard();
}

absl::Status PsdServer::Start() {
  if (is_coordinator()) PS_RETURN_IF_ERROR(OpenJobStore());
  PS_RETURN_IF_ERROR(OpenShard());
  PS_RETURN_IF_ERROR(StartStatusPage());
  PS_RETURN_IF_ERROR(Listen());
  if (!config_.psd.address_file().empty()) {
    absl::Status w =
        WriteFileAtomically(config_.psd.address_file(), address_ + "\n");
    if (!w.ok()) {
      server_->Shutdown();
      return Prefixed("address_file", w);
    }
  }
  if (absl::Status m = StartMetrics(); !m.ok()) {
    server_->Shutdown();
    return Prefixed(config_.path, m);
  }
  started_ = true;
  spdlog::info("shard {} listening on {}{}{}", config_.psd.shard_id(), address_,
               security_.tls() ? " (TLS)" : "",
               security_.has_token() ? " (token)" : "");
  housekeeping_ = std::thread([this] { Housekeeping(); });
  if (is_coordinator()) {
    coordinator_starter_ = std::thread([this] { StartCoordinator(); });
  } else {
    coordinator_ready_.Notify();
  }
  return absl::OkStatus();
}

std::string PsdServer::JobStorePath() const {
  const std::string& dir = config_.psd.state_dir();
  return dir.empty() ? "" : absl::StrCat(dir, "/", kJobStoreFile);
}

absl::Status PsdServer::ResetState() {
  if (!is_coordinator() || JobStorePath().empty()) return absl::OkStatus();
  absl::StatusOr<std::string> moved =
      JobStore::MoveAside(JobStorePath(), absl::Now());
  if (moved.status().code() == absl::StatusCode::kNotFound) {
    return absl::OkStatus();
  }
  if (!moved.ok()) return absl::InvalidArgumentError(moved.status().message());
  spdlog::warn("--reset_state: moved the job store {} aside to {}",
               JobStorePath(), *moved);
  return absl::OkStatus();
}

absl::Status PsdServer::OpenJobStore() {
  if (JobStorePath().empty()) {
    spdlog::warn(
        "{}: no state_dir: jobs are not durable (a restarted coordinator "
        "forgets them)",
        config_.path);
    return absl::OkStatus();
  }
  JobStore::Options options;
  options.path = JobStorePath();
  options.max_history_rows = config_.psd.progress_history_rows();
  absl::StatusOr<std::unique_ptr<JobStore>> store = JobStore::Open(options);
  if (!store.ok()) {
    return absl::InvalidArgumentError(store.status().message());
  }
  // Read it all once now: a row that does not decode stops psd here, not
  // later on the coordinator's start thread.
  if (absl::StatusOr<StoredState> state = (*store)->Load(); !state.ok()) {
    return absl::InvalidArgumentError(state.status().message());
  }
  job_store_ = *std::move(store);
  spdlog::info("job store {} (schema version {})", options.path,
               JobStore::kSchemaVersion);
  return absl::OkStatus();
}

absl::Status PsdServer::OpenShard() {
  absl::StatusOr<Security> security =
      Security::FromCluster(config_.cluster.config);
  if (!security.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(config_.cluster.path, ": ", security.status().message()));
  }
  security_ = *std::move(security);
  ShardOptions shard_options;
  shard_options.shard_id = config_.psd.shard_id();
  shard_options.memory_budget_bytes = config_.psd.memory_budget_bytes();
  shard_options.checkpoint_dir = config_.psd.checkpoint_dir();
  shard_options.testing_kill_at_commit_epoch =
      config_.psd.testing_kill_at_commit_epoch();
  // Time for the coordinator's first heartbeat to reach a restarted psd
  // (one window of misses, and one more for a beat held up by a hung
  // shard before this one).
  shard_options.unknown_job_grace =
      2 * absl::Milliseconds(config_.psd.shard_heartbeat_ms()) *
      config_.psd.shard_heartbeat_misses();
  // A re-placement's fetches: half a message of chunk states per call.
  const int max_message_bytes =
      static_cast<int>(config_.psd.max_message_bytes());
  shard_options.fetch_batch_bytes = std::min<uint64_t>(
      shard_options.fetch_batch_bytes, max_message_bytes / 2);
  shard_ = std::make_unique<Shard>(shard_options);
  replica_sender_ = std::make_unique<GrpcReplicaSender>(&security_);
  shard_->SetReplicaSender(
      [sender = replica_sender_.get()](const std::string& address,
                                       const ReplicateRequest& req,
                                       absl::Time deadline) {
        return sender->Send(address, req, deadline);
      });
  chunk_fetcher_ =
      std::make_unique<GrpcChunkFetcher>(&security_, max_message_bytes);
  shard_->SetChunkFetcher([fetcher = chunk_fetcher_.get()](
                              const std::string& address,
                              const FetchChunksRequest& req,
                              absl::Time deadline, FetchChunksResponse* resp) {
    return fetcher->Fetch(address, req, deadline, resp);
  });
  // Restore before listening: a worker retrying through a restart must find
  // its job exactly as the checkpoint left it, never a missing one.
  Shard::RestoreReport restore;
  PS_RETURN_IF_ERROR(Prefixed(config_.path, shard_->OpenCheckpoints(&restore)));
  for (const std::string& problem : restore.problems) {
    spdlog::error("shard {}: {}", config_.psd.shard_id(), problem);
  }
  for (const std::string& job : restore.restored) {
    spdlog::info("shard {}: restored {}", config_.psd.shard_id(), job);
  }
  return absl::OkStatus();
}

absl::Status PsdServer::StartStatusPage() {
  const std::string& address = config_.psd.status_address();
  if (address.empty()) return absl::OkStatus();
  if (!is_coordinator()) {
    spdlog::warn("{}: status_address is read by the coordinator shard only",
                 config_.path);
    return absl::OkStatus();
  }
  status_source_ = std::make_unique<PsdStatusSource>(
      shard_.get(), config_.psd.shard_id(), &security_, kStatusStatsDeadline);
  HttpServer::Options options;
  options.address = address;
  PS_ASSIGN_OR_RETURN(
      status_http_,
      HttpServer::Start(options, StatusPageRoutes(status_source_.get())));
  if (!config_.psd.status_address_file().empty()) {
    absl::Status w = WriteFileAtomically(config_.psd.status_address_file(),
                                         status_http_->address() + "\n");
    if (!w.ok()) {
      status_http_.reset();
      return absl::InvalidArgumentError(
          absl::StrCat("status_address_file: ", w.message()));
    }
  }
  spdlog::info("status page on http://{}/", status_http_->address());
  return absl::OkStatus();
}

absl::Status PsdServer::Listen() {
  ps_service_ = std::make_unique<PsService>(shard_.get(), &security_);
  // Both are process-wide settings read by the builder.
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(config_.psd.listen_address(),
                           security_.ServerCredentials(), &port);
  ApplyTransportSettings(static_cast<int>(config_.psd.max_message_bytes()),
                         &builder);
  if (const uint64_t link = LinkBytesPerSecond(config_.psd.link_rate_mbit());
      link > 0) {
    // Each connection accepted gets its share of the link by the workers of
    // the jobs registered then (workers connect after their job is).
    builder.SetOption(ServerPacingOption([this, link] {
      return link / std::max<uint64_t>(1, shard_->WorkerSlots());
    }));
  }
  builder.RegisterService(ps_service_.get());
  if (is_coordinator()) {
    coordinator_service_ = std::make_unique<CoordinatorService>(&security_);
    builder.RegisterService(coordinator_service_.get());
  }
  server_ = builder.BuildAndStart();
  if (server_ == nullptr || port == 0) {
    return absl::UnavailableError(absl::StrCat(
        "listen_address: cannot listen on ", config_.psd.listen_address(),
        " (in use, or not an address of this machine)"));
  }
  // The shard restored its checkpoints before: it serves from here on, the
  // coordinator (if this shard runs it) once it opened.
  SetHealth(/*shard_serving=*/true, /*coordinator_serving=*/false);
  std::string host = config_.psd.listen_address().substr(
      0, config_.psd.listen_address().rfind(':'));
  address_ = absl::StrCat(host, ":", port);
  return absl::OkStatus();
}

absl::Status PsdServer::StartMetrics() {
  if (config_.psd.metrics_address().empty()) return absl::OkStatus();
  MetricsServer::Options options;
  options.listen_address = config_.psd.metrics_address();
  options.address_file = config_.psd.metrics_address_file();
  PS_ASSIGN_OR_RETURN(
      metrics_,
      MetricsServer::Start(
          options, std::make_shared<ShardMetrics>(shard_.get()), &security_));
  spdlog::info("shard {} metrics on http://{}/metrics", config_.psd.shard_id(),
               metrics_->address());
  return absl::OkStatus();
}

void PsdServer::StartCoordinator() {
  absl::Status s = OpenCoordinator();
  if (s.code() == absl::StatusCode::kCancelled) {
    spdlog::info("coordinator not started: {}", s.message());
  } else if (!s.ok()) {
    spdlog::error("coordinator not started: {}", s.message());
  }
  SetHealth(/*shard_serving=*/true, /*coordinator_serving=*/s.ok());
  coordinator_ready_.Notify();
}

absl::Status PsdServer::OpenCoordinator() {
  PS_ASSIGN_OR_RETURN(
      std::vector<std::string> addresses,
      ResolveShardAddresses(config_.cluster,
                            absl::Now() + kResolveShardsTimeout, &stopping_));
  addresses[config_.psd.shard_id()] = address_;
  ShardDirectory::Options directory_options;
  directory_options.refresh_interval =
      absl::Milliseconds(config_.psd.shard_address_refresh_ms());
  PS_ASSIGN_OR_RETURN(
      shard_directory_,
      ShardDirectory::Create(config_.cluster, addresses, directory_options));
  shard_control_ = std::make_unique<GrpcShardControl>(
      shard_directory_.get(), &security_, config_.psd.shard_id(), shard_.get(),
      kShardCallDeadline, directory_options.refresh_interval);
  JobCoordinator::Options options;
  options.worker_timeout_ms = config_.psd.worker_timeout_ms();
  options.heartbeat_interval_ms =
      std::max<uint32_t>(100, config_.psd.worker_timeout_ms() / 10);
  options.shard_addresses = addresses;
  options.current_shard_addresses = [directory = shard_directory_.get()] {
    return directory->Current().addresses;
  };
  options.store = job_store_.get();
  options.set_replica_view =
      [control = shard_control_.get()](
          uint32_t shard, const SetReplicaViewRequest& req, absl::Time deadline,
          SetReplicaViewResponse* resp) {
        return control->SetReplicaView(shard, req, deadline, resp);
      };
  options.reshard = [control = shard_control_.get()](
                        uint32_t shard, const ReshardRequest& req,
                        absl::Time deadline, ReshardResponse* resp) {
    return control->Reshard(shard, req, deadline, resp);
  };
  options.shard_heartbeat =
      absl::Milliseconds(config_.psd.shard_heartbeat_ms());
  options.shard_heartbeat_misses = config_.psd.shard_heartbeat_misses();
  options.own_shard = config_.psd.shard_id();
  options.max_history_points = config_.psd.progress_history_rows();
  options.succeeded_jobs_kept = config_.psd.succeeded_jobs_kept();
  PS_ASSIGN_OR_RETURN(coordinator_,
                      JobCoordinator::Create(options, shard_control_.get()));
  coordinator_service_->SetCoordinator(coordinator_.get(),
                                       shard_directory_.get());
  if (status_source_ != nullptr) {
    status_source_->SetCoordinator(coordinator_.get(), addresses);
  }
  spdlog::info("coordinator ready: {} shards", addresses.size());
  return absl::OkStatus();
}

void PsdServer::SetHealth(bool shard_serving, bool coordinator_serving) {
  absl::MutexLock lock(&health_mu_);
  grpc::HealthCheckServiceInterface* health =
      server_ == nullptr ? nullptr : server_->GetHealthCheckService();
  if (draining_ || health == nullptr) return;
  health->SetServingStatus(ParameterServer::service_full_name(), shard_serving);
  bool whole = shard_serving;
  if (is_coordinator()) {
    health->SetServingStatus(Coordinator::service_full_name(),
                             coordinator_serving);
    whole = whole && coordinator_serving;
  }
  // "" by name: the overload without one would set every service's.
  health->SetServingStatus("", whole);
}

void PsdServer::Housekeeping() {
  while (!stopping_.WaitForNotificationWithTimeout(kHousekeepingPeriod)) {
    absl::Time now = absl::Now();
    shard_->CheckDeadlines(now);
    shard_->CheckCheckpoints(now);
    if (coordinator_ready_.HasBeenNotified() && coordinator_ != nullptr) {
      coordinator_->Tick(now);
    }
  }
}

void PsdServer::Stop() {
  if (!started_) return;
  started_ = false;
  // Probes see NOT_SERVING while it drains (from here to the server's
  // shutdown, which holds every status there).
  SetHealth(/*shard_serving=*/false, /*coordinator_serving=*/false);
  {
    absl::MutexLock lock(&health_mu_);
    draining_ = true;
  }
  stopping_.Notify();
  // Fail parked waits first so Shutdown does not wait for their deadlines.
  if (coordinator_starter_.joinable()) coordinator_starter_.join();
  status_http_.reset();  // waits for page loads in flight
  if (coordinator_ != nullptr) coordinator_->Shutdown();
  metrics_.reset();  // no scrape reads the shard while it shuts down
  shard_->Shutdown();
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  housekeeping_.join();
  spdlog::info("shard {} stopped", config_.psd.shard_id());
}

}  // namespace ps
