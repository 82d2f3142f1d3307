#include "worker/client/sparse_split.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/sparse_rows_codec.h"

namespace ps {

absl::StatusOr<std::vector<uint32_t>> RowOwners(const Placement& p) {
  if (p.table_shards_size() == 0) {
    std::vector<uint32_t> all(p.num_shards());
    for (uint32_t s = 0; s < p.num_shards(); ++s) all[s] = s;
    return all;
  }
  for (int i = 0; i < p.table_shards_size(); ++i) {
    if (p.table_shards(i) >= p.num_shards()) {
      return absl::InvalidArgumentError(
          absl::StrCat("placement.table_shards[", i, "]: ", p.table_shards(i),
                       " is past placement.num_shards ", p.num_shards()));
    }
  }
  return std::vector<uint32_t>(p.table_shards().begin(),
                               p.table_shards().end());
}
namespace {

size_t EntryOverhead(const SparseRowsOut& r) {
  return r.table.size() + kSparseEntryOverheadBytes;
}

size_t FloatsPerRow(const SparseRowsOut& r) {
  return r.ids.empty() ? 0 : r.values.size() / r.ids.size();
}

// The part being filled, and what it has taken of each direction's budget.
class PartBuilder {
 public:
  PartBuilder(size_t head_bytes, size_t limit)
      : head_bytes_(head_bytes), limit_(limit) {
    Next();
  }

  // Rows [begin, end) of gradients entry `g`, as many as fit, into the
  // current part (a new part when none fit). Returns the next begin, or
  // `begin` when one row does not fit an empty part.
  size_t AddGradients(const SparseRowsOut& g, size_t begin) {
    const size_t floats = FloatsPerRow(g);
    const size_t row = sizeof(uint64_t) + floats * sizeof(float);
    const size_t n = Fit(request_, EntryOverhead(g), row, g.ids.size() - begin);
    if (n == 0) return NewPartOr(begin);
    SparseRowsOut& out = parts_.back().gradients.emplace_back();
    out.table = g.table;
    out.ids.assign(g.ids.begin() + begin, g.ids.begin() + begin + n);
    out.values.assign(g.values.begin() + begin * floats,
                      g.values.begin() + (begin + n) * floats);
    request_ += EntryOverhead(g) + n * row;
    empty_ = false;
    return begin + n;
  }

  // Ids [begin, end) of pulls entry `j` of `rows`, likewise (both the
  // request's ids and the reply's rows must fit).
  size_t AddPull(const SparseShardRows& rows, size_t j, size_t begin) {
    const SparseRowsOut& p = rows.pulls[j];
    const size_t left = p.ids.size() - begin;
    const size_t reply_row =
        sizeof(uint64_t) + rows.pull_row_floats[j] * sizeof(float);
    const size_t n =
        std::min(Fit(request_, EntryOverhead(p), sizeof(uint64_t), left),
                 Fit(reply_, EntryOverhead(p), reply_row, left));
    if (n == 0) return NewPartOr(begin);
    SparseShardRows& part = parts_.back();
    SparseRowsOut& out = part.pulls.emplace_back();
    out.table = p.table;
    out.ids.assign(p.ids.begin() + begin, p.ids.begin() + begin + n);
    part.pull_row_floats.push_back(rows.pull_row_floats[j]);
    part.pull_entry.push_back(rows.pull_entry[j]);
    const std::vector<uint32_t>& pos = rows.pull_positions[j];
    part.pull_positions.emplace_back(pos.begin() + begin,
                                     pos.begin() + begin + n);
    request_ += EntryOverhead(p) + n * sizeof(uint64_t);
    reply_ += EntryOverhead(p) + n * reply_row;
    empty_ = false;
    return begin + n;
  }

  bool stuck() const { return stuck_; }
  std::vector<SparseShardRows> Take() && { return std::move(parts_); }

 private:
  void Next() {
    parts_.emplace_back();
    request_ = head_bytes_;
    reply_ = kSparseReplyHeadBytes;
    empty_ = true;
  }
  // How many of `left` rows of `row` bytes fit after `used` and `overhead`.
  size_t Fit(size_t used, size_t overhead, size_t row, size_t left) const {
    if (used + overhead >= limit_) return 0;
    return std::min(left, (limit_ - used - overhead) / row);
  }
  size_t NewPartOr(size_t begin) {
    if (empty_) {
      stuck_ = true;
    } else {
      Next();
    }
    return begin;
  }

  const size_t head_bytes_;
  const size_t limit_;
  std::vector<SparseShardRows> parts_;
  size_t request_ = 0;
  size_t reply_ = 0;
  bool empty_ = true;
  bool stuck_ = false;
};

}  // namespace

size_t SparseRequestBytes(const SparseShardRows& rows, size_t head_bytes) {
  size_t n = head_bytes;
  for (const SparseRowsOut& g : rows.gradients) {
    n += EntryOverhead(g) + g.ids.size() * sizeof(uint64_t) +
         g.values.size() * sizeof(float);
  }
  for (const SparseRowsOut& p : rows.pulls) {
    n += EntryOverhead(p) + p.ids.size() * sizeof(uint64_t);
  }
  return n;
}

size_t SparseReplyBytes(const SparseShardRows& rows) {
  size_t n = kSparseReplyHeadBytes;
  for (size_t j = 0; j < rows.pulls.size(); ++j) {
    n += EntryOverhead(rows.pulls[j]) +
         rows.pulls[j].ids.size() *
             (sizeof(uint64_t) + rows.pull_row_floats[j] * sizeof(float));
  }
  return n;
}

absl::StatusOr<std::vector<SparseShardRows>> SplitSparseRows(
    SparseShardRows rows, size_t head_bytes, size_t limit) {
  PartBuilder b(head_bytes, limit);
  for (const SparseRowsOut& g : rows.gradients) {
    for (size_t at = 0; at < g.ids.size() && !b.stuck();) {
      at = b.AddGradients(g, at);
    }
  }
  for (size_t j = 0; j < rows.pulls.size(); ++j) {
    for (size_t at = 0; at < rows.pulls[j].ids.size() && !b.stuck();) {
      at = b.AddPull(rows, j, at);
    }
  }
  if (b.stuck()) {
    return absl::InvalidArgumentError(
        absl::StrCat("one row (with the request's fields) does not fit "
                     "max_message_bytes ",
                     limit));
  }
  std::vector<SparseShardRows> parts = std::move(b).Take();
  if (parts.size() > kMaxSparseExchangeParts) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the step would take ", parts.size(), " parts of max_message_bytes ",
        limit, ", over the bound of ", kMaxSparseExchangeParts));
  }
  return parts;
}

}  // namespace ps
