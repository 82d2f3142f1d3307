// The checks a SparseExchange request passes before anything changes, and
// the decoding of its pushed rows (server/sparse/job_tables.h lists what is
// rejected): the sparse side of server/internal/validation.h.
//
//   RequestChecks checks(job_id, {shard_id, num_shards, num_workers}, &tables);
//   PS_RETURN_IF_ERROR(checks.Check(req));
//   TablePushes pushes = TakePush(tables, &req);
//
// Thread safety: const after construction; any thread.
#ifndef SERVER_SPARSE_INTERNAL_REQUEST_CHECKS_H_
#define SERVER_SPARSE_INTERNAL_REQUEST_CHECKS_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "server/sparse/internal/table_set.h"
#include "server/sparse/sparse_request.h"

namespace ps {
namespace sparse_internal {

// The default bound on the bytes of incomplete split steps (parts of a
// SparseExchange, step_parts.h) a job's tables hold on one shard: 256 parts
// of the default 4 MiB message.
inline constexpr uint64_t kDefaultSplitBufferBytes = 1ull << 30;

// Where a job's tables live: this shard among the job's, and its workers;
// and the bound on the split steps they buffer. A row's shard is
// RowOwner(id, owners, num_shards) (core/sparse_ids.h; owners empty: every
// shard).
struct TablesPlacement {
  uint32_t shard_id = 0;
  uint32_t num_shards = 1;
  uint32_t num_workers = 1;
  uint64_t split_buffer_bytes = kDefaultSplitBufferBytes;
  std::vector<uint32_t> owners = {};  // Placement.table_shards
};

class RequestChecks {
 public:
  // `tables` is borrowed and must outlive this.
  RequestChecks(std::string job_id, TablesPlacement where,
                const TableSet* tables)
      : job_id_(std::move(job_id)), where_(where), tables_(*tables) {}

  // INVALID_ARGUMENT naming the field: a worker out of range, a part
  // number not below its part count (or a count of 0 with a part, or over
  // kMaxSparseExchangeParts), gradients
  // without push, an unknown table or one pushed twice, ids not a whole
  // number of uint64, the wrong number of values, an id of another shard or
  // beyond num_ids, a value not finite.
  absl::Status Check(const SparseRequestIn& req) const;

 private:
  absl::Status CheckRows(const SparseRowsIn& rows, bool push,
                         const std::string& at) const;

  const std::string job_id_;
  const TablesPlacement where_;
  const TableSet& tables_;
};

// The part fields of `req` (CheckParts is part of Check).
absl::Status CheckParts(const SparseRequestIn& req);

// The pushed rows of a checked request, per table index of `tables`,
// moved out of req->gradients (no copy).
TablePushes TakePush(const TableSet& tables, SparseRequestIn* req);

}  // namespace sparse_internal
}  // namespace ps

#endif  // SERVER_SPARSE_INTERNAL_REQUEST_CHECKS_H_
