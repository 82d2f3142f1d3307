#include "worker/model/id_dedup.h"

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"

namespace ps {
namespace {

// The table never holds fewer slots than this.
constexpr size_t kMinSlots = 16;

// MurmurHash3's 64-bit finaliser: every input bit reaches the high bits the
// table indexes with, so sequential or strided ids spread evenly.
inline uint64_t Mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return x;
}

// Occurrences and bags are counted in int32 (EmbeddingBatch).
constexpr size_t kMaxCount = std::numeric_limits<int32_t>::max();

absl::Status CheckCount(size_t n) {
  if (n > kMaxCount) {
    return absl::InvalidArgumentError(
        absl::StrCat("ids: ", n, " ids exceed the int32 occurrence index"));
  }
  return absl::OkStatus();
}

}  // namespace

void IdDedup::StartBatch(size_t n) {
  if (2 * n > slots_.size()) {
    size_t size = kMinSlots;
    int log2 = 4;
    while (size < 2 * n) {
      size *= 2;
      ++log2;
    }
    slots_.assign(size, Slot{0, 0, 0});
    shift_ = 64 - log2;
    epoch_ = 0;
  }
  if (++epoch_ == 0) {
    // Epochs wrapped: slots stamped long ago would look current again.
    for (Slot& s : slots_) s.epoch = 0;
    epoch_ = 1;
  }
}

int32_t IdDedup::Intern(uint64_t id) {
  const size_t mask = slots_.size() - 1;
  for (size_t i = Mix(id) >> shift_;; i = (i + 1) & mask) {
    Slot& s = slots_[i];
    if (s.epoch != epoch_) {
      const int32_t value = static_cast<int32_t>(unique_ids_.size());
      s = Slot{id, value, epoch_};
      unique_ids_.push_back(id);
      row_offsets_.push_back(0);  // this row's occurrence count, for now
      return value;
    }
    if (s.key == id) return s.value;
  }
}

void IdDedup::Build(absl::Span<const uint64_t> ids) {
  const size_t n = ids.size();
  StartBatch(n);
  unique_ids_.clear();
  row_offsets_.assign(1, 0);
  indices_.resize(n);
  for (size_t p = 0; p < n; ++p) {
    const int32_t u = Intern(ids[p]);
    indices_[p] = u;
    ++row_offsets_[u + 1];
  }
  // Counts -> CSR offsets, then each row's occurrences in ascending order.
  for (size_t u = 1; u < row_offsets_.size(); ++u) {
    row_offsets_[u] += row_offsets_[u - 1];
  }
  cursor_.assign(row_offsets_.begin(), row_offsets_.end() - 1);
  row_occurrences_.resize(n);
  for (size_t p = 0; p < n; ++p) {
    row_occurrences_[cursor_[indices_[p]]++] = static_cast<int32_t>(p);
  }
}

absl::Status IdDedup::DedupSingle(absl::Span<const uint64_t> ids) {
  if (absl::Status s = CheckCount(ids.size()); !s.ok()) return s;
  Build(ids);
  offsets_.resize(ids.size() + 1);
  for (size_t b = 0; b < offsets_.size(); ++b) {
    offsets_[b] = static_cast<int32_t>(b);
  }
  return absl::OkStatus();
}

absl::Status IdDedup::DedupBags(absl::Span<const uint64_t> ids,
                                absl::Span<const int32_t> offsets) {
  if (absl::Status s = CheckCount(ids.size()); !s.ok()) return s;
  if (offsets.empty() || offsets.size() - 1 > kMaxCount) {
    return absl::InvalidArgumentError(absl::StrCat(
        "offsets: ", offsets.size(), " elements (needs num_bags + 1, in [1, ",
        kMaxCount + 1, "])"));
  }
  if (offsets[0] != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("offsets[0] = ", offsets[0], " != 0"));
  }
  for (size_t b = 1; b < offsets.size(); ++b) {
    if (offsets[b] < offsets[b - 1]) {
      return absl::InvalidArgumentError(
          absl::StrCat("offsets[", b, "] = ", offsets[b], " < offsets[", b - 1,
                       "] = ", offsets[b - 1]));
    }
  }
  if (static_cast<size_t>(offsets.back()) != ids.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("offsets[", offsets.size() - 1, "] = ", offsets.back(),
                     " != number of ids ", ids.size()));
  }
  Build(ids);
  offsets_.assign(offsets.begin(), offsets.end());
  return absl::OkStatus();
}

EmbeddingBatch IdDedup::batch() const {
  EmbeddingBatch b;
  b.num_bags = num_bags();
  b.num_rows = num_unique();
  b.num_indices = num_indices();
  b.offsets = offsets_.data();
  b.indices = indices_.data();
  b.row_offsets = row_offsets_.data();
  b.row_occurrences = row_occurrences_.data();
  return b;
}

}  // namespace ps
