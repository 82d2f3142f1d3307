// The shards psbench measures: N shards started in this process (each a
// real gRPC server on 127.0.0.1:0 with a Shard and a PsService, the same
// code path as psd) or a running cluster named by its cluster file.
//
//   PS_ASSIGN_OR_RETURN(std::unique_ptr<BenchCluster> cluster,
//                       BenchCluster::StartInProcess(2));
//   BenchJob job;
//   job.job_id = "bench-1";
//   job.floats = 1 << 20;
//   PS_ASSIGN_OR_RETURN(Assignment a, cluster->RegisterJob(job));
//   a.set_rank(0);  ... PsClient::Create(options, a, &cluster->security()) ...
//   PS_RETURN_IF_ERROR(cluster->DropJob(job.job_id));
#ifndef TOOLS_PSBENCH_PSBENCH_CLUSTER_H_
#define TOOLS_PSBENCH_PSBENCH_CLUSTER_H_

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "common/security.h"
#include "grpcpp/grpcpp.h"
#include "proto/coordinator.pb.h"
#include "proto/job.pb.h"
#include "proto/ps.grpc.pb.h"
#include "server/rpc/ps_service.h"
#include "server/shard.h"

namespace ps {
namespace bench {

// A benchmark job: one dense tensor "w" of `floats` floats, and the sparse
// tables in `tables` (JobSpec.tables, validated by the shards as at submit).
struct BenchJob {
  std::string job_id;
  uint64_t floats = 0;
  ConsistencyMode mode = ASP;
  uint32_t workers = 1;
  // Chunks of at most this many bytes (the job spec's partition_bytes).
  uint64_t partition_bytes = 1 << 20;
  OptimizerKind optimizer = SGD;
  float learning_rate = 0.01f;
  // BSP/SSP: a step missing a worker this long fails instead of hanging.
  uint32_t step_deadline_ms = 20000;
  uint64_t seed = 1;
  std::vector<TableSpec> tables;
  WireSpec wire;  // the spec's wire formats (default: dense FP32)
};

// Whether "host:port" names this machine's loopback interface (127.0.0.0/8,
// localhost, [::1]): the only addresses psbench sends traffic to.
bool IsLoopback(const std::string& address);

// Thread-safe after construction (RegisterJob/DropJob may run concurrently).
class BenchCluster {
 public:
  // Starts `shards` Shard + PsService gRPC servers on 127.0.0.1:0 with the
  // psd transport settings (ApplyTransportSettings) and a housekeeping
  // thread that enforces step deadlines, as psd does.
  static absl::StatusOr<std::unique_ptr<BenchCluster>> StartInProcess(
      int shards);

  // Uses the running cluster of `cluster_file` (its security settings;
  // address files waited for up to `timeout`). InvalidArgument when a
  // shard is not on a loopback address (see IsLoopback).
  static absl::StatusOr<std::unique_ptr<BenchCluster>> Connect(
      const std::string& cluster_file, absl::Duration timeout);

  // Stops the in-process servers (pending waits fail with UNAVAILABLE).
  ~BenchCluster();

  BenchCluster(const BenchCluster&) = delete;
  BenchCluster& operator=(const BenchCluster&) = delete;

  bool in_process() const { return !servers_.empty(); }
  const std::vector<std::string>& addresses() const { return addresses_; }
  const Security& security() const { return security_; }

  // Registers `job` on every shard (placement: PlaceChunks over all shards)
  // and returns the assignment for rank 0 (callers set their rank).
  absl::StatusOr<Assignment> RegisterJob(const BenchJob& job) const;

  // Drops the job on every shard.
  absl::Status DropJob(const std::string& job_id) const;

  // Every shard's statistics of `job_id` ("" = every job), in shard order.
  // Blocks for one call per shard; the first failure is returned, naming
  // the shard.
  absl::StatusOr<std::vector<ShardStats>> Stats(
      const std::string& job_id) const;

  // Resident memory (VmRSS) of the processes serving the shards: this one
  // when in-process, else the psd processes that listen on the shards'
  // ports (found through /proc; FailedPrecondition if some are not visible).
  // Distinct processes are summed.
  absl::StatusOr<uint64_t> ResidentBytes() const;

  // Ids of the processes ResidentBytes() reads.
  absl::StatusOr<std::vector<pid_t>> ServerPids() const;

 private:
  struct InProcessShard {
    std::unique_ptr<Shard> shard;
    std::unique_ptr<PsService> service;
    std::unique_ptr<grpc::Server> server;
  };

  BenchCluster() = default;

  Security security_;
  std::vector<std::string> addresses_;
  std::vector<std::unique_ptr<ParameterServer::Stub>> stubs_;
  std::vector<InProcessShard> servers_;
  absl::Notification stop_;
  std::thread housekeeping_;
};

}  // namespace bench
}  // namespace ps

#endif  // TOOLS_PSBENCH_PSBENCH_CLUSTER_H_
