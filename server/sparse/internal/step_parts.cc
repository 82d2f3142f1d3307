#include "server/sparse/internal/step_parts.h"

#include <algorithm>
#include <utility>

#include "absl/hash/hash.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "core/float_bytes.h"

namespace ps {
namespace sparse_internal {
uint64_t Fingerprint(const TablePushes& p) {
  const absl::Hash<absl::string_view> hash;
  uint64_t h = p.ids.size();
  for (size_t k = 0; k < p.ids.size(); ++k) {
    h = h * 0x9E3779B97F4A7C15ull + hash(BytesOf(p.ids[k]));
    h = h * 0x9E3779B97F4A7C15ull + hash(BytesOf(p.grads[k]));
  }
  return h;
}

absl::StatusOr<StepParts::Added> StepParts::Add(
    SplitPart p, std::vector<WaiterPtr>* dropped) {
  const Key key(p.worker, p.step);
  auto it = sets_.find(key);
  if (it == sets_.end()) {
    Set fresh;
    fresh.parts = p.parts;
    fresh.deadline = p.waiter->deadline;
    fresh.pushed.resize(p.parts);
    fresh.fingerprint.resize(p.parts, 0);
    fresh.have.resize(p.parts, 0);
    it = sets_.emplace(key, std::move(fresh)).first;
  }
  Set& set = it->second;
  if (p.parts != set.parts) {
    Drop(it, dropped);
    return absl::InvalidArgumentError(absl::StrFormat(
        "parts: %d for part %d of worker %d's step %d, whose other parts said "
        "%d (its parts are dropped)",
        p.parts, p.part, p.worker, p.step, set.parts));
  }
  const uint64_t fingerprint = Fingerprint(p.pushed);
  Added added;
  if (set.have[p.part]) {
    if (fingerprint != set.fingerprint[p.part] ||
        p.pushed.bytes != set.pushed[p.part].bytes) {
      Drop(it, dropped);
      return absl::InvalidArgumentError(absl::StrFormat(
          "part: part %d of %d of worker %d's step %d came again with other "
          "rows (its parts are dropped)",
          p.part, p.parts, p.worker, p.step));
    }
    added.duplicate = true;
    set.waiters.push_back(std::move(p.waiter));
    return added;
  }
  if (bytes_ + p.bytes > max_bytes_) {
    const uint64_t held = bytes_;
    Drop(it, dropped);
    return absl::ResourceExhaustedError(absl::StrFormat(
        "parts: part %d of %d of worker %d's step %d (%d bytes) would hold "
        "%d bytes of incomplete split steps, over the bound of %d (its parts "
        "are dropped)",
        p.part, p.parts, p.worker, p.step, p.bytes, held + p.bytes,
        max_bytes_));
  }
  set.have[p.part] = 1;
  set.fingerprint[p.part] = fingerprint;
  set.pushed[p.part] = std::move(p.pushed);
  set.bytes += p.bytes;
  bytes_ += p.bytes;
  set.waiters.push_back(std::move(p.waiter));
  if (++set.received < set.parts) return added;
  added.complete = true;
  added.merged = Merge(set.pushed);
  added.waiters = std::move(set.waiters);
  bytes_ -= set.bytes;
  sets_.erase(it);
  return added;
}

TablePushes StepParts::Merge(std::vector<TablePushes>& parts) {
  TablePushes out;
  size_t tables = 0;
  for (const TablePushes& p : parts) tables = std::max(tables, p.ids.size());
  out.ids.resize(tables);
  out.grads.resize(tables);
  for (size_t k = 0; k < tables; ++k) {
    size_t ids = 0, grads = 0;
    for (const TablePushes& p : parts) {
      if (k < p.ids.size()) ids += p.ids[k].size();
      if (k < p.grads.size()) grads += p.grads[k].size();
    }
    out.ids[k].reserve(ids);
    out.grads[k].reserve(grads);
    for (TablePushes& p : parts) {
      if (k < p.ids.size()) {
        out.ids[k].insert(out.ids[k].end(), p.ids[k].begin(), p.ids[k].end());
        out.grads[k].insert(out.grads[k].end(), p.grads[k].begin(),
                            p.grads[k].end());
        // Freed as soon as copied: the set is gone after this.
        std::vector<uint64_t>().swap(p.ids[k]);
        std::vector<float>().swap(p.grads[k]);
      }
    }
  }
  for (const TablePushes& p : parts) out.bytes += p.bytes;
  return out;
}

void StepParts::Drop(absl::btree_map<Key, Set>::iterator it,
                     std::vector<WaiterPtr>* out) {
  for (WaiterPtr& w : it->second.waiters) out->push_back(std::move(w));
  bytes_ -= it->second.bytes;
  sets_.erase(it);
}

void StepParts::TakeLate(absl::Time now, std::vector<Expired>* late) {
  std::vector<Key> expired;
  for (const auto& [key, set] : sets_) {
    if (set.deadline <= now) expired.push_back(key);
  }
  // (A btree's erase moves the other entries: look each up again.)
  for (const Key& key : expired) {
    auto it = sets_.find(key);
    Expired e;
    e.worker = it->first.first;
    e.step = it->first.second;
    e.parts = it->second.parts;
    for (uint32_t i = 0; i < e.parts; ++i) {
      if (!it->second.have[i]) e.missing.push_back(i);
    }
    Drop(it, &e.waiters);
    late->push_back(std::move(e));
  }
}

std::vector<WaiterPtr> StepParts::Take(uint32_t worker, uint64_t step) {
  std::vector<WaiterPtr> out;
  auto it = sets_.find(Key(worker, step));
  if (it != sets_.end()) Drop(it, &out);
  return out;
}

std::vector<WaiterPtr> StepParts::TakeAll() {
  std::vector<WaiterPtr> all;
  while (!sets_.empty()) Drop(sets_.begin(), &all);
  return all;
}

}  // namespace sparse_internal
}  // namespace ps
