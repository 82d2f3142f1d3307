// The reasons under which the shard counts rejected requests: the keys of
// JobStats.rejected and ShardStats.rejected (documented in server/shard.h).
#ifndef SERVER_INTERNAL_REASONS_H_
#define SERVER_INTERNAL_REASONS_H_

namespace ps {
namespace internal {

inline constexpr char kUnknownJob[] = "unknown_job";
inline constexpr char kWorkerOutOfRange[] = "worker_out_of_range";
inline constexpr char kInactiveWorker[] = "inactive_worker";
inline constexpr char kUnknownChunk[] = "unknown_chunk";
inline constexpr char kChunkNotOnShard[] = "chunk_not_on_shard";
inline constexpr char kDuplicateChunk[] = "duplicate_chunk";
inline constexpr char kWrongSize[] = "wrong_size";
inline constexpr char kBadFormat[] = "bad_format";
inline constexpr char kBadIndices[] = "bad_indices";
inline constexpr char kBadDelta[] = "bad_delta";
inline constexpr char kVersionAhead[] = "version_ahead";
inline constexpr char kFutureStep[] = "future_step";
inline constexpr char kNonFinite[] = "non_finite";
inline constexpr char kBadMembership[] = "bad_membership";
inline constexpr char kBadSpec[] = "bad_spec";
inline constexpr char kSpecMismatch[] = "spec_mismatch";
inline constexpr char kOverBudget[] = "over_budget";
inline constexpr char kShutdown[] = "shutdown";
inline constexpr char kAheadOfRestore[] = "ahead_of_restore";
inline constexpr char kNoCheckpointDir[] = "no_checkpoint_dir";
inline constexpr char kCheckpointFailed[] = "checkpoint_failed";
// Replicated jobs: a request for a chunk this shard holds a backup of, and
// a forward refused (stale epoch, not from the acting primary, bad size).
inline constexpr char kNotActingPrimary[] = "not_acting_primary";
inline constexpr char kBadReplica[] = "bad_replica";
// A heartbeat (SetReplicaView) meant for another shard id.
inline constexpr char kWrongShard[] = "wrong_shard";
// SparseExchange: a job without tables, a bad request (unknown table, an id
// of another shard, a wrong size, NaN, ...), a table's budget reached.
inline constexpr char kNoTables[] = "no_tables";
inline constexpr char kSparseBadRequest[] = "sparse_bad_request";
inline constexpr char kSparseOverBudget[] = "sparse_over_budget";
// Live re-placement: a BSP push of a step the job pauses at (retried by the
// client), a request of an older placement epoch than the job's (its
// worker fetches the new assignment) or of one not committed here yet.
inline constexpr char kPaused[] = "paused";
inline constexpr char kOldPlacement[] = "old_placement";
inline constexpr char kPlacementAhead[] = "placement_ahead";

}  // namespace internal
}  // namespace ps

#endif  // SERVER_INTERNAL_REASONS_H_
