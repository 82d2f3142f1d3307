#include "worker/gradient_encoder.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

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

void GradientEncoder::Encode(uint32_t id, absl::Span<const float> gradient,
                             EncodedChunk* out) {
  if (topk_) {
    EncodeTopk(id, gradient, out);
    return;
  }
  out->indices.clear();
  out->format = EncodeValues(format_, gradient, &out->data);
  if (format_ != FP32 && out->format == WIRE_FORMAT_UNSPECIFIED) {
    fallbacks_.fetch_add(1, std::memory_order_relaxed);
  }
}

void GradientEncoder::EncodeTopk(uint32_t id, absl::Span<const float> gradient,
                                 EncodedChunk* out) {
  const uint64_t length = lengths_[id];
  ChunkResidual& r = residuals_[id];
  absl::MutexLock lock(&r.mu);
  std::vector<float>& v = r.values;
  if (v.empty()) v.assign(length, 0.0f);
  // v = gradient + residual: what this step owes the shard.
  for (uint64_t i = 0; i < length; ++i) v[i] += gradient[i];

  const uint64_t k = TopkCount(length);
  std::vector<uint32_t> order(length);
  std::iota(order.begin(), order.end(), 0u);
  auto larger = [&v](uint32_t a, uint32_t b) {
    const uint32_t ka = MagnitudeKey(v[a]), kb = MagnitudeKey(v[b]);
    return ka != kb ? ka > kb : a < b;
  };
  if (k < length) {
    std::nth_element(order.begin(), order.begin() + k, order.end(), larger);
  }
  order.resize(k);
  std::sort(order.begin(), order.end());

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
