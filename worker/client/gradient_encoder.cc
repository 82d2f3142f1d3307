#include "worker/client/gradient_encoder.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>

#include "common/defaults.h"
#include "core/wire_format.h"

namespace ps {
namespace {

// |x| as an integer that orders like the magnitude, NaN above inf: a total
// order, so the selection never depends on the sort's internals.
inline uint32_t MagnitudeKey(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof(u));
  return u & 0x7fffffffu;
}

// Magnitude keys are bucketed by their top bits (sign excluded): exponent
// and the leading mantissa bits, 2^11 buckets, a histogram that fits L1.
constexpr int kBucketShift = 20;
constexpr size_t kBuckets = size_t{1} << (31 - kBucketShift);

// The offsets, ascending, of the k entries of largest |v|, ties to the
// lower offset. O(length) in three passes and no copy of `v`: a histogram
// of the keys' top bits finds the bucket that holds the k-th largest, an
// nth_element over that bucket's keys alone finds it exactly, and one pass
// in offset order takes every larger entry and the first equal ones.
std::vector<uint32_t> SelectTopk(const float* v, size_t n, uint64_t k) {
  // Plain pointers and locals in the loops: a thread_local or a vector
  // member there is reloaded on every element.
  static thread_local std::vector<uint64_t> histogram_storage;
  static thread_local std::vector<uint32_t> candidate_storage;
  std::vector<uint64_t>& histogram = histogram_storage;
  histogram.assign(kBuckets, 0);
  uint64_t* h = histogram.data();
  for (size_t i = 0; i < n; ++i) ++h[MagnitudeKey(v[i]) >> kBucketShift];
  // The bucket of the k-th largest, and how many entries lie above it.
  size_t bucket = kBuckets;
  uint64_t above_bucket = 0;
  while (above_bucket + h[bucket - 1] < k) above_bucket += h[--bucket];
  --bucket;
  std::vector<uint32_t>& candidates = candidate_storage;
  // One slot more: the branch-free append writes every key, keeping it
  // only when it is in the bucket.
  candidates.resize(h[bucket] + 1);
  uint32_t* c = candidates.data();
  for (size_t i = 0; i < n; ++i) {
    const uint32_t key = MagnitudeKey(v[i]);
    *c = key;
    c += (key >> kBucketShift) == bucket;
  }
  candidates.pop_back();
  const size_t nth = k - above_bucket - 1;  // within the bucket, largest first
  std::nth_element(candidates.begin(), candidates.begin() + nth,
                   candidates.end(), std::greater<uint32_t>());
  const uint32_t threshold = candidates[nth];
  uint64_t above = above_bucket;
  for (uint32_t key : candidates) above += key > threshold;
  uint64_t ties = k - above;  // entries equal to the threshold to take
  std::vector<uint32_t> order(k);
  uint32_t* o = order.data();
  for (size_t i = 0; i < n; ++i) {
    const uint32_t key = MagnitudeKey(v[i]);
    if (key < threshold) continue;
    if (key == threshold) {
      if (ties == 0) continue;
      --ties;
    }
    *o++ = static_cast<uint32_t>(i);
  }
  return order;
}

// More than a float's relative rounding error (2^-24 ~ 6e-8).
constexpr double kFloatFractionSlack = 1e-7;

}  // namespace

GradientEncoder::GradientEncoder(const WireSpec& wire,
                                 std::vector<uint64_t> chunk_lengths)
    : format_(Resolved(wire.format())),
      fraction_(wire.has_topk_fraction() ? wire.topk_fraction()
                                         : kDefaultTopkFraction),
      topk_(fraction_ < 1.0f),
      passthrough_(!topk_ && format_ == FP32),
      lengths_(std::move(chunk_lengths)),
      residuals_(new ChunkResidual[lengths_.size()]) {}

uint64_t GradientEncoder::TopkCount(uint64_t length) const {
  // The float nearest the fraction the user wrote (0.3f) is off by up to
  // 2^-24 relative; that must not add an element (0.3 of 10 is 3, not 4).
  const double n = static_cast<double>(length);
  const double k =
      std::ceil(static_cast<double>(fraction_) * n - kFloatFractionSlack * n);
  return std::clamp<uint64_t>(static_cast<uint64_t>(k), 1, length);
}

bool GradientEncoder::Serves(const WireSpec& wire,
                             const std::vector<uint64_t>& lengths) const {
  const float fraction =
      wire.has_topk_fraction() ? wire.topk_fraction() : kDefaultTopkFraction;
  return Resolved(wire.format()) == format_ && fraction == fraction_ &&
         lengths == lengths_;
}

void GradientEncoder::EncodeStep(uint32_t id, uint64_t step,
                                 absl::Span<const float> gradient,
                                 EncodedChunk* out) {
  if (!topk_) {
    Encode(id, gradient, out);
    return;
  }
  ChunkResidual& r = residuals_[id];
  absl::MutexLock lock(&r.mu);
  if (r.has_last && r.last_step == step) {
    *out = r.last;  // the step again: its encoding, the residual as it is
    return;
  }
  EncodeTopk(r, lengths_[id], gradient, out);
  r.has_last = true;
  r.last_step = step;
  r.last = *out;
}

void GradientEncoder::Encode(uint32_t id, absl::Span<const float> gradient,
                             EncodedChunk* out) {
  if (topk_) {
    ChunkResidual& r = residuals_[id];
    absl::MutexLock lock(&r.mu);
    EncodeTopk(r, lengths_[id], gradient, out);
    return;
  }
  out->indices.clear();
  out->format = EncodeValues(format_, gradient, &out->data);
  if (format_ != FP32 && out->format == WIRE_FORMAT_UNSPECIFIED) {
    fallbacks_.fetch_add(1, std::memory_order_relaxed);
  }
}

void GradientEncoder::EncodeTopk(ChunkResidual& r, uint64_t length,
                                 absl::Span<const float> gradient,
                                 EncodedChunk* out) {
  std::vector<float>& v = r.values;
  if (v.empty()) v.assign(length, 0.0f);
  // v = gradient + residual: what this step owes the shard.
  float* sum = v.data();
  const float* g = gradient.data();
  for (uint64_t i = 0; i < length; ++i) sum[i] += g[i];

  const uint64_t k = TopkCount(length);
  const std::vector<uint32_t> order = SelectTopk(v.data(), v.size(), k);

  std::vector<float> picked(k);
  out->indices.clear();
  out->indices.reserve(4 * k);
  for (uint64_t j = 0; j < k; ++j) {
    picked[j] = v[order[j]];
    AppendOffset(order[j], &out->indices);
  }
  out->format = EncodeValues(format_, picked, &out->data);
  if (format_ != FP32 && out->format == WIRE_FORMAT_UNSPECIFIED) {
    fallbacks_.fetch_add(1, std::memory_order_relaxed);
  }
  // The residual keeps what the shard will not see: the unsent entries
  // whole, and the rounding error of the sent ones.
  for (uint64_t j = 0; j < k; ++j) {
    v[order[j]] -= ValueAt(out->format, out->data, j);
  }
}

std::vector<float> GradientEncoder::Residual(uint32_t id) const {
  const ChunkResidual& r = residuals_[id];
  absl::MutexLock lock(&r.mu);
  return r.values.empty() ? std::vector<float>(lengths_[id], 0.0f) : r.values;
}

}  // namespace ps
