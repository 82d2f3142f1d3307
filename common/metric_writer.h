// MetricWriter: builds Prometheus metric families (prometheus-cpp's
// MetricFamily) from values read at scrape time, so that a Collectable can
// render existing statistics without keeping its own copies of them.
//
//   MetricWriter w;
//   w.Counter("ps_pushes_total", "Chunk gradients accepted.",
//             {{"job", "j"}, {"shard", "0"}}, 12);
//   w.Histogram("ps_push_staleness", "...", labels,
//               HistogramFromProto(stats.staleness(), /*integers=*/true));
//   std::vector<prometheus::MetricFamily> families = w.Take();
//
// Families keep the order in which their names first appear; a name must
// always come with the same type (checked: a programmer's error). Not
// thread-safe: one writer per scrape.
#ifndef COMMON_METRIC_WRITER_H_
#define COMMON_METRIC_WRITER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "prometheus/metric_family.h"
#include "proto/ps.pb.h"

namespace ps {

using MetricLabels = std::vector<prometheus::ClientMetric::Label>;

// A histogram's samples: cumulative counts at each upper bound (ascending,
// "le"), the total count (the +Inf bucket) and the sum.
struct HistogramSample {
  std::vector<prometheus::ClientMetric::Bucket> buckets;
  uint64_t count = 0;
  double sum = 0;
};

// Converts proto Histogram (bucket i holds [bounds[i-1], bounds[i])) to
// cumulative "le" buckets. `integers`: the values are integers, so the
// bucket below bound b holds exactly the values <= b - 1 and that is its
// "le"; otherwise "le" is b itself (a value exactly on a bound is counted
// in the next bucket). A histogram whose counts do not match its bounds
// gives the buckets it can and the total of its counts.
HistogramSample HistogramFromProto(const Histogram& h, bool integers);

class MetricWriter {
 public:
  void Counter(const std::string& name, const std::string& help,
               MetricLabels labels, double value);
  void Gauge(const std::string& name, const std::string& help,
             MetricLabels labels, double value);
  void Histogram(const std::string& name, const std::string& help,
                 MetricLabels labels, HistogramSample sample);

  // The families written so far; the writer is empty afterwards.
  std::vector<prometheus::MetricFamily> Take();

 private:
  prometheus::ClientMetric& Add(const std::string& name,
                                const std::string& help,
                                prometheus::MetricType type,
                                MetricLabels labels);

  std::vector<prometheus::MetricFamily> families_;
  absl::flat_hash_map<std::string, size_t> index_;  // name -> families_
};

}  // namespace ps

#endif  // COMMON_METRIC_WRITER_H_
