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
//   ReasonCounts rejected;
//   rejected.Add("wrong_size");
//   rejected.CopyTo(job_stats.mutable_rejected());
//
// The histograms record with one relaxed atomic increment: they sit on the
// push path. ReasonCounts takes a mutex: it counts rare events (rejections).
#ifndef SERVER_STATS_H_
#define SERVER_STATS_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/btree_map.h"
#include "absl/synchronization/mutex.h"
#include "google/protobuf/map.h"
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

  // Writes the counts with bounds 2^min_log2 * scale, ..., 2^max_log2 *
  // scale (powers of two are bucket edges, so the counts are exact) and the
  // sum of the recorded values times `scale` (e.g. 1e-9: ns to seconds).
  // Requires 0 <= min_log2 <= max_log2 < 64.
  void ToProto(double scale, int min_log2, int max_log2, Histogram* out) const;

 private:
  static constexpr int kSubBits = 2;
  static constexpr int kNumBuckets = (64 - kSubBits + 1) << kSubBits;
  static int BucketOf(uint64_t value);
  static double Midpoint(int bucket);

  std::array<std::atomic<uint64_t>, kNumBuckets> counts_{};
  std::atomic<uint64_t> sum_{0};  // wraps after 584 years of nanoseconds
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

  // Writes bounds (kNumBuckets - 1 of them), counts (kNumBuckets) and the
  // sum of the recorded values, as proto Histogram documents.
  void ToProto(Histogram* out) const;

 private:
  std::array<std::atomic<uint64_t>, kNumBuckets> counts_{};
  std::atomic<uint64_t> sum_{0};
};

// Counts of events by reason (JobStats.rejected, ShardStats.rejected).
// Thread-safe; a leaf lock, never held while calling out.
class ReasonCounts {
 public:
  ReasonCounts() = default;
  ReasonCounts(const ReasonCounts&) = delete;
  ReasonCounts& operator=(const ReasonCounts&) = delete;

  void Add(const std::string& reason) ABSL_LOCKS_EXCLUDED(mu_);
  void Set(const std::string& reason, uint64_t n) ABSL_LOCKS_EXCLUDED(mu_);
  // Writes every count into `out` (other keys stay).
  void CopyTo(google::protobuf::Map<std::string, uint64_t>* out) const
      ABSL_LOCKS_EXCLUDED(mu_);

 private:
  mutable absl::Mutex mu_;
  absl::btree_map<std::string, uint64_t> counts_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ps

#endif  // SERVER_STATS_H_
