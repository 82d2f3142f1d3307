// Cheap, lock-free histograms for the shard's statistics (proto ShardStats).
//
//   LatencyHistogram apply_ns;
//   apply_ns.Record(elapsed_ns);                 // any thread
//   double p99_us = apply_ns.Percentile(0.99) / 1000;
//
//   PowerOfTwoHistogram staleness;
//   staleness.Record(3);
//   staleness.ToProto(job_stats.mutable_staleness());
//
// Both record with one relaxed atomic increment: they sit on the push path.
#ifndef SERVER_STATS_H_
#define SERVER_STATS_H_

#include <array>
#include <atomic>
#include <cstdint>

#include "proto/ps.pb.h"

namespace ps {

// Log-bucketed histogram of non-negative integers (e.g. nanoseconds): each
// power of two is split in 4 buckets, so a percentile is within 12.5% of the
// true value. Thread-safe; Record() never blocks. A percentile read while
// others record sees some recent records and not others.
class LatencyHistogram {
 public:
  LatencyHistogram() = default;
  LatencyHistogram(const LatencyHistogram&) = delete;
  LatencyHistogram& operator=(const LatencyHistogram&) = delete;

  void Record(uint64_t value);

  // The q-quantile (q in [0, 1]) as the midpoint of the bucket holding it;
  // 0 when nothing was recorded.
  double Percentile(double q) const;

  uint64_t count() const;

 private:
  static constexpr int kSubBits = 2;
  static constexpr int kNumBuckets = (64 - kSubBits + 1) << kSubBits;
  static int BucketOf(uint64_t value);
  static double Midpoint(int bucket);

  std::array<std::atomic<uint64_t>, kNumBuckets> counts_{};
};

// Histogram of non-negative integers with bounds 1, 2, 4, ..., 2^(n-2):
// bucket 0 holds 0, bucket i holds [2^(i-1), 2^i), the last everything from
// 2^(n-2) up. Thread-safe; Record() never blocks.
class PowerOfTwoHistogram {
 public:
  static constexpr int kNumBuckets = 18;  // 0, 1, 2-3, ..., >= 65536

  PowerOfTwoHistogram() = default;
  PowerOfTwoHistogram(const PowerOfTwoHistogram&) = delete;
  PowerOfTwoHistogram& operator=(const PowerOfTwoHistogram&) = delete;

  void Record(uint64_t value);

  // Writes bounds (kNumBuckets - 1 of them) and counts (kNumBuckets), as
  // proto Histogram documents.
  void ToProto(Histogram* out) const;

 private:
  std::array<std::atomic<uint64_t>, kNumBuckets> counts_{};
};

}  // namespace ps

#endif  // SERVER_STATS_H_
