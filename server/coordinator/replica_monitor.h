// ReplicaMonitor: the coordinator's failure detector and failover for
// replicated jobs (JobSpec.replication > 1, docs/OPERATIONS.md
// "Replication"). Once armed (a replicated job was submitted or reloaded),
// it sends the replica view (SetReplicaView: epoch, failed, joining and
// rejoined shards, the shards' addresses) to every shard every `interval`;
// the view is the heartbeat. A shard that fails `misses` heartbeats in a
// row is failed over: a new epoch with it in the failed set is committed
// (the SQLite store) before any shard hears of it, then sent to every
// shard. Each chunk's acting primary is then its first copy in service
// (its ChunkPlacement's primary, then its backups), and Redirect(), per
// job, points the failed shard's address at the acting primary of the
// chunks it was the primary of: the shard holding their backups in that
// job, which is not the cluster's next shard when the job uses some of the
// shards (JobSpec.shards, shard_ids). The workers' relocator finds it there
// (GetShardAddresses with the job's id).
//
// A failed shard that answers a heartbeat again (restarted, or its link
// back) rejoins as a backup: `rejoin` registers the running replicated
// jobs on it afresh, then it is `joining` under a new epoch (the acting
// primaries copy its replicas in while training goes on, answering without
// it); once every shard answered a beat with it not `behind`, it is
// `rejoined` under a new epoch: a backup again, waited for, acting primary
// of a chunk only when no other copy of it is live.
//
//   ReplicaMonitor monitor(options);   // epoch and sets as stored
//   monitor.Arm();                      // starts the heartbeat thread
//   monitor.Redirect(&job.placement(), &addresses);  // a job's addresses
//
//   live --(misses)--> failed --(answers, rejoin ok)--> joining
//     ^                                                    | nobody behind
//     +--------------- rejoined <--------------------------+
//   (each arrow: commit(e + 1, sets), then the view to every shard)
//
// A backup that answers the heartbeats but that a primary has failed to
// forward to for heartbeat x misses (it fell behind;
// SetReplicaViewResponse.lagging) is failed over the same way, so it
// leaves the acknowledgement sets with a log line on both sides and
// JobStats.replica_drops, not silently, and rejoins like a restarted one.
//
// Each heartbeat names its target shard id (a psd with another id refuses
// it: a stale address, counted as a miss) and the incarnation last heard
// from it. A shard in service that answers with a new incarnation was
// restarted on its address faster than it could miss the heartbeats: it is
// failed over at once (it lost its replicas) and rejoins at the next beat.
//
// Thread-safe; Beat blocks for the heartbeat calls (each bounded by its
// deadline), the rejoin registrations and the commit.
#ifndef SERVER_COORDINATOR_REPLICA_MONITOR_H_
#define SERVER_COORDINATOR_REPLICA_MONITOR_H_

#include <cstdint>
#include <functional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/defaults.h"
#include "proto/job.pb.h"
#include "proto/ps.pb.h"

namespace ps {

// Who is not simply in service, by shard id.
struct ReplicaSets {
  std::vector<uint32_t> failed;
  std::vector<uint32_t> joining;
  std::vector<uint32_t> rejoined;
};

class ReplicaMonitor {
 public:
  struct Options {
    uint32_t num_shards = 0;
    absl::Duration interval = absl::Milliseconds(kDefaultShardHeartbeatMs);
    uint32_t misses = kDefaultShardHeartbeatMisses;
    // A beat's deadline is interval x misses; one that runs out of time
    // (the shard is slow: a big step holds its threads and cores, or it is
    // gone silently) doubles that shard's next deadline, up to
    // max(interval x misses, max_deadline), and each answer halves it
    // again. A refused connection (a killed psd) is a miss at once, as
    // before; a silent shard is failed over after 300 + 600 + 1200 ms of
    // beats at the defaults (0.9 s before), and a busy one that answers
    // within its longer deadline is not. A failed shard's beats keep the
    // short deadline.
    absl::Duration max_deadline = absl::Seconds(2);
    // A backup is failed over as fallen behind once a primary's forwards to
    // it have failed, with no success since, for max(interval x misses,
    // min_lag): several forward deadlines (kDefaultReplicateDeadlineMs
    // each), so that a link saturated by a big step, whose forwards time
    // out now and then, does not set off failovers that take the job's
    // copies away one after another. The primary reports it only once a
    // forward given the longest deadline failed too
    // (server/internal/replicator.h): a backup that is slow, not gone,
    // gets the time it needs.
    absl::Duration min_lag =
        absl::Milliseconds(5 * kDefaultReplicateDeadlineMs);
    // One heartbeat to `shard`, blocking up to `deadline`; its answer
    // into the last argument. Required.
    std::function<absl::Status(uint32_t shard, const SetReplicaViewRequest&,
                               absl::Time deadline, SetReplicaViewResponse*)>
        send;
    // Makes (epoch, sets) durable before anyone is told. Required.
    std::function<absl::Status(uint64_t epoch, const ReplicaSets&)> commit;
    // The shards' addresses now, by shard id. Required.
    std::function<std::vector<std::string>()> addresses;
    // Registers the running replicated jobs afresh on `shard`, a failed
    // shard that answers again. Unset: failed shards never rejoin.
    std::function<absl::Status(uint32_t shard)> rejoin;
    // As last committed.
    uint64_t epoch = 0;
    ReplicaSets sets;
  };

  explicit ReplicaMonitor(Options options);
  // Stop().
  ~ReplicaMonitor();

  ReplicaMonitor(const ReplicaMonitor&) = delete;
  ReplicaMonitor& operator=(const ReplicaMonitor&) = delete;

  // Starts the heartbeat thread (idempotent): a replicated job runs.
  void Arm() ABSL_LOCKS_EXCLUDED(mu_);
  // Stops it; a beat in flight ends within its deadlines. Idempotent.
  void Stop() ABSL_LOCKS_EXCLUDED(mu_);

  // One round of heartbeats at `now`, failing over the shards that missed
  // too many (the thread calls it; tests call it directly).
  void Beat(absl::Time now) ABSL_LOCKS_EXCLUDED(mu_, beat_mu_);
  // Fails `shard` over now, known lost without a missed heartbeat (the
  // coordinator's own shard after a restart): committed, then announced.
  // OK when it is failed already; FAILED_PRECONDITION when every other
  // shard is failed (nothing changed); the commit's error otherwise.
  absl::Status FailNow(uint32_t shard, absl::Time now)
      ABSL_LOCKS_EXCLUDED(mu_, beat_mu_);

  uint64_t epoch() const ABSL_LOCKS_EXCLUDED(mu_);
  std::vector<uint32_t> failed() const ABSL_LOCKS_EXCLUDED(mu_);
  ReplicaSets sets() const ABSL_LOCKS_EXCLUDED(mu_);
  // Where a job's clients reach each shard's chunks now (`addresses`: the
  // shards' own, by id). Each shard not in service (failed, joining,
  // rejoined) that is the primary of chunks of `placement` gets the address
  // of their acting primary: the first of (primary, backups...) in service,
  // else the first rejoined one not failed (ReplicaView::ActingPrimary on
  // the shards; unchanged when no copy is left). Chunks with one primary
  // have the same backups (PlaceChunks' ring over the job's shards), so one
  // address serves them all; the first such chunk's copies are used. A
  // failed shard that is no primary of `placement`'s (null: of any job)
  // gets the next shard's not failed on the cluster's ring: a live process
  // for calls made to every shard (psctl trace), where none of the job's
  // chunks are served.
  void Redirect(const Placement* placement,
                std::vector<std::string>* addresses) const
      ABSL_LOCKS_EXCLUDED(mu_);

 private:
  bool FailedLocked(uint32_t shard) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Neither failed, joining nor rejoined.
  bool InServiceLocked(uint32_t shard) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The acting primary of `c` (the rule of Redirect), or `none`.
  uint32_t ActingPrimaryLocked(const ChunkPlacement& c, uint32_t none) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  SetReplicaViewRequest ViewLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Commits and announces `dead` as failed: FAILED_PRECONDITION (nothing
  // changed) if that would fail every shard, the commit's error if it
  // failed (retried at the next heartbeat).
  absl::Status FailOver(const std::vector<uint32_t>& dead, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(beat_mu_);
  // Adds to *dead each backup a primary in service reported lagging
  // (backup, primary), unless it is failed already or its reporter dies.
  void DropLagging(const std::vector<std::pair<uint32_t, uint32_t>>& lagging,
                   const std::vector<uint32_t>& failed,
                   std::vector<uint32_t>* dead)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(beat_mu_);
  // Failed shards in `back` rejoin (those `rejoin` registered), joining
  // ones in `caught_up` become rejoined: one new epoch for both.
  void Readmit(const std::vector<uint32_t>& back,
               const std::vector<uint32_t>& caught_up, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(beat_mu_);
  // Sends `view` to shard `s`, naming it and the incarnation last heard
  // from it (also left in *before), and records the one it answers with.
  absl::Status Send(uint32_t s, SetReplicaViewRequest& view,
                    SetReplicaViewResponse* resp, uint64_t* before)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(beat_mu_);
  // Commits `next` under the next epoch, then sends it to every shard.
  absl::Status Move(const ReplicaSets& next, absl::Time now, uint64_t* epoch)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(beat_mu_);
  void Loop();

  const Options options_;
  // Serializes beats (the thread's and tests'); taken before mu_.
  absl::Mutex beat_mu_;
  std::vector<uint32_t> missed_ ABSL_GUARDED_BY(beat_mu_);
  // By shard: the deadline of its next beat (Options::max_deadline_factor).
  std::vector<absl::Duration> deadline_ ABSL_GUARDED_BY(beat_mu_);
  // By shard: the incarnation it last answered with (0: none yet).
  std::vector<uint64_t> incarnation_ ABSL_GUARDED_BY(beat_mu_);
  // The last rejoin failure logged, by shard (not repeated every beat).
  std::vector<std::string> rejoin_error_ ABSL_GUARDED_BY(beat_mu_);

  mutable absl::Mutex mu_;
  uint64_t epoch_ ABSL_GUARDED_BY(mu_);
  ReplicaSets sets_ ABSL_GUARDED_BY(mu_);
  bool armed_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace ps

#endif  // SERVER_COORDINATOR_REPLICA_MONITOR_H_
