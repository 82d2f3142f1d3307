// psbench's load mode: many concurrent clients PushPull for a while; errors,
// p99 latency, resident-memory growth of the shard processes.
//
//   LoadOptions options;
//   options.duration = absl::Seconds(60);
//   PS_ASSIGN_OR_RETURN(LoadReport r, RunLoad(*cluster, options));
//   return r.pass ? 0 : 1;
#ifndef TOOLS_PSBENCH_PSBENCH_LOAD_H_
#define TOOLS_PSBENCH_PSBENCH_LOAD_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/job.pb.h"
#include "tools/psbench/psbench_cluster.h"
#include "worker/client/ps_client.h"

namespace ps {
namespace bench {

struct LoadOptions {
  int clients = 64;
  absl::Duration duration = absl::Seconds(60);
  absl::Duration warmup = absl::Seconds(5);
  uint64_t bytes = 256 << 10;  // tensor size
  ConsistencyMode mode = ASP;
  uint64_t partition_bytes = 64 << 10;
  PsClientOptions client;
  double max_rss_growth = 0.10;
};

struct LoadReport {
  int clients = 0;
  uint64_t steps = 0;
  uint64_t errors = 0;
  std::string first_error;
  double seconds = 0;
  double steps_per_second = 0;
  double p50_us = 0, p99_us = 0, max_us = 0;
  // After warm-up, and at the end with the clients still running.
  uint64_t rss_start = 0, rss_end = 0;
  double rss_growth = 0;   // rss_end / rss_start - 1
  std::string rss_source;  // "self" or "psd pids ..."
  bool pass = false;       // errors == 0 and rss_growth < max_rss_growth
};

// Registers one job, runs the clients (warm-up, then the measured time)
// and reads the shards' resident memory at the start and the end of the
// measured time. Blocks for warmup + duration.
absl::StatusOr<LoadReport> RunLoad(const BenchCluster& cluster,
                                   const LoadOptions& options);

// A human-readable table, and one JSON object (no newline), of the report.
std::string FormatLoad(const LoadReport& r);
std::string LoadJson(const LoadReport& r);

}  // namespace bench
}  // namespace ps

#endif  // TOOLS_PSBENCH_PSBENCH_LOAD_H_
