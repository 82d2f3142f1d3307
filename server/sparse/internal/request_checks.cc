#include "server/sparse/internal/request_checks.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "core/float_bytes.h"
#include "core/sparse_ids.h"

namespace ps {
namespace sparse_internal {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "ids and values travel as little-endian bytes, copied as is");

namespace {

size_t IdCount(const SparseRows& r) { return r.ids().size() / 8; }

uint64_t IdAt(const std::string& bytes, size_t i) {
  uint64_t id;
  std::memcpy(&id, bytes.data() + i * sizeof(id), sizeof(id));
  return id;
}

}  // namespace

absl::Status RequestChecks::CheckRows(const SparseRows& rows, bool push,
                                      const std::string& at) const {
  const Table* t = tables_.Find(rows.table());
  if (t == nullptr) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s.table: unknown table \"%s\" in job %s", at, rows.table(), job_id_));
  }
  if (rows.ids().size() % 8 != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s.ids: %d bytes, not a whole number of uint64 ids (table %s)", at,
        rows.ids().size(), rows.table()));
  }
  const size_t n = IdCount(rows);
  const size_t want = push ? n * t->spec.dim() * sizeof(float) : 0;
  if (rows.values().size() != want) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s.values: %d bytes, want %d (%d ids x dim %d%s; table %s)", at,
        rows.values().size(), want, n, t->spec.dim(),
        push ? "" : ", none in a pull", rows.table()));
  }
  // Read in place: the push and the reply decode the ids once each.
  for (size_t i = 0; i < n; ++i) {
    const uint64_t id = IdAt(rows.ids(), i);
    if (t->spec.num_ids() != 0 && id >= t->spec.num_ids()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s.ids[%d]: id %d is outside table %s (num_ids %d)",
                          at, i, id, rows.table(), t->spec.num_ids()));
    }
    const uint32_t shard = ShardForId(id, where_.num_shards);
    if (shard != where_.shard_id) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s.ids[%d]: id %d belongs to shard %d, not %d (table %s)", at, i, id,
          shard, where_.shard_id, rows.table()));
    }
  }
  const int64_t bad = push ? FirstNonFinite(rows.values()) : -1;
  if (bad >= 0) {
    float v;
    std::memcpy(&v, rows.values().data() + bad * sizeof(float), sizeof(v));
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s.values[%d]: %g for id %d is not finite (table %s)", at, bad, v,
        IdAt(rows.ids(), bad / t->spec.dim()), rows.table()));
  }
  return absl::OkStatus();
}

absl::Status RequestChecks::Check(const SparseExchangeRequest& req) const {
  if (req.worker() >= where_.num_workers) {
    return absl::InvalidArgumentError(
        absl::StrFormat("worker: %d is out of range [0, %d) for job %s",
                        req.worker(), where_.num_workers, job_id_));
  }
  if (!req.push() && req.gradients_size() > 0) {
    return absl::InvalidArgumentError(
        "gradients: set without push (set push: true to push them)");
  }
  std::vector<bool> seen(tables_.size(), false);
  for (int i = 0; i < req.gradients_size(); ++i) {
    const std::string at = absl::StrCat("gradients[", i, "]");
    PS_RETURN_IF_ERROR(CheckRows(req.gradients(i), true, at));
    const size_t k = tables_.IndexOf(req.gradients(i).table());
    if (seen[k]) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s.table: table %s appears twice in one push", at,
                          req.gradients(i).table()));
    }
    seen[k] = true;
  }
  for (int i = 0; i < req.pull_size(); ++i) {
    PS_RETURN_IF_ERROR(
        CheckRows(req.pull(i), false, absl::StrCat("pull[", i, "]")));
  }
  return absl::OkStatus();
}

std::vector<uint64_t> DecodeIds(const std::string& bytes) {
  std::vector<uint64_t> ids(bytes.size() / 8);
  if (!ids.empty()) std::memcpy(ids.data(), bytes.data(), ids.size() * 8);
  return ids;
}

TablePushes DecodePush(const TableSet& tables,
                       const SparseExchangeRequest& req) {
  TablePushes p;
  p.ids.resize(tables.size());
  p.grads.resize(tables.size());
  for (const SparseRows& rows : req.gradients()) {
    const size_t k = tables.IndexOf(rows.table());
    p.ids[k] = DecodeIds(rows.ids());
    p.grads[k].resize(rows.values().size() / sizeof(float));
    if (!p.grads[k].empty()) {
      std::memcpy(p.grads[k].data(), rows.values().data(),
                  rows.values().size());
    }
    p.bytes += rows.ids().size() + rows.values().size();
  }
  return p;
}

}  // namespace sparse_internal
}  // namespace ps
