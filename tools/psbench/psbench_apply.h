// psbench's apply mode: the shard's optimizer update rate for each optimizer
// and size, next to memcpy of the same bytes.
//
//   ApplyOptions options;
//   options.floats = {1 << 20};
//   PS_ASSIGN_OR_RETURN(ApplyReport r, RunApply(options));
//   std::cout << FormatApply(r);
#ifndef TOOLS_PSBENCH_PSBENCH_APPLY_H_
#define TOOLS_PSBENCH_PSBENCH_APPLY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace ps {
namespace bench {

struct ApplyOptions {
  std::vector<uint64_t> floats = {1 << 20, 4 << 20, 16 << 20, 64 << 20};
  // Each measurement repeats for at least this long and min_iterations.
  absl::Duration min_time = absl::Milliseconds(300);
  int min_iterations = 3;
};

struct ApplyPoint {
  std::string
      optimizer;  // "sgd", "momentum", "nesterov", "adagrad", "adam", "adamw"
  uint64_t floats = 0;
  double seconds_per_apply = 0;
  double floats_per_second = 0;
  // Bytes the update must stream (read + write) per second; see
  // server/apply_benchmark.cc for the per-float counts.
  double touched_bytes_per_second = 0;
  double memcpy_seconds = 0;           // memcpy of floats * 4 bytes
  double memcpy_bytes_per_second = 0;  // read + write: 8 bytes per float
  double ratio_to_memcpy = 0;          // memcpy_seconds / seconds_per_apply
};

struct ApplyReport {
  std::vector<ApplyPoint> points;
};

// Measures Optimizer::Apply for SGD, SGD+momentum, Nesterov, Adagrad, Adam
// and AdamW on N(0, 0.01) gradients (and the BSP gradient sum, "sum"), with
// memcpy of the same bytes measured between them.
absl::StatusOr<ApplyReport> RunApply(const ApplyOptions& options);

// A human-readable table, and one JSON object (no newline), of the report.
std::string FormatApply(const ApplyReport& r);
std::string ApplyJson(const ApplyReport& r);

}  // namespace bench
}  // namespace ps

#endif  // TOOLS_PSBENCH_PSBENCH_APPLY_H_
