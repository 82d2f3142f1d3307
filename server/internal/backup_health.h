// BackupHealth: how a shard's forwards to each of its backups have gone,
// the one rule that its Replicator (dense chunks) and its TableReplicas
// (sparse tables) share (docs/OPERATIONS.md "Replication").
//
//   BackupHealth health({.deadline = d, .max_deadline = m});
//   const absl::Duration used = health.DeadlineFor(backup);
//   const absl::Status s = send(backup, absl::Now() + used);
//   if (s.ok()) {
//     health.Answered(backup);
//   } else {
//     health.Failed(backup, s, used, absl::Now());
//   }
//   health.Lagging(lag, now, view);  // SetReplicaViewResponse.lagging
//
// A backup that is only slow is not behind: each forward to it that runs
// out of time doubles the deadline of its next ones (up to max_deadline;
// each answer halves it again), so a backup whose link or CPU a big step
// saturates takes its forwards, late, instead of every try being cut off
// and sent again from the start. It counts as lagging once its forwards
// have failed without an answer for `lag`, the last of them with the full
// max_deadline or otherwise than by running out of time (refused,
// unreachable); the coordinator then fails it, which drops it from the
// acknowledgement set (logged and counted by the shard).
//
// Which answers count is the owner's: a table forward's OUT_OF_RANGE (a
// base the backup lacks) is an answer (TableReplicas), a chunk forward's
// is neither (Replicator: it resends the state without recording it).
//
// Thread safety: none. The owner guards it with its own mutex
// (ABSL_GUARDED_BY); no method blocks.
#ifndef SERVER_INTERNAL_BACKUP_HEALTH_H_
#define SERVER_INTERNAL_BACKUP_HEALTH_H_

#include <cstdint>
#include <map>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "server/internal/replica_view.h"

namespace ps {
namespace internal {

class BackupHealth {
 public:
  struct Options {
    // A forward's deadline while its backup answers
    // (ShardOptions.replicate_deadline), and the most it grows to while
    // forwards run out of time (replicate_max_deadline; one below
    // `deadline` counts as `deadline`).
    absl::Duration deadline = absl::Seconds(1);
    absl::Duration max_deadline = absl::Seconds(8);
  };

  explicit BackupHealth(Options options);

  // The deadline of the next forward to `backup`.
  absl::Duration DeadlineFor(uint32_t backup) const;

  // `backup` answered a forward: it is no longer failing, and the deadline
  // of its next ones halves (not below Options.deadline).
  void Answered(uint32_t backup);
  // A forward to `backup` given `used` failed with `s` (not OK) at `now`:
  // it is failing since `now` unless it already was. Out of time, the next
  // forwards get twice `used` (at least the deadline already set: a
  // forward sent before the last doubling may end after it), up to the
  // max_deadline.
  void Failed(uint32_t backup, const absl::Status& s, absl::Duration used,
              absl::Time now);

  // The backups not failed in `view` whose forwards have failed without an
  // answer since at least `now - lag`, the last of them with the full
  // max_deadline or otherwise than by running out of time; in increasing
  // order.
  std::vector<uint32_t> Lagging(absl::Duration lag, absl::Time now,
                                const ReplicaView& view) const;

  // `shard` (re)joins: its earlier failures no longer count. `shard` ==
  // `self` (this shard rejoins empty): no backup's do (a fenced primary's
  // refused forwards must not report a live backup).
  void Forget(uint32_t shard, uint32_t self);

 private:
  // How forwards to one backup have gone; absent: none failing, at the
  // default deadline.
  struct Health {
    // When they started failing (no answer since); InfinitePast: none
    // failing.
    absl::Time failing_since = absl::InfinitePast();
    // The last failure gave up on the backup: it had the full
    // max_deadline, or it was not a timeout.
    bool exhausted = false;
    // The next forward's deadline.
    absl::Duration deadline;
  };

  const absl::Duration deadline_;
  const absl::Duration max_deadline_;  // at least deadline_
  std::map<uint32_t, Health> health_;
};

}  // namespace internal
}  // namespace ps

#endif  // SERVER_INTERNAL_BACKUP_HEALTH_H_
