// ReplicaMonitor: the coordinator's failure detector and failover for
// replicated jobs (JobSpec.replication > 1, docs/OPERATIONS.md
// "Replication"). Once armed (a replicated job was submitted or reloaded),
// it sends the replica view (SetReplicaView: epoch, failed shards, the
// shards' addresses) to every shard every `interval`; the view is the
// heartbeat. A shard that fails `misses` heartbeats in a row is failed
// over: a new epoch with it in the failed set is committed (the SQLite
// store) before any shard hears of it, then sent to every shard. Each
// chunk's acting primary is then its first copy not failed, and
// Redirect() points the failed shard's address at its successor on the
// ring, where the workers' relocator finds it.
//
//   ReplicaMonitor monitor(options);   // epoch and failed set as stored
//   monitor.Arm();                      // starts the heartbeat thread
//   monitor.Redirect(&addresses);       // GetShardAddresses, assignments
//
//   epoch e, failed F --(shard s misses `misses` beats)--> commit(e+1, F+s)
//        ^                                                   | ok
//        +------------------ send view to every shard <------+
//
// A failed shard never comes back in this version (no rejoin). Thread-safe;
// Beat blocks for the heartbeat calls (each bounded by its deadline) and
// the commit.
#ifndef SERVER_COORDINATOR_REPLICA_MONITOR_H_
#define SERVER_COORDINATOR_REPLICA_MONITOR_H_

#include <cstdint>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/defaults.h"
#include "proto/ps.pb.h"

namespace ps {

class ReplicaMonitor {
 public:
  struct Options {
    uint32_t num_shards = 0;
    absl::Duration interval = absl::Milliseconds(kDefaultShardHeartbeatMs);
    uint32_t misses = kDefaultShardHeartbeatMisses;
    // One heartbeat to `shard`, blocking up to `deadline`. Required.
    std::function<absl::Status(uint32_t shard, const SetReplicaViewRequest&,
                               absl::Time deadline)>
        send;
    // Makes (epoch, failed) durable before anyone is told. Required.
    std::function<absl::Status(uint64_t epoch,
                               const std::vector<uint32_t>& failed)>
        commit;
    // The shards' addresses now, by shard id. Required.
    std::function<std::vector<std::string>()> addresses;
    // As last committed.
    uint64_t epoch = 0;
    std::vector<uint32_t> failed;
  };

  explicit ReplicaMonitor(Options options);
  // Stop().
  ~ReplicaMonitor();

  ReplicaMonitor(const ReplicaMonitor&) = delete;
  ReplicaMonitor& operator=(const ReplicaMonitor&) = delete;

  // Starts the heartbeat thread (idempotent).
  void Arm() ABSL_LOCKS_EXCLUDED(mu_);
  // Stops it; a beat in flight ends within its deadlines. Idempotent.
  void Stop() ABSL_LOCKS_EXCLUDED(mu_);

  // One round of heartbeats at `now`, failing over the shards that missed
  // too many (the thread calls it; tests call it directly).
  void Beat(absl::Time now) ABSL_LOCKS_EXCLUDED(mu_, beat_mu_);

  uint64_t epoch() const ABSL_LOCKS_EXCLUDED(mu_);
  std::vector<uint32_t> failed() const ABSL_LOCKS_EXCLUDED(mu_);
  uint32_t live_shards() const ABSL_LOCKS_EXCLUDED(mu_);
  // Replaces each failed shard's address with its successor's: the next
  // shard on the ring not failed (unchanged when every shard failed).
  void Redirect(std::vector<std::string>* addresses) const
      ABSL_LOCKS_EXCLUDED(mu_);

 private:
  bool FailedLocked(uint32_t shard) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  SetReplicaViewRequest ViewLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Commits and announces `dead` as failed; false if the commit failed.
  bool FailOver(const std::vector<uint32_t>& dead, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(beat_mu_);
  void Loop();

  const Options options_;
  // Serializes beats (the thread's and tests'); taken before mu_.
  absl::Mutex beat_mu_;
  std::vector<uint32_t> missed_ ABSL_GUARDED_BY(beat_mu_);

  mutable absl::Mutex mu_;
  uint64_t epoch_ ABSL_GUARDED_BY(mu_);
  std::vector<uint32_t> failed_ ABSL_GUARDED_BY(mu_);
  bool armed_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace ps

#endif  // SERVER_COORDINATOR_REPLICA_MONITOR_H_
