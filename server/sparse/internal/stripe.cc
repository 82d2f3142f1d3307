#include "server/sparse/internal/stripe.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace ps {
namespace sparse_internal {

Stripe::Stripe(const StripeConfig& config)
    : config_(config),
      store_(config.dim + config.state_floats, config.slab_rows_log2) {}

int64_t Stripe::Find(uint64_t id, uint64_t hash) const {
  return index_.Find(hash,
                     [&](uint32_t slot) { return store_.Meta(slot).id == id; });
}

bool Stripe::Read(uint64_t id, uint64_t hash, float* out) const {
  const int64_t slot = Find(id, hash);
  if (slot < 0) return false;
  std::memcpy(out, store_.Values(static_cast<uint32_t>(slot)),
              config_.dim * sizeof(float));
  return true;
}

void Stripe::ReadMany(const uint64_t* ids, const uint64_t* hashes,
                      const uint32_t* order, size_t n, float* out,
                      std::vector<uint32_t>* missing) const {
  for (size_t k = 0; k < n; ++k) {
    const uint32_t i = order[k];
    if (!Read(ids[i], hashes[i], out + size_t{i} * config_.dim)) {
      missing->push_back(i);
    }
  }
}

size_t Stripe::BytesAfterPush(absl::Span<const uint64_t> ids,
                              absl::Span<const uint64_t> hashes) const {
  size_t new_rows = 0;
  size_t new_counters = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (Find(ids[i], hashes[i]) >= 0) continue;
    const uint32_t seen =
        config_.admission_count > 1 ? admission_.Get(ids[i]) + 1 : 1;
    if (seen >= config_.admission_count) {
      ++new_rows;
    } else if (seen == 1) {
      ++new_counters;
    }
  }
  const size_t rows = store_.size() + new_rows;
  return store_.BytesFor(rows) + index_.BytesFor(rows) +
         admission_.BytesFor(admission_.size() + new_counters);
}

void Stripe::RemoveRow(uint32_t slot) {
  if (store_.tracking()) removed_.push_back(store_.Meta(slot).id);
  index_.Erase(RowHash(store_.Meta(slot).id), slot);
  const uint32_t moved_from = store_.Remove(slot);
  if (moved_from != slot) {
    index_.Move(RowHash(store_.Meta(slot).id), moved_from, slot);
  }
}

bool Stripe::RoomForRow() {
  if (config_.budget_bytes == 0) return true;
  for (;;) {
    const size_t rows = store_.size() + size_t{1};
    if (store_.BytesFor(rows) + index_.BytesFor(rows) + admission_.bytes() <=
        config_.budget_bytes) {
      return true;
    }
    if (store_.size() == 0) return false;
    RemoveRow(store_.oldest());
    ++counters_.lru_evictions;
  }
}

bool Stripe::RoomForCounter() {
  if (config_.budget_bytes == 0) return true;
  for (;;) {
    if (store_.bytes() + index_.bytes() +
            admission_.BytesFor(admission_.size() + 1) <=
        config_.budget_bytes) {
      return true;
    }
    if (store_.size() == 0) return false;
    RemoveRow(store_.oldest());
    ++counters_.lru_evictions;
  }
}

void Stripe::Push(absl::Span<const uint64_t> ids,
                  absl::Span<const uint64_t> hashes, const float* grads,
                  uint64_t step, UpdateFn update) {
  const uint32_t dim = config_.dim;
  const bool lru_budget = config_.lru && config_.budget_bytes > 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    const uint64_t id = ids[i];
    const float* grad = grads + i * dim;
    ++counters_.rows_pushed;
    int64_t slot = Find(id, hashes[i]);
    if (slot >= 0) {
      float* row = store_.Values(static_cast<uint32_t>(slot));
      update(row, row + dim, grad, id);
      if (config_.lru) {
        store_.Touch(static_cast<uint32_t>(slot), step);
      } else {
        store_.MarkPush(static_cast<uint32_t>(slot), step);
      }
      continue;
    }
    uint64_t pushes = 1;
    if (config_.admission_count > 1) {
      const uint32_t seen = admission_.Get(id) + 1;
      pushes = seen;
      if (seen < config_.admission_count) {
        if (seen == 1 && lru_budget && !RoomForCounter()) {
          ++counters_.dropped;
        } else {
          admission_.Set(id, seen);
          CounterChanged(id);
        }
        continue;
      }
      admission_.Erase(id);
      CounterChanged(id);
    }
    if (lru_budget && !RoomForRow()) {
      ++counters_.dropped;
      continue;
    }
    const uint32_t s = store_.Append(id, step, pushes);
    index_.Insert(hashes[i], s);
    float* row = store_.Values(s);
    config_.init->Fill(id, absl::MakeSpan(row, dim));
    std::fill(row + dim, row + dim + config_.state_floats, 0.0f);
    update(row, row + dim, grad, id);
    ++counters_.admissions;
  }
}

size_t Stripe::EvictExpired(uint64_t now_step, uint64_t ttl) {
  size_t evicted = 0;
  // Downwards: Remove() moves the last row, which was already checked.
  for (uint32_t slot = store_.size(); slot-- > 0;) {
    const uint64_t last = store_.Meta(slot).last_step;
    if (now_step >= last && now_step - last >= ttl) {
      RemoveRow(slot);
      ++evicted;
    }
  }
  counters_.ttl_evictions += evicted;
  return evicted;
}

void Stripe::OfferHottest(TopHotIds* top) const {
  for (uint32_t slot = 0; slot < store_.size(); ++slot) {
    const RowMeta& m = store_.Meta(slot);
    top->Offer(m.id, m.pushes);
  }
}

void Stripe::Freeze(StripeImage* image, bool changes) {
  std::shared_ptr<const RowCapture> capture = store_.Freeze();
  Snapshot(image, std::move(capture));  // null: the records copied
  image->changes = changes && store_.tracking();
  image->changed = store_.TakeChanges();
  image->changed_rows = 0;
  image->removed.clear();
  image->removed.swap(removed_);
  absl::flat_hash_set<uint64_t> counters_changed;
  counters_changed.swap(counters_changed_);
  if (!image->changes) {
    image->changed.clear();
    image->removed.clear();
    return;
  }
  for (uint64_t word : image->changed) {
    image->changed_rows += static_cast<uint32_t>(__builtin_popcountll(word));
  }
  // Only the counters that changed, each with its count now (0: gone).
  image->counters.clear();
  for (uint64_t id : counters_changed) {
    image->counters.emplace_back(id, admission_.Get(id));
  }
}

void Stripe::TrackChanges() {
  store_.TrackChanges();
  removed_.clear();
  counters_changed_.clear();
}

void Stripe::Snapshot(StripeImage* image) const { Snapshot(image, nullptr); }

void Stripe::Snapshot(StripeImage* image,
                      std::shared_ptr<const RowCapture> capture) const {
  image->records.clear();
  image->rows = store_.size();
  if (capture == nullptr) store_.CopyRecords(&image->records);
  image->capture = std::move(capture);
  image->oldest = store_.oldest();
  image->counters.clear();
  image->counters.reserve(admission_.size());
  admission_.ForEach([&](uint64_t id, uint32_t count) {
    image->counters.emplace_back(id, count);
  });
}

absl::Status Stripe::RestoreRow(uint64_t id, uint64_t last_step,
                                uint64_t pushes,
                                const float* values_and_state) {
  if (pushes == 0) {
    return absl::DataLossError(
        absl::StrCat("row id ", id, " has 0 pushes (a stored row has >= 1)"));
  }
  const uint64_t hash = RowHash(id);
  if (Find(id, hash) >= 0 || admission_.Get(id) != 0) {
    return absl::DataLossError(absl::StrCat("row id ", id, " appears twice"));
  }
  const uint32_t slot = store_.Append(id, last_step, pushes);
  index_.Insert(hash, slot);
  std::memcpy(store_.Values(slot), values_and_state,
              (config_.dim + config_.state_floats) * sizeof(float));
  return absl::OkStatus();
}

absl::Status Stripe::RestoreCounter(uint64_t id, uint32_t count) {
  if (count == 0) {
    return absl::DataLossError(
        absl::StrCat("admission counter of id ", id, " is 0"));
  }
  if (Find(id, RowHash(id)) >= 0 || admission_.Get(id) != 0) {
    return absl::DataLossError(absl::StrCat("id ", id, " appears twice"));
  }
  admission_.Set(id, count);
  return absl::OkStatus();
}

void Stripe::UpsertRow(uint64_t id, uint64_t last_step, uint64_t pushes,
                       const float* values_and_state) {
  const uint64_t hash = RowHash(id);
  const int64_t found = Find(id, hash);
  uint32_t slot;
  if (found >= 0) {
    slot = static_cast<uint32_t>(found);
    store_.SetMeta(slot, last_step, pushes, /*newest=*/config_.lru);
  } else {
    slot = store_.Append(id, last_step, pushes);
    index_.Insert(hash, slot);
  }
  std::memcpy(store_.Values(slot), values_and_state,
              (config_.dim + config_.state_floats) * sizeof(float));
}

void Stripe::RemoveId(uint64_t id) {
  const int64_t slot = Find(id, RowHash(id));
  if (slot >= 0) RemoveRow(static_cast<uint32_t>(slot));
}

void Stripe::SetCounter(uint64_t id, uint32_t count) {
  if (count == 0) {
    admission_.Erase(id);
  } else {
    admission_.Set(id, count);
  }
}

void Stripe::SwapData(Stripe& other) {
  const bool tracking = store_.tracking();
  const bool other_tracking = other.store_.tracking();
  std::swap(store_, other.store_);
  std::swap(index_, other.index_);
  std::swap(admission_, other.admission_);
  // Each side keeps its tracking, with a clean interval.
  if (tracking) TrackChanges();
  if (other_tracking) other.TrackChanges();
}

}  // namespace sparse_internal
}  // namespace ps
