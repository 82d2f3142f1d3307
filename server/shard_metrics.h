// ShardMetrics: a shard's statistics as Prometheus metrics. Collect() asks
// the Shard for its Stats (every job) at scrape time and renders them: the
// push path keeps its lock-free counters and histograms (server/stats.h)
// and never waits for a scrape; a scrape takes each chunk's mutex in turn,
// as `psctl stats` does. A dropped job leaves the Stats, so its series
// disappear with it: the label values are bounded by the jobs the shard
// holds (and, per job, its workers, tables and request methods).
//
//   auto metrics = std::make_shared<ShardMetrics>(&shard);
//   MetricsServer::Start(options, metrics, &security);
//
// Names (docs/OBSERVABILITY.md): `ps_` prefix, base units, labels shard and
// job (plus worker, table, method, reason where said).
#ifndef SERVER_SHARD_METRICS_H_
#define SERVER_SHARD_METRICS_H_

#include <vector>

#include "prometheus/collectable.h"
#include "prometheus/metric_family.h"
#include "proto/ps.pb.h"
#include "server/shard.h"

namespace ps {

// `stats` (one shard's, every job) as metric families.
std::vector<prometheus::MetricFamily> ShardMetricFamilies(
    const ShardStats& stats);

// Thread-safe (Shard::Stats is). Borrows `shard`, which must outlive it.
class ShardMetrics : public prometheus::Collectable {
 public:
  explicit ShardMetrics(const Shard* shard) : shard_(shard) {}

  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  const Shard* const shard_;
};

}  // namespace ps

#endif  // SERVER_SHARD_METRICS_H_
