// Splitting one shard's SparseExchange of a step into parts that each fit
// a message (SparseExchangeRequest.part/parts, proto/ps.proto): the pushed
// rows and the pulled ids are cut into contiguous runs, in order, so that
// the shard, which concatenates the parts' rows in part order, sees the
// rows of the unsplit push in their order (and BSP stays bitwise the same);
// each part's reply answers its own pulled ids. No sockets.
//
//   SparseShardRows rows = ...;   // what one shard's call sends
//   if (!FitsOneMessage(rows, head_bytes, limit)) {
//     PS_ASSIGN_OR_RETURN(std::vector<SparseShardRows> parts,
//                         SplitSparseRows(std::move(rows), head_bytes, limit));
//   }
#ifndef WORKER_CLIENT_SPARSE_SPLIT_H_
#define WORKER_CLIENT_SPARSE_SPLIT_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/job.pb.h"
#include "worker/client/sparse_wire.h"

namespace ps {

// The shards that hold a job's rows under `p`, in ShardForId's index order
// (Placement.table_shards; every shard when it names none): row `id` goes
// to result[ShardForId(id, result.size())]. INVALID_ARGUMENT naming
// placement.table_shards[i] for a shard past num_shards.
absl::StatusOr<std::vector<uint32_t>> RowOwners(const Placement& p);

// One shard's rows of a step, as GrpcSparseClient sends them.
struct SparseShardRows {
  std::vector<SparseRowsOut> gradients;  // ids and their gradient rows
  std::vector<SparseRowsOut> pulls;      // ids only
  // Per pulls entry: floats per row, and what the caller tracks of each id
  // (its step entry and the positions the rows go back to), cut with it.
  std::vector<size_t> pull_row_floats;
  std::vector<size_t> pull_entry;
  std::vector<std::vector<uint32_t>> pull_positions;
};

// Bytes a request and its reply take beyond the rows: the head's scalar
// fields (`head_bytes`, the job id's included) and per SparseRows entry.
inline constexpr size_t kSparseEntryOverheadBytes = 32;
inline constexpr size_t kSparseReplyHeadBytes = 32;

// The request's and the reply's size as sent (an upper bound: varint
// lengths counted at their widest).
size_t SparseRequestBytes(const SparseShardRows& rows, size_t head_bytes);
size_t SparseReplyBytes(const SparseShardRows& rows);

// `rows` cut into 2 or more parts whose request and reply each fit `limit`
// bytes (by the bounds above), the rows in order: part i holds the runs
// after part i - 1's. kInvalidArgument when a single row does not fit, or
// when it takes more than kMaxSparseExchangeParts parts.
absl::StatusOr<std::vector<SparseShardRows>> SplitSparseRows(
    SparseShardRows rows, size_t head_bytes, size_t limit);

}  // namespace ps

#endif  // WORKER_CLIENT_SPARSE_SPLIT_H_
