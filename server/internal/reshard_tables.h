// Live re-placement of a job's sparse-table rows on one shard (BSP, one
// copy; server/internal/reshard.h moves the dense chunks). A row's owner is
// RowOwner(id, Placement.table_shards, num_shards) (core/sparse_ids.h), so
// going from one shard list to another moves the rows whose owner changes,
// from the old owner to the new one. Stop and copy, inside the step
// boundary pause the chunks wait at: once the tables are paused and
// quiesced at step B (every push of B refused, the version B), each new
// owner's PREPARE builds its fresh tables from
//   * its own old rows that stay (exported and installed locally), and
//   * the rows each other old owner holds for it (FetchChunks with
//     rows_for_shard), in pieces of at most kRowPieceBytes,
// at version B (JobTables::SaveRowsWhere / InstallRows: values, optimizer
// state, push counts, last steps and admission counters, bit for bit). BSP
// buffers nothing at B, so the (worker, step) dedupe state is the version
// alone. COMMIT swaps the new job in: the old tables are closed ABORTED,
// and a worker's exchange of an older placement epoch is refused ABORTED
// (it fetches its assignment and sends step B again to the new owners).
// An ABORT leaves the old tables exactly as they were (nothing of them is
// changed by an export) and lifts their pause.
//
//   // Old owner, serving a new owner's fetch:
//   PS_RETURN_IF_ERROR(CopyRows(job, shard_id, req, resp));
//   // New owner, in PREPARE (no lock held; blocks on the fetches):
//   PS_ASSIGN_OR_RETURN(FetchTally t,
//                       BuildTables(old, req, fetch, reserve, plan));
//
// Thread safety: any thread; CopyRows takes the job's replacement mutex.
#ifndef SERVER_INTERNAL_RESHARD_TABLES_H_
#define SERVER_INTERNAL_RESHARD_TABLES_H_

#include <cstdint>
#include <functional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/ps.pb.h"
#include "server/internal/job.h"
#include "server/internal/reshard.h"

namespace ps {
namespace internal {

// The default and the largest piece of a rows stream in one answer.
inline constexpr uint32_t kRowPieceBytes = 1u << 20;
inline constexpr uint32_t kMaxRowPieceBytes = 3u << 20;

// FetchChunks with rows_for_shard: the piece from req.rows_offset of the
// stream of this shard's rows whose owner under req.table_shards is
// req.rows_for_shard (made on the first ask of the pause, then kept).
// INVALID_ARGUMENT naming the field: a job without tables, chunk_ids too,
// table_shards empty or naming a shard past the cluster, rows_for_shard
// not among them, max_piece_bytes over kMaxRowPieceBytes, rows_offset past
// the stream. FAILED_PRECONDITION unless the job is paused for req.epoch
// and its tables are quiesced. Nothing changes.
absl::Status CopyRows(Job& job, uint32_t shard_id,
                      const FetchChunksRequest& req, FetchChunksResponse* resp);

// Called with the bytes of each rows stream a PREPARE stages (this shard's
// own, and each other old owner's as soon as its first piece names its
// size, before the rest is fetched), and once more with what the installed
// tables hold beyond the streams: an error (the shard's memory budget)
// stops the build. Any thread; the caller keeps the sum it granted.
using ReserveRows = std::function<absl::Status(uint64_t bytes)>;

// PREPARE: plan.job's tables (fresh, placed by req.placement) take the
// rows they own under it from `old` (paused and quiesced at step B): those
// `old` holds here, and those of every other old owner, fetched through
// `fetch` in pieces, each stream's bytes granted by `reserve` first.
// Nothing when plan.job has no tables or owns no rows. INVALID_ARGUMENT
// naming shard_addresses for an old owner without one; errors name the
// shard; nothing of `old` changes. The tally counts the rows' bytes
// fetched from other shards.
absl::StatusOr<FetchTally> BuildTables(const Job& old,
                                       const ReshardRequest& req,
                                       const FetchBatch& fetch,
                                       const ReserveRows& reserve,
                                       ReplacementPlan& plan);

}  // namespace internal
}  // namespace ps

#endif  // SERVER_INTERNAL_RESHARD_TABLES_H_
