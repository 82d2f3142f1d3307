#include "server/stats.h"

#include <cmath>

namespace ps {
namespace {

int FloorLog2(uint64_t v) { return 63 - __builtin_clzll(v); }

}  // namespace

int LatencyHistogram::BucketOf(uint64_t value) {
  constexpr uint64_t kExact = 1u << kSubBits;
  if (value < kExact) return static_cast<int>(value);
  const int e = FloorLog2(value);  // >= kSubBits
  const int sub = static_cast<int>((value >> (e - kSubBits)) & (kExact - 1));
  return ((e - kSubBits + 1) << kSubBits) + sub;
}

double LatencyHistogram::Midpoint(int bucket) {
  constexpr int kExact = 1 << kSubBits;
  if (bucket < kExact) return bucket;
  const int e = (bucket >> kSubBits) + kSubBits - 1;
  const int sub = bucket & (kExact - 1);
  const double width = std::ldexp(1.0, e - kSubBits);
  return (kExact + sub) * width + width / 2;
}

void LatencyHistogram::Record(uint64_t value) {
  counts_[BucketOf(value)].fetch_add(1, std::memory_order_relaxed);
  sum_.fetch_add(value, std::memory_order_relaxed);
}

void LatencyHistogram::ToProto(double scale, int min_log2, int max_log2,
                               Histogram* out) const {
  out->Clear();
  std::array<uint64_t, kNumBuckets> snap;
  uint64_t total = 0;
  for (int i = 0; i < kNumBuckets; ++i) {
    snap[i] = counts_[i].load(std::memory_order_relaxed);
    total += snap[i];
  }
  // Buckets below BucketOf(2^k) hold exactly the values < 2^k.
  uint64_t below = 0;
  int next = 0;
  for (int k = min_log2; k <= max_log2; ++k) {
    const int edge = BucketOf(uint64_t{1} << k);
    uint64_t cumulative = below;
    for (; next < edge; ++next) cumulative += snap[next];
    out->add_bounds(std::ldexp(scale, k));
    out->add_counts(cumulative - below);
    below = cumulative;
  }
  out->add_counts(total - below);
  out->set_sum(static_cast<double>(sum_.load(std::memory_order_relaxed)) *
               scale);
}

uint64_t LatencyHistogram::count() const {
  uint64_t n = 0;
  for (const auto& c : counts_) n += c.load(std::memory_order_relaxed);
  return n;
}

double LatencyHistogram::Percentile(double q) const {
  std::array<uint64_t, kNumBuckets> snap;
  uint64_t total = 0;
  for (int i = 0; i < kNumBuckets; ++i) {
    snap[i] = counts_[i].load(std::memory_order_relaxed);
    total += snap[i];
  }
  if (total == 0) return 0;
  q = q < 0 ? 0 : (q > 1 ? 1 : q);
  // The smallest bucket whose cumulative count reaches ceil(q * total).
  uint64_t rank = static_cast<uint64_t>(std::ceil(q * total));
  if (rank == 0) rank = 1;
  uint64_t seen = 0;
  for (int i = 0; i < kNumBuckets; ++i) {
    seen += snap[i];
    if (seen >= rank) return Midpoint(i);
  }
  return Midpoint(kNumBuckets - 1);
}

void PowerOfTwoHistogram::Record(uint64_t value) {
  int bucket = value == 0 ? 0 : FloorLog2(value) + 1;
  if (bucket >= kNumBuckets) bucket = kNumBuckets - 1;
  counts_[bucket].fetch_add(1, std::memory_order_relaxed);
  sum_.fetch_add(value, std::memory_order_relaxed);
}

void PowerOfTwoHistogram::ToProto(Histogram* out) const {
  out->Clear();
  for (int i = 0; i + 1 < kNumBuckets; ++i) {
    out->add_bounds(std::ldexp(1.0, i));
  }
  for (const auto& c : counts_)
    out->add_counts(c.load(std::memory_order_relaxed));
  out->set_sum(static_cast<double>(sum_.load(std::memory_order_relaxed)));
}

void ReasonCounts::Add(const std::string& reason) {
  absl::MutexLock l(&mu_);
  ++counts_[reason];
}

void ReasonCounts::Set(const std::string& reason, uint64_t n) {
  absl::MutexLock l(&mu_);
  counts_[reason] = n;
}

void ReasonCounts::CopyTo(
    google::protobuf::Map<std::string, uint64_t>* out) const {
  absl::MutexLock l(&mu_);
  for (const auto& [reason, n] : counts_) (*out)[reason] = n;
}

}  // namespace ps
