// PsdStatusSource: the status page's data (server/status/status_page.h) in
// the coordinator's psd: jobs and curves from the JobCoordinator (copies
// made under its lock), each shard's Stats from the local Shard or over
// gRPC with a short deadline. Until the coordinator is ready (it waits for
// every shard's address), jobs and curves answer UNAVAILABLE.
#ifndef SERVER_RPC_STATUS_SOURCE_H_
#define SERVER_RPC_STATUS_SOURCE_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/security.h"
#include "proto/ps.grpc.pb.h"
#include "server/coordinator/coordinator.h"
#include "server/shard.h"
#include "server/status/status_page.h"

namespace ps {

// Thread-safe.
class PsdStatusSource : public StatusSource {
 public:
  // `local` (this psd's shard, id `local_shard_id`) and `security` are
  // borrowed and must outlive this. `stats_deadline` bounds each remote
  // Stats call.
  PsdStatusSource(Shard* local, uint32_t local_shard_id,
                  const Security* security, absl::Duration stats_deadline);

  // Called once the coordinator is created; `coordinator` is borrowed and
  // must outlive this (or be reset to null first). `addresses`: by shard id.
  void SetCoordinator(JobCoordinator* coordinator,
                      const std::vector<std::string>& addresses);

  absl::Status ListJobs(ListJobsResponse* response) override;
  absl::Status GetHistory(const GetHistoryRequest& request,
                          GetHistoryResponse* response) override;
  std::vector<ShardAnswer> Shards() override;

 private:
  absl::StatusOr<JobCoordinator*> Coordinator();

  Shard* const local_;
  const uint32_t local_shard_id_;
  const Security* const security_;
  const absl::Duration stats_deadline_;
  absl::Mutex mu_;
  JobCoordinator* coordinator_ ABSL_GUARDED_BY(mu_) = nullptr;
  std::vector<std::string> addresses_ ABSL_GUARDED_BY(mu_);
  std::vector<std::shared_ptr<ParameterServer::Stub>> stubs_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace ps

#endif  // SERVER_RPC_STATUS_SOURCE_H_
