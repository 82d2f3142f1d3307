// ShardOpQueue: the coordinator's calls to the shards (RegisterJob, DropJob,
// SetMembership), run one at a time in the order they were decided, outside
// the coordinator's lock.
//
//   ShardOpQueue ops(&shards, num_shards);
//   {
//     absl::MutexLock lock(&mu);          // decide under the caller's lock
//     ops.EnqueueDrop("job-000001", num_shards);
//   }
//   ops.Drain();                          // then run, unlocked
//
// Deciding under a lock and calling after releasing it keeps the shards'
// RPCs from blocking everything else, while the one-at-a-time drain keeps,
// e.g., two membership changes reaching the shards in the order decided.
#ifndef SERVER_COORDINATOR_SHARD_OP_QUEUE_H_
#define SERVER_COORDINATOR_SHARD_OP_QUEUE_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "proto/ps.pb.h"

namespace ps {

// What the coordinator needs from the shards. Implementations may block
// (they are RPCs); ShardOpQueue makes at most one call at a time, in the
// order the coordinator decided them, and never under the coordinator's lock.
class ShardControl {
 public:
  virtual ~ShardControl() = default;
  // Creates the job's chunks that `shard` holds. An error fails the job.
  virtual absl::Status RegisterJob(uint32_t shard,
                                   const RegisterJobRequest& request) = 0;
  // Frees the job's chunks. Errors are logged and otherwise ignored.
  virtual absl::Status DropJob(uint32_t shard, const std::string& job_id) = 0;
  // Sets which worker ranks count toward the quorum. An error fails the job.
  virtual absl::Status SetMembership(uint32_t shard,
                                     const SetMembershipRequest& request) = 0;
};

// Thread-safe. Enqueue* never block. Drain runs the queued operations on the
// calling thread, unless another thread is draining already: that thread
// then runs them too, so nothing queued is stranded. The callbacks given to
// Enqueue* run on the draining thread with no ShardOpQueue lock held: they
// may take the caller's locks and enqueue more.
class ShardOpQueue {
 public:
  // (failure, shards asked): failure is OK or the first shard's error, as
  // "shard 1 RegisterJob: <message>"; the shards asked may hold the job now.
  using RegisterDone = std::function<void(absl::Status, uint32_t)>;

  // `shards` is borrowed and must outlive the queue.
  ShardOpQueue(ShardControl* shards, uint32_t num_shards);

  // The shards, for calls made outside the queue's order (a shard
  // rejoining after a failover registers its jobs at once).
  ShardControl* control() const { return shards_; }

  ShardOpQueue(const ShardOpQueue&) = delete;
  ShardOpQueue& operator=(const ShardOpQueue&) = delete;

  // RegisterJob on shards 0, 1, ... in order, stopping at the first failure,
  // then `done`. `prepare` builds the request when the operation's turn
  // comes; nullopt skips it (e.g. the job was cancelled meanwhile).
  void EnqueueRegister(
      std::function<std::optional<RegisterJobRequest>()> prepare,
      RegisterDone done);

  // DropJob on shards 0 .. num_shards - 1; an error is logged and the other
  // shards are still asked.
  void EnqueueDrop(const std::string& job_id, uint32_t num_shards);

  // SetMembership on every shard in order, stopping at the first failure,
  // which goes to `on_failure` ("shard 0 SetMembership: <message>").
  void EnqueueMembership(SetMembershipRequest request,
                         std::function<void(absl::Status)> on_failure);

  // Runs what is queued (see the class comment). Blocks for as long as the
  // shard calls take.
  void Drain() ABSL_LOCKS_EXCLUDED(mu_);
  // As Drain, and returns only once every operation queued before the call
  // has run, on this thread or the one draining. Blocks for as long as the
  // shard calls take (each has its deadline).
  void DrainAll() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void Enqueue(std::function<void()> op) ABSL_LOCKS_EXCLUDED(mu_);
  // Calls `call` on shards 0 .. num_shards_ - 1 until one fails; returns that
  // failure naming the shard and `what`, and in *asked the shards called.
  absl::Status OnEachShard(const char* what,
                           const std::function<absl::Status(uint32_t)>& call,
                           uint32_t* asked) const;

  ShardControl* const shards_;  // borrowed
  const uint32_t num_shards_;

  absl::Mutex mu_;
  std::deque<std::function<void()>> ops_ ABSL_GUARDED_BY(mu_);
  // Operations ever queued, and ever run to their end (DrainAll).
  uint64_t queued_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t finished_ ABSL_GUARDED_BY(mu_) = 0;
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace ps

#endif  // SERVER_COORDINATOR_SHARD_OP_QUEUE_H_
