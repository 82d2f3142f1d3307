#include "tools/psbench/psbench_apply.h"

#include <cstring>
#include <functional>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "server/optimizer.h"
#include "tools/psbench/psbench_clients.h"
#include "tools/psbench/psbench_util.h"

namespace ps {
namespace bench {
namespace {

std::string Floats(uint64_t n) {
  if (n >= (1 << 20) && n % (1 << 20) == 0) return absl::StrCat(n >> 20, "M");
  return absl::StrCat(n);
}

struct Kind {
  const char* name;
  OptimizerKind kind;
  float momentum;
  bool nesterov;
  int touched;  // bytes per float read + written
};

// "sum" is the BSP aggregation (AddInto), not an optimizer.
constexpr Kind kKinds[] = {
    {"sgd", SGD, 0.0f, false, 12},
    {"momentum", SGD, 0.9f, false, 20},
    {"nesterov", SGD, 0.9f, true, 20},
    {"adagrad", ADAGRAD, 0.0f, false, 20},
    {"adam", ADAM, 0.0f, false, 28},
    {"adamw", ADAMW, 0.0f, false, 28},
    {"sum", OPTIMIZER_UNSPECIFIED, 0.0f, false, 12},
};

// Repeats `fn` for min_time and min_iterations; seconds per call.
double TimeIt(const ApplyOptions& options, const std::function<void()>& fn) {
  int iterations = 0;
  const absl::Time start = absl::Now();
  absl::Duration elapsed;
  do {
    fn();
    ++iterations;
    elapsed = absl::Now() - start;
  } while (iterations < options.min_iterations || elapsed < options.min_time);
  return absl::ToDoubleSeconds(elapsed) / iterations;
}

// Buffers of one size, shared by every kind measured on it.
struct ApplyBuffers {
  explicit ApplyBuffers(uint64_t n)
      : params(NormalFloats(n, 1, kGradStddev)),
        grad(NormalFloats(n, 2, kGradStddev)),
        dst(n, 0.0f) {}
  std::vector<float> params;
  const std::vector<float> grad;
  std::vector<float> dst;
};

// One kind on one size: the update, and memcpy of the same bytes measured
// next to it so both see the same machine load.
absl::StatusOr<ApplyPoint> MeasureKind(const ApplyOptions& options,
                                       const Kind& k, ApplyBuffers& b) {
  const uint64_t n = b.grad.size();
  std::function<void()> apply;
  std::unique_ptr<Optimizer> opt;
  OptimizerState state;
  if (k.kind == OPTIMIZER_UNSPECIFIED) {
    apply = [&] { AddInto(absl::MakeSpan(b.params), b.grad.data()); };
  } else {
    OptimizerSpec spec;
    spec.set_kind(k.kind);
    spec.set_learning_rate(0.01f);
    spec.set_momentum(k.momentum);
    spec.set_nesterov(k.nesterov);
    if (k.kind == ADAMW) spec.set_weight_decay(0.01f);
    PS_ASSIGN_OR_RETURN(opt, Optimizer::Create(spec));
    state = opt->NewState(n);
    apply = [&] {
      opt->Apply(absl::MakeSpan(b.params), b.grad.data(), 1.0f, &state);
    };
  }
  const double copy_s = TimeIt(options, [&] {
    std::memcpy(b.dst.data(), b.grad.data(), n * sizeof(float));
    asm volatile("" : : "r"(b.dst.data()) : "memory");
  });
  const double apply_s = TimeIt(options, [&] {
    apply();
    asm volatile("" : : "r"(b.params.data()) : "memory");
  });
  ApplyPoint p;
  p.optimizer = k.name;
  p.floats = n;
  p.seconds_per_apply = apply_s;
  p.floats_per_second = n / apply_s;
  p.touched_bytes_per_second = static_cast<double>(n) * k.touched / apply_s;
  p.memcpy_seconds = copy_s;
  p.memcpy_bytes_per_second = n * 8.0 / copy_s;
  p.ratio_to_memcpy = copy_s / apply_s;
  return p;
}

}  // namespace

absl::StatusOr<ApplyReport> RunApply(const ApplyOptions& options) {
  ApplyReport report;
  for (uint64_t n : options.floats) {
    if (n == 0) return absl::InvalidArgumentError("floats: must be > 0");
    ApplyBuffers buffers(n);
    for (const Kind& k : kKinds) {
      PS_ASSIGN_OR_RETURN(ApplyPoint p, MeasureKind(options, k, buffers));
      report.points.push_back(p);
    }
  }
  return report;
}

std::string FormatApply(const ApplyReport& r) {
  std::string out =
      "apply: Optimizer::Apply on one chunk (sum = BSP gradient sum), next to "
      "memcpy of the "
      "same floats; touched = bytes the update reads + writes\n";
  out += absl::StrFormat("%-9s %7s %11s %12s %13s %11s %13s %8s\n", "optimizer",
                         "floats", "apply ms", "Gfloat/s", "touched GB/s",
                         "memcpy ms", "memcpy GB/s", "vs copy");
  for (const ApplyPoint& p : r.points) {
    out += absl::StrFormat(
        "%-9s %7s %11.3f %12.3f %13.2f %11.3f %13.2f %8.2f\n", p.optimizer,
        Floats(p.floats), p.seconds_per_apply * 1e3, p.floats_per_second / 1e9,
        p.touched_bytes_per_second / 1e9, p.memcpy_seconds * 1e3,
        p.memcpy_bytes_per_second / 1e9, p.ratio_to_memcpy);
  }
  return out;
}

std::string ApplyJson(const ApplyReport& r) {
  std::vector<std::string> points;
  for (const ApplyPoint& p : r.points) {
    points.push_back(absl::StrFormat(
        "{\"optimizer\":\"%s\",\"floats\":%d,\"seconds_per_apply\":%.9f,"
        "\"floats_per_s\":%.1f,\"touched_bytes_per_s\":%.1f,\"memcpy_seconds\":"
        "%.9f,"
        "\"memcpy_bytes_per_s\":%.1f,\"ratio_to_memcpy\":%.4f}",
        p.optimizer, p.floats, p.seconds_per_apply, p.floats_per_second,
        p.touched_bytes_per_second, p.memcpy_seconds, p.memcpy_bytes_per_second,
        p.ratio_to_memcpy));
  }
  return absl::StrFormat("{\"mode\":\"apply\",\"points\":[%s]}",
                         absl::StrJoin(points, ","));
}

}  // namespace bench
}  // namespace ps
