// GrpcReplicaSender: a primary's forwards to its backups (Shard::Replicate
// on the other psd) over gRPC, one channel per address, kept.
//
//   GrpcReplicaSender sender(&security);
//   shard.SetReplicaSender([&](const std::string& a, const ReplicateRequest& r,
//                              absl::Time d) { return sender.Send(a, r, d); });
//
// Thread-safe. Send blocks up to its deadline; it never waits for a shard
// that is down to come up (the coordinator fails it over instead).
#ifndef SERVER_RPC_REPLICA_SENDER_H_
#define SERVER_RPC_REPLICA_SENDER_H_

#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/security.h"
#include "proto/ps.grpc.pb.h"

namespace ps {

class GrpcReplicaSender {
 public:
  // `security` is borrowed and must outlive this.
  explicit GrpcReplicaSender(const Security* security) : security_(security) {}

  // UNAVAILABLE for an empty address (the coordinator's view has none yet).
  absl::Status Send(const std::string& address, const ReplicateRequest& req,
                    absl::Time deadline) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  const Security* const security_;
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<ParameterServer::Stub>>
      stubs_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ps

#endif  // SERVER_RPC_REPLICA_SENDER_H_
