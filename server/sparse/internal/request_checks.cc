#include "server/sparse/internal/request_checks.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "core/float_bytes.h"
#include "core/sparse_ids.h"
#include "core/sparse_rows_codec.h"

namespace ps {
namespace sparse_internal {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "ids and values travel as little-endian bytes, copied as is");

absl::Status RequestChecks::CheckRows(const SparseRowsIn& rows, bool push,
                                      const std::string& at) const {
  const Table* t = tables_.Find(rows.table);
  if (t == nullptr) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s.table: unknown table \"%s\" in job %s", at, rows.table, job_id_));
  }
  if (rows.ids_bytes % 8 != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s.ids: %d bytes, not a whole number of uint64 ids (table %s)", at,
        rows.ids_bytes, rows.table));
  }
  const size_t n = rows.ids.size();
  const size_t want = push ? n * t->spec.dim() * sizeof(float) : 0;
  if (rows.values_bytes != want) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s.values: %d bytes, want %d (%d ids x dim %d%s; table %s)", at,
        rows.values_bytes, want, n, t->spec.dim(),
        push ? "" : ", none in a pull", rows.table));
  }
  for (size_t i = 0; i < n; ++i) {
    const uint64_t id = rows.ids[i];
    if (t->spec.num_ids() != 0 && id >= t->spec.num_ids()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s.ids[%d]: id %d is outside table %s (num_ids %d)",
                          at, i, id, rows.table, t->spec.num_ids()));
    }
    const uint32_t shard = RowOwner(id, where_.owners, where_.num_shards);
    if (shard != where_.shard_id) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s.ids[%d]: id %d belongs to shard %d, not %d (table %s)", at, i, id,
          shard, where_.shard_id, rows.table));
    }
  }
  const int64_t bad = push ? FirstNonFinite(BytesOf(rows.values)) : -1;
  if (bad >= 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s.values[%d]: %g for id %d is not finite (table %s)", at, bad,
        rows.values[bad], rows.ids[bad / t->spec.dim()], rows.table));
  }
  return absl::OkStatus();
}

absl::Status CheckParts(const SparseRequestIn& req) {
  if (req.parts > kMaxSparseExchangeParts) {
    return absl::InvalidArgumentError(
        absl::StrFormat("parts: %d is over the bound %d (part %d)", req.parts,
                        kMaxSparseExchangeParts, req.part));
  }
  if (req.parts == 0 && req.part != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "parts: 0 with part %d (a split step names its part count)", req.part));
  }
  if (req.parts != 0 && req.part >= req.parts) {
    return absl::InvalidArgumentError(
        absl::StrFormat("part: %d is not below parts %d", req.part, req.parts));
  }
  return absl::OkStatus();
}

absl::Status RequestChecks::Check(const SparseRequestIn& req) const {
  if (req.worker >= where_.num_workers) {
    return absl::InvalidArgumentError(
        absl::StrFormat("worker: %d is out of range [0, %d) for job %s",
                        req.worker, where_.num_workers, job_id_));
  }
  PS_RETURN_IF_ERROR(CheckParts(req));
  if (!req.push && !req.gradients.empty()) {
    return absl::InvalidArgumentError(
        "gradients: set without push (set push: true to push them)");
  }
  std::vector<bool> seen(tables_.size(), false);
  for (size_t i = 0; i < req.gradients.size(); ++i) {
    const std::string at = absl::StrCat("gradients[", i, "]");
    PS_RETURN_IF_ERROR(CheckRows(req.gradients[i], true, at));
    const size_t k = tables_.IndexOf(req.gradients[i].table);
    if (seen[k]) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s.table: table %s appears twice in one push", at,
                          req.gradients[i].table));
    }
    seen[k] = true;
  }
  for (size_t i = 0; i < req.pull.size(); ++i) {
    PS_RETURN_IF_ERROR(
        CheckRows(req.pull[i], false, absl::StrCat("pull[", i, "]")));
  }
  return absl::OkStatus();
}

TablePushes TakePush(const TableSet& tables, SparseRequestIn* req) {
  TablePushes p;
  p.ids.resize(tables.size());
  p.grads.resize(tables.size());
  for (SparseRowsIn& rows : req->gradients) {
    const size_t k = tables.IndexOf(rows.table);
    p.bytes += rows.ids_bytes + rows.values_bytes;
    p.ids[k] = std::move(rows.ids);
    p.grads[k] = std::move(rows.values);
  }
  req->gradients.clear();
  return p;
}

}  // namespace sparse_internal
}  // namespace ps
