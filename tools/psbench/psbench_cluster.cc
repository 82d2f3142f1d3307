#include "tools/psbench/psbench_cluster.h"

#include <unistd.h>

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/config.h"
#include "common/grpc_status.h"
#include "common/status_macros.h"
#include "server/coordinator/placement.h"
#include "tools/psbench/psbench_util.h"

namespace ps {
namespace bench {
namespace {

// psd's housekeeping period for step deadlines.
constexpr absl::Duration kHousekeepingPeriod = absl::Milliseconds(100);
// Registration initialises the chunks (CPU-bound): generous for 64 MiB.
constexpr absl::Duration kAdminDeadline = absl::Seconds(60);

std::unique_ptr<grpc::ClientContext> AdminContext(const Security& security) {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(absl::ToChronoTime(absl::Now() + kAdminDeadline));
  security.Authorize(ctx.get());
  return ctx;
}

}  // namespace

bool IsLoopback(const std::string& address) {
  const absl::string_view host =
      absl::string_view(address).substr(0, address.rfind(':'));
  return absl::StartsWith(host, "127.") || host == "localhost" ||
         host == "[::1]";
}

absl::StatusOr<std::unique_ptr<BenchCluster>> BenchCluster::StartInProcess(
    int shards) {
  if (shards < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("shards: must be >= 1, got ", shards));
  }
  auto c = std::unique_ptr<BenchCluster>(new BenchCluster());
  for (int i = 0; i < shards; ++i) {
    InProcessShard s;
    ShardOptions options;
    options.shard_id = static_cast<uint32_t>(i);
    options.memory_budget_bytes = kDefaultMemoryBudgetBytes;
    s.shard = std::make_unique<Shard>(options);
    s.service = std::make_unique<PsService>(s.shard.get(), &c->security_);
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", c->security_.ServerCredentials(),
                             &port);
    ApplyTransportSettings(kDefaultMaxMessageBytes, &builder);
    builder.RegisterService(s.service.get());
    s.server = builder.BuildAndStart();
    if (s.server == nullptr || port == 0) {
      return absl::UnavailableError(
          absl::StrCat("shard ", i, ": cannot listen on 127.0.0.1:0"));
    }
    c->addresses_.push_back(absl::StrCat("127.0.0.1:", port));
    c->servers_.push_back(std::move(s));
  }
  for (const std::string& a : c->addresses_) {
    c->stubs_.push_back(ParameterServer::NewStub(c->security_.NewChannel(a)));
  }
  BenchCluster* self = c.get();
  c->housekeeping_ = std::thread([self] {
    while (!self->stop_.WaitForNotificationWithTimeout(kHousekeepingPeriod)) {
      for (InProcessShard& s : self->servers_)
        s.shard->CheckDeadlines(absl::Now());
    }
  });
  return c;
}

absl::StatusOr<std::unique_ptr<BenchCluster>> BenchCluster::Connect(
    const std::string& cluster_file, absl::Duration timeout) {
  PS_ASSIGN_OR_RETURN(LoadedCluster cluster, LoadClusterConfig(cluster_file));
  auto c = std::unique_ptr<BenchCluster>(new BenchCluster());
  PS_ASSIGN_OR_RETURN(c->security_, Security::FromCluster(cluster.config));
  PS_ASSIGN_OR_RETURN(c->addresses_,
                      ResolveShardAddresses(cluster, absl::Now() + timeout));
  for (size_t i = 0; i < c->addresses_.size(); ++i) {
    if (!IsLoopback(c->addresses_[i])) {
      return absl::InvalidArgumentError(absl::StrCat(
          cluster_file, ": shards[", i, "] is at ", c->addresses_[i],
          "; psbench only sends traffic to loopback addresses"));
    }
  }
  for (const std::string& a : c->addresses_) {
    c->stubs_.push_back(ParameterServer::NewStub(c->security_.NewChannel(a)));
  }
  return c;
}

BenchCluster::~BenchCluster() {
  if (housekeeping_.joinable()) {
    stop_.Notify();
    housekeeping_.join();
  }
  for (InProcessShard& s : servers_) s.shard->Shutdown();
  for (InProcessShard& s : servers_)
    s.server->Shutdown(absl::ToChronoTime(absl::Now()));
  for (InProcessShard& s : servers_) s.server->Wait();
}

absl::StatusOr<Assignment> BenchCluster::RegisterJob(
    const BenchJob& job) const {
  if (job.floats == 0) return absl::InvalidArgumentError("floats: must be > 0");
  JobSpec spec;
  spec.set_name(job.job_id);
  spec.set_num_workers(job.workers);
  spec.set_partition_bytes(job.partition_bytes);
  spec.set_seed(job.seed);
  spec.mutable_optimizer()->set_kind(job.optimizer);
  spec.mutable_optimizer()->set_learning_rate(job.learning_rate);
  spec.mutable_consistency()->set_mode(job.mode);
  spec.mutable_consistency()->set_step_deadline_ms(job.step_deadline_ms);
  *spec.mutable_wire() = job.wire;
  TensorSpec* t = spec.add_tensors();
  t->set_name("w");
  t->add_shape(job.floats);
  t->mutable_init()->set_kind(NORMAL);
  t->mutable_init()->set_scale(0.01f);
  for (const TableSpec& table : job.tables) *spec.add_tables() = table;
  PS_ASSIGN_OR_RETURN(
      Placement placement,
      PlaceChunks(spec, static_cast<uint32_t>(addresses_.size())));
  RegisterJobRequest req;
  req.set_job_id(job.job_id);
  *req.mutable_spec() = spec;
  *req.mutable_placement() = placement;
  req.set_num_workers(job.workers);
  for (size_t s = 0; s < stubs_.size(); ++s) {
    RegisterJobResponse resp;
    auto ctx = AdminContext(security_);
    grpc::Status st = stubs_[s]->RegisterJob(ctx.get(), req, &resp);
    if (!st.ok()) {
      absl::Status a = FromGrpcStatus(st);
      return absl::Status(a.code(),
                          absl::StrCat("RegisterJob on shard ", s, " (",
                                       addresses_[s], "): ", a.message()));
    }
  }
  Assignment a;
  a.set_job_id(job.job_id);
  *a.mutable_spec() = spec;
  *a.mutable_placement() = placement;
  a.set_num_workers(job.workers);
  for (const std::string& address : addresses_) a.add_shard_addresses(address);
  return a;
}

absl::Status BenchCluster::DropJob(const std::string& job_id) const {
  DropJobRequest req;
  req.set_job_id(job_id);
  for (size_t s = 0; s < stubs_.size(); ++s) {
    DropJobResponse resp;
    auto ctx = AdminContext(security_);
    grpc::Status st = stubs_[s]->DropJob(ctx.get(), req, &resp);
    if (!st.ok()) {
      absl::Status a = FromGrpcStatus(st);
      return absl::Status(
          a.code(), absl::StrCat("DropJob on shard ", s, ": ", a.message()));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<ShardStats>> BenchCluster::Stats(
    const std::string& job_id) const {
  StatsRequest req;
  req.set_job_id(job_id);
  std::vector<ShardStats> out(stubs_.size());
  for (size_t s = 0; s < stubs_.size(); ++s) {
    auto ctx = AdminContext(security_);
    grpc::Status st = stubs_[s]->Stats(ctx.get(), req, &out[s]);
    if (!st.ok()) {
      absl::Status a = FromGrpcStatus(st);
      return absl::Status(
          a.code(), absl::StrCat("Stats on shard ", s, ": ", a.message()));
    }
  }
  return out;
}

absl::StatusOr<std::vector<pid_t>> BenchCluster::ServerPids() const {
  if (in_process()) return std::vector<pid_t>{getpid()};
  std::vector<pid_t> pids;
  for (const std::string& address : addresses_) {
    PS_ASSIGN_OR_RETURN(int port, PortOf(address));
    absl::StatusOr<pid_t> pid = ListeningPid(port);
    if (!pid.ok()) {
      return absl::FailedPreconditionError(
          absl::StrCat("resident memory of the shard at ", address, ": ",
                       pid.status().message()));
    }
    if (std::find(pids.begin(), pids.end(), *pid) == pids.end())
      pids.push_back(*pid);
  }
  return pids;
}

absl::StatusOr<uint64_t> BenchCluster::ResidentBytes() const {
  PS_ASSIGN_OR_RETURN(std::vector<pid_t> pids, ServerPids());
  uint64_t total = 0;
  for (pid_t pid : pids) {
    PS_ASSIGN_OR_RETURN(uint64_t rss, bench::ResidentBytes(pid));
    total += rss;
  }
  return total;
}

}  // namespace bench
}  // namespace ps
