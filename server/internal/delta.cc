#include "server/internal/delta.h"

#include <cstring>
#include <limits>

#include "core/wire_format.h"

namespace ps {
namespace internal {
namespace {

constexpr uint64_t kMaxRelativeVersion = std::numeric_limits<uint32_t>::max();

}  // namespace

bool WantsDeltaPulls(const JobSpec& spec) {
  return spec.wire().has_topk_fraction() && spec.wire().topk_fraction() < 1.0f;
}

uint64_t ChangeLog::Bytes(uint64_t length, uint32_t num_workers) {
  // changed_at_, answered_, and a cached delta: smaller than the chunk in
  // FP32 (EncodeDelta refuses bigger ones).
  return length * sizeof(uint32_t) + uint64_t{num_workers} * sizeof(uint64_t) +
         length * sizeof(float) + sizeof(DeltaEncoding);
}

void ChangeLog::Start(uint64_t version, uint64_t length, uint32_t num_workers) {
  since_ = version;
  changed_at_.assign(length, 0);
  overflow_ = false;
  answered_.assign(num_workers, kNoBase);
}

void ChangeLog::Record(const float* before, absl::Span<const float> after,
                       uint64_t version) {
  if (overflow_ || !enabled()) return;
  if (version - since_ > kMaxRelativeVersion) {
    overflow_ = true;
    return;
  }
  const uint32_t at = static_cast<uint32_t>(version - since_);
  const size_t n = after.size();
  uint32_t* changed = changed_at_.data();
  // Bitwise: -0 vs 0 and NaN payloads count as changes, like the bytes a
  // dense reply would carry.
  for (size_t i = 0; i < n; ++i) {
    uint32_t a, b;
    std::memcpy(&a, before + i, sizeof(a));
    std::memcpy(&b, after.data() + i, sizeof(b));
    changed[i] = a != b ? at : changed[i];
  }
}

void ChangeLog::SetAnswered(uint32_t worker, uint64_t version) {
  if (enabled()) answered_[worker] = version;
}

bool ChangeLog::CanServe(uint32_t worker, uint64_t base,
                         uint64_t version) const {
  return enabled() && !overflow_ && base != kNoBase &&
         worker < answered_.size() && answered_[worker] == base &&
         base >= since_ && base <= version;
}

bool ChangeLog::ChangedSince(uint64_t base, size_t max,
                             std::vector<uint32_t>* offsets) const {
  const uint32_t after = static_cast<uint32_t>(base - since_);
  const size_t n = changed_at_.size();
  const uint32_t* changed = changed_at_.data();
  for (size_t i = 0; i < n; ++i) {
    if (changed[i] <= after) continue;
    if (offsets->size() == max) return false;
    offsets->push_back(static_cast<uint32_t>(i));
  }
  return true;
}

std::shared_ptr<DeltaEncoding> EncodeDelta(
    const ChangeLog& log, uint32_t worker, absl::Span<const float> values,
    uint64_t base, uint64_t version, WireFormat format,
    std::shared_ptr<DeltaEncoding> reuse) {
  if (!log.CanServe(worker, base, version)) return nullptr;
  const size_t element = ElementBytes(format);
  // Smaller than dense: n * (offset + element) < length * element.
  const size_t dense = values.size() * element;
  const size_t max =
      dense == 0 ? 0 : (dense - 1) / (sizeof(uint32_t) + element);
  static thread_local std::vector<uint32_t> offsets;
  static thread_local std::vector<float> changed;
  offsets.clear();
  if (!log.ChangedSince(base, max, &offsets)) return nullptr;
  changed.resize(offsets.size());
  for (size_t k = 0; k < offsets.size(); ++k) changed[k] = values[offsets[k]];
  std::shared_ptr<DeltaEncoding> d =
      reuse != nullptr ? std::move(reuse) : std::make_shared<DeltaEncoding>();
  d->format = EncodeValues(format, changed, &d->data);
  // A value beyond the narrow format: the full reply goes as FP32 and the
  // worker's copy in `format` is no base for it.
  if (Resolved(d->format) != Resolved(format)) return nullptr;
  d->base = base;
  d->version = version;
  // Native uint32s, as core/wire_format.h AppendOffset writes them.
  d->indices.assign(reinterpret_cast<const char*>(offsets.data()),
                    offsets.size() * sizeof(uint32_t));
  return d;
}

}  // namespace internal
}  // namespace ps
