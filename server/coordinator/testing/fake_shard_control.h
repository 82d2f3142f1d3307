// FakeShardControl: a ShardControl that records every call as a line
// ("register 0 job-000001 workers=2 chunks=9", "drop 1 job-000001",
// "membership 0 job-000001 [0,2]") and can fail or block on request.
//
//   FakeShardControl shards;
//   shards.FailRegisterOn(1);
//   ... drive the coordinator ...
//   EXPECT_THAT(shards.TakeCalls(), ElementsAre("register 0 ...", ...));
#ifndef SERVER_COORDINATOR_TESTING_FAKE_SHARD_CONTROL_H_
#define SERVER_COORDINATOR_TESTING_FAKE_SHARD_CONTROL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "server/coordinator/shard_op_queue.h"

namespace ps {

// Thread-safe.
class FakeShardControl : public ShardControl {
 public:
  // Fails with RESOURCE_EXHAUSTED on FailRegisterOn's shard; blocks after
  // BlockRegister until `release_` (notifying `entered_` first).
  absl::Status RegisterJob(uint32_t shard,
                           const RegisterJobRequest& request) override;
  absl::Status DropJob(uint32_t shard, const std::string& job_id) override;
  // Fails with UNAVAILABLE after FailMembership.
  absl::Status SetMembership(uint32_t shard,
                             const SetMembershipRequest& request) override;

  // The calls since the last TakeCalls, oldest first.
  std::vector<std::string> TakeCalls();
  // -1: no shard fails.
  void FailRegisterOn(int shard);
  void FailMembership();
  void BlockRegister();

  // Set once a blocked RegisterJob is waiting.
  absl::Notification entered_;
  absl::Notification release_;

 private:
  absl::Mutex mu_;
  std::vector<std::string> calls_ ABSL_GUARDED_BY(mu_);
  int fail_shard_ ABSL_GUARDED_BY(mu_) = -1;
  bool fail_membership_ ABSL_GUARDED_BY(mu_) = false;
  bool block_register_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace ps

#endif  // SERVER_COORDINATOR_TESTING_FAKE_SHARD_CONTROL_H_
