// psbench's sparse mode: sparse pull+push goodput of an embedding table
// against the dense goodput of the same bytes, in the same run.
//
// For each R (unique rows per client step): W client threads push the
// gradients of R unique ids (dim floats each) of a table and pull the same
// rows back (SparseExchange, ASP; tools/psbench/psbench_sparse_client.h); next
// to it, W threads PushPull a dense tensor of R x dim floats (the transport
// mode's PsClient path). Goodput counts R x dim x 4 bytes each way per step
// for both (ids are not counted: they are the sparse path's overhead), so
// ratio = sparse goodput / dense goodput compares equal payloads. The dense
// and sparse measurements alternate for `repetitions` rounds; the report
// holds the median and spread of each and of the per-round ratio.
//
//   SparseBenchOptions options;
//   options.rows = {4096, 65536};
//   PS_ASSIGN_OR_RETURN(SparseBenchReport r, RunSparseBench(*cluster,
//   options)); std::cout << FormatSparseBench(r);
//
// Every run is bounded in time by its options.
#ifndef TOOLS_PSBENCH_PSBENCH_SPARSE_H_
#define TOOLS_PSBENCH_PSBENCH_SPARSE_H_

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

struct SparseBenchOptions {
  // Unique rows per client step (each a point).
  std::vector<uint64_t> rows = {4096, 16384, 65536};
  uint32_t dim = 16;
  // The table's optimizer (and the dense tensor's): SGD or ADAGRAD.
  OptimizerKind optimizer = ADAGRAD;
  float learning_rate = 0.01f;
  int clients = 2;
  // Measured time of each dense and each sparse run, after a warm-up step.
  absl::Duration duration = absl::Seconds(2);
  int repetitions = 5;
  // Ids are drawn from [0, universe): each step a client sends a fresh
  // batch of unique ids (batches_per_client batches drawn at start, cycled).
  uint64_t universe = 1 << 20;
  int batches_per_client = 8;
  // true: every id of the universe is pushed once before measuring, so the
  // measured steps update existing rows. false: rows are created by the
  // measured pushes (admit_after 1) in the first rounds.
  bool populate = true;
  // false: no dense runs (no ratio); for profiling the sparse path alone.
  bool dense = true;
  // Both paths: request size (the sparse client's ids + values per call),
  // calls in flight per shard per client, and connections per shard.
  PsClientOptions client;
  // The dense job's chunk size.
  uint64_t partition_bytes = 1 << 20;
  uint64_t seed = 1;
};

// Median and range of one quantity over the repetitions.
struct Spread {
  double median = 0, min = 0, max = 0;
};

// One path's (dense or sparse) measurements of one point.
struct PathResult {
  std::vector<double> goodput;  // bytes per second, one per repetition
  Spread goodput_spread;
  uint64_t steps = 0;  // all repetitions, all clients
  uint64_t errors = 0;
  std::string first_error;
  double p50_us = 0, p99_us = 0;  // all steps of all repetitions
  double cores = 0;  // median CPU-seconds per second (CpuMeter scope)
};

struct SparseBenchPoint {
  uint64_t rows = 0;
  uint64_t bytes = 0;  // rows x dim x 4: one direction of one step
  PathResult sparse, dense;
  std::vector<double> ratio;  // sparse / dense goodput, per repetition
  Spread ratio_spread;
  // The table after the point, summed over shards.
  uint64_t table_rows = 0;
  uint64_t table_bytes = 0;
  uint64_t sparse_calls = 0;  // SparseExchange calls made
};

struct SparseBenchReport {
  int shards = 0;
  bool in_process = true;
  std::string cpu_scope;
  SparseBenchOptions options;
  std::vector<SparseBenchPoint> points;
};

// Registers a dense and a sparse job per point, populates the table (if
// asked), alternates the measurements and drops the jobs. Step errors are
// counted (a run stops at the first); setup failures return an error.
absl::StatusOr<SparseBenchReport> RunSparseBench(
    const BenchCluster& cluster, const SparseBenchOptions& options);

// A human-readable table, and one JSON object (no newline), of the report.
std::string FormatSparseBench(const SparseBenchReport& r);
std::string SparseBenchJson(const SparseBenchReport& r);

}  // namespace bench
}  // namespace ps

#endif  // TOOLS_PSBENCH_PSBENCH_SPARSE_H_
