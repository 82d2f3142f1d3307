// PsdServer: one psd process's parts wired together: the Shard and its
// ParameterServer service, the Coordinator when this shard is the cluster's
// coordinator, the gRPC server, and the housekeeping thread. With
// checkpoint_dir set, Start() first re-creates the jobs checkpointed there
// (Shard::OpenCheckpoints), so a restarted psd with the same config serves
// them from its first request. The coordinator shard with state_dir set
// opens its job store (server/coordinator/job_store.h) in Start, before it
// listens, and its coordinator reloads the jobs stored there. The
// coordinator shard with status_address set also serves the status page
// (server/status/status_page.h).
//
//   PS_ASSIGN_OR_RETURN(LoadedPsdConfig config, LoadPsdConfig(path));
//   PsdServer server(config);
//   PS_RETURN_IF_ERROR(server.Start());   // binds, writes address_file
//                                         // (and metrics_address_file)
//   ... SIGTERM ...
//   server.Stop();
//
// Health and reflection: psd serves the standard grpc.health.v1.Health
// (gRPC's default health service) and server reflection
// (grpc.reflection.v1alpha), so probes and generic gRPC clients need no
// psctl. Health's service "ps.ParameterServer" is SERVING from the moment
// psd listens (the shard restored its checkpoints before: it listens only
// once ready, and the address file is written after); on the coordinator
// shard "ps.Coordinator" is NOT_SERVING until the coordinator opened
// (every shard's address resolved, up to 60 s), and for good when it could
// not; "" (the whole psd) is SERVING when both are. Every one turns
// NOT_SERVING at the start of Stop (while it drains: last checkpoints,
// pending waits fail) and stays so until the server is gone. (gRPC's
// default service marks "" SERVING as the server starts; Listen corrects it
// right after, before the address file is written.)
//
// Life cycle:
//
//   constructed --Start()--> serving --Stop()--> stopped
//                   |  error                      (pending waits get
//                   v                              UNAVAILABLE; threads joined)
//                 failed (nothing left running)
#ifndef SERVER_RPC_PSD_SERVER_H_
#define SERVER_RPC_PSD_SERVER_H_

#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "common/config.h"
#include "common/http_server.h"
#include "common/metrics_server.h"
#include "common/security.h"
#include "server/coordinator/coordinator.h"
#include "server/coordinator/job_store.h"
#include "server/coordinator/shard_directory.h"
#include "server/rpc/chunk_fetcher.h"
#include "server/rpc/coordinator_service.h"
#include "server/rpc/ps_service.h"
#include "server/rpc/replica_sender.h"
#include "server/rpc/status_source.h"
#include "server/shard.h"

namespace ps {

// Start and Stop are called from one thread; the server itself is
// thread-safe once started.
class PsdServer {
 public:
  explicit PsdServer(LoadedPsdConfig config);
  ~PsdServer();  // Stop()

  // Restores checkpointed jobs (checkpoint_dir; unusable files are logged,
  // an unusable directory fails Start with INVALID_ARGUMENT), then binds
  // the listen address (port 0: any free port), writes the bound address to
  // address_file, starts serving. The coordinator shard then
  // resolves every shard's address (waiting up to 60 s for address files,
  // or until Stop) in the background and opens the Coordinator service. From
  // then on it follows shards that move: a shard's address file is re-read (at
  // most every shard_address_refresh_ms) when the coordinator's own calls
  // cannot reach it, for GetShardAddresses and for each Assignment. A job store
  // that cannot be used (empty, corrupt, newer schema, locked by another psd,
  // unreadable, not writable) fails it with INVALID_ARGUMENT naming the file.
  // With metrics_address set, it then serves /metrics (ShardMetrics) there
  // and writes metrics_address_file; a port it cannot bind fails it with
  // INVALID_ARGUMENT naming metrics_address (nothing left running).
  absl::Status Start();

  // psd --reset_state, before Start: moves the coordinator's job store
  // aside (JobStore::MoveAside) so that Start begins with no jobs. OK when
  // this psd has no job store or there is no file.
  absl::Status ResetState();

  // Graceful: stops accepting, fails pending waits with UNAVAILABLE, writes
  // a last checkpoint of the jobs that changed (checkpoint_dir), joins.
  void Stop();

  // "host:port" actually bound (valid after Start).
  const std::string& address() const { return address_; }
  bool is_coordinator() const;
  Shard* shard() { return shard_.get(); }

 private:
  // Start's steps: the security settings and the Shard with its restored
  // checkpoints; then the gRPC server bound to listen_address (address_).
  absl::Status OpenShard();
  // The coordinator's job store, when state_dir is set (else a warning).
  absl::Status OpenJobStore();
  std::string JobStorePath() const;
  absl::Status Listen();
  // The coordinator's status page on status_address (when set), its bound
  // address written to status_address_file. INVALID_ARGUMENT naming the
  // address when it cannot listen.
  absl::Status StartStatusPage();
  // The /metrics server, when metrics_address is set.
  absl::Status StartMetrics();
  void Housekeeping();
  // On its own thread: OpenCoordinator, logging why it failed, then
  // coordinator_ready_.
  void StartCoordinator();
  // Resolves every shard's address, creates the coordinator and opens the
  // Coordinator service.
  absl::Status OpenCoordinator();
  // grpc.health.v1.Health: the ParameterServer service's, the
  // Coordinator's and the whole psd's statuses (see the file comment);
  // nothing once draining_ (Stop).
  void SetHealth(bool shard_serving, bool coordinator_serving)
      ABSL_LOCKS_EXCLUDED(health_mu_);

  const LoadedPsdConfig config_;
  Security security_;
  std::unique_ptr<Shard> shard_;
  // The shard's forwards to its backups (replicated jobs).
  std::unique_ptr<GrpcReplicaSender> replica_sender_;
  // A re-placement's fetches of chunk states from other shards.
  std::unique_ptr<GrpcChunkFetcher> chunk_fetcher_;
  std::unique_ptr<PsService> ps_service_;
  std::unique_ptr<CoordinatorService> coordinator_service_;
  // Declared before shard_control_ and coordinator_, which borrow it.
  std::unique_ptr<ShardDirectory> shard_directory_;
  std::unique_ptr<GrpcShardControl> shard_control_;
  // Declared before coordinator_, which borrows it.
  std::unique_ptr<JobStore> job_store_;
  std::unique_ptr<JobCoordinator> coordinator_;
  // The status page reads the coordinator and the shard: declared after
  // them, so that it stops first.
  std::unique_ptr<PsdStatusSource> status_source_;
  std::unique_ptr<HttpServer> status_http_;
  std::unique_ptr<grpc::Server> server_;
  // Declared after shard_, which its collector borrows.
  std::unique_ptr<MetricsServer> metrics_;
  std::string address_;
  absl::Notification stopping_;
  absl::Notification coordinator_ready_;  // coordinator_ set (or given up)
  std::thread housekeeping_;
  std::thread coordinator_starter_;
  bool started_ = false;
  absl::Mutex health_mu_;
  bool draining_ ABSL_GUARDED_BY(health_mu_) = false;
};

}  // namespace ps

#endif  // SERVER_RPC_PSD_SERVER_H_
