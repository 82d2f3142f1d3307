// Measures SparseTable: bytes per row after inserting --rows rows, the time
// of GetStats (its hottest-ids scan), single-threaded pull and push rows/s,
// and the longest pause a concurrent reader (pulls) and writer (pushes) see
// while Save() runs.
//
//   bazel run --config=opt //server/sparse:sparse_table_benchmark --
//       --rows=10000000
#include <sys/resource.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "core/sparse_ids.h"
#include "server/sparse/byte_stream.h"
#include "server/sparse/sparse_table.h"

ABSL_FLAG(uint64_t, rows, 10000000, "rows to insert");
ABSL_FLAG(uint32_t, dim, 16, "embedding dim");
ABSL_FLAG(uint32_t, state, 16, "optimizer state floats per row");
ABSL_FLAG(uint32_t, batch, 4096, "ids per pull/push in the throughput runs");
ABSL_FLAG(uint32_t, probe_batch, 256, "ids per pull/push of the pause probe");
ABSL_FLAG(uint32_t, stripes, 64, "num_stripes");
ABSL_FLAG(uint64_t, ops_rows, 4000000, "rows pulled / pushed when timing");
ABSL_FLAG(bool, track_changes, false,
          "SparseTable::TrackChanges (incremental checkpoints) on");
ABSL_FLAG(bool, save_pause, true, "measure the pauses Save() causes");

namespace ps {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// This thread's CPU time: the cost of a scan on a machine shared with
// other work (wall time includes the waits for a core).
double ThreadCpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

// Sink that only counts (isolates the table's cost from the storage's).
class CountingSink : public ByteSink {
 public:
  absl::Status Write(absl::string_view bytes) override {
    total += bytes.size();
    return absl::OkStatus();
  }
  uint64_t total = 0;
};

// Row id i: a scrambled 64-bit id, like hashed categorical features.
uint64_t IdOf(uint64_t i) { return MixId64(i + 1); }

void Adagrad(float* row, float* state, const float* grad, uint32_t dim) {
  for (uint32_t e = 0; e < dim; ++e) {
    state[e] += grad[e] * grad[e];
    row[e] -= 0.01f * grad[e] / (std::sqrt(state[e]) + 1e-8f);
  }
}

struct Probe {
  std::atomic<bool> stop{false};
  double max_pause_ms = 0;
  uint64_t calls = 0;
};

// Pulls (or pushes) probe_batch random rows in a loop, tracking the
// longest single call.
void RunProbe(SparseTable& t, bool push, uint64_t rows, Probe* p) {
  const uint32_t dim = t.options().dim, n = absl::GetFlag(FLAGS_probe_batch);
  std::vector<uint64_t> ids(n);
  std::vector<float> buf(size_t{n} * dim, 0.001f);
  uint64_t x = 12345;
  auto update = [dim](float* r, float* s, const float* g, uint64_t) {
    Adagrad(r, s, g, dim);
  };
  while (!p->stop.load(std::memory_order_relaxed)) {
    for (uint32_t k = 0; k < n; ++k) ids[k] = IdOf((x = MixId64(x)) % rows);
    const auto a = Clock::now();
    const absl::Status st =
        push ? t.Push(ids, buf, 1, update) : t.Pull(ids, absl::MakeSpan(buf));
    const double ms = Seconds(a, Clock::now()) * 1e3;
    if (!st.ok()) std::fprintf(stderr, "probe: %s\n", st.ToString().c_str());
    p->max_pause_ms = std::max(p->max_pause_ms, ms);
    ++p->calls;
  }
}

void SavePause(SparseTable& t, bool push, uint64_t rows) {
  Probe base, during;
  // Baseline: the probe alone for a second.
  std::thread b([&] { RunProbe(t, push, rows, &base); });
  std::this_thread::sleep_for(std::chrono::seconds(1));
  base.stop = true;
  b.join();
  std::thread d([&] { RunProbe(t, push, rows, &during); });
  CountingSink sink;
  const auto a = Clock::now();
  const absl::Status st = t.Save(sink);
  const double save_s = Seconds(a, Clock::now());
  during.stop = true;
  d.join();
  std::printf(
      "save with concurrent %s: %.2f s, %.0f MB (%s); longest %s of %u rows: "
      "%.2f ms during save (%lu calls), %.2f ms without save\n",
      push ? "pushes" : "pulls", save_s, sink.total / 1e6,
      st.ok() ? "ok" : st.ToString().c_str(), push ? "push" : "pull",
      absl::GetFlag(FLAGS_probe_batch), during.max_pause_ms,
      static_cast<unsigned long>(during.calls), base.max_pause_ms);
}

int Main() {
  const uint64_t rows = absl::GetFlag(FLAGS_rows);
  const uint32_t dim = absl::GetFlag(FLAGS_dim),
                 state = absl::GetFlag(FLAGS_state),
                 batch = absl::GetFlag(FLAGS_batch);
  SparseTable::Options o;
  o.name = "bench";
  o.dim = dim;
  o.state_floats_per_row = state;
  o.init = {RowInitializer::Kind::kUniform, 0, 0.01f, 1};
  o.num_stripes = absl::GetFlag(FLAGS_stripes);
  auto created = SparseTable::Create(o);
  if (!created.ok()) {
    std::fprintf(stderr, "%s\n", created.status().ToString().c_str());
    return 1;
  }
  SparseTable& t = **created;
  if (absl::GetFlag(FLAGS_track_changes)) t.TrackChanges();
  auto update = [dim](float* r, float* s, const float* g, uint64_t) {
    Adagrad(r, s, g, dim);
  };
  std::vector<uint64_t> ids(batch);
  std::vector<float> buf(size_t{batch} * dim, 0.001f);

  auto a = Clock::now();
  for (uint64_t i = 0; i < rows; i += batch) {
    const uint32_t n =
        static_cast<uint32_t>(std::min<uint64_t>(batch, rows - i));
    for (uint32_t k = 0; k < n; ++k) ids[k] = IdOf(i + k);
    const absl::Status st =
        t.Push(absl::MakeConstSpan(ids.data(), n),
               absl::MakeConstSpan(buf.data(), size_t{n} * dim), 0, update);
    if (!st.ok()) {
      std::fprintf(stderr, "insert: %s\n", st.ToString().c_str());
      return 1;
    }
  }
  const double insert_s = Seconds(a, Clock::now());
  a = Clock::now();
  const double stats_cpu0 = ThreadCpuSeconds();
  const SparseTable::Stats st = t.GetStats();
  const double stats_cpu_s = ThreadCpuSeconds() - stats_cpu0;
  const double stats_s = Seconds(a, Clock::now());
  const double raw = (dim + state) * 4.0;
  std::printf(
      "rows %lu dim %u state %u stripes %u: bytes_used %.1f MB = %.1f B/row, "
      "raw %.0f B/row, ratio %.3f; insert %.2f s (%.2f M rows/s)\n",
      static_cast<unsigned long>(st.rows), dim, state, o.num_stripes,
      st.bytes_used / 1e6, double(st.bytes_used) / st.rows, raw,
      st.bytes_used / (raw * st.rows), insert_s, rows / insert_s / 1e6);
  std::printf(
      "stats (hottest %zu of all rows): %.1f ms (%.1f ms CPU), about %.2f ms "
      "under each stripe's reader lock\n",
      st.hottest.size(), stats_s * 1e3, stats_cpu_s * 1e3,
      stats_s * 1e3 / o.num_stripes);

  const uint64_t ops = absl::GetFlag(FLAGS_ops_rows);
  uint64_t x = 99;
  for (bool push : {false, true}) {
    a = Clock::now();
    for (uint64_t done = 0; done < ops; done += batch) {
      for (uint32_t k = 0; k < batch; ++k)
        ids[k] = IdOf((x = MixId64(x)) % rows);
      const absl::Status s =
          push ? t.Push(ids, buf, 1, update) : t.Pull(ids, absl::MakeSpan(buf));
      if (!s.ok()) std::fprintf(stderr, "%s\n", s.ToString().c_str());
    }
    const double s = Seconds(a, Clock::now());
    std::printf(
        "%s, 1 thread, batches of %u random stored rows: %.2f M rows/s\n",
        push ? "push (Adagrad)" : "pull", batch, ops / s / 1e6);
  }
  for (bool push : {false, true}) {
    if (absl::GetFlag(FLAGS_save_pause)) SavePause(t, push, rows);
  }
  rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  std::printf("peak RSS %.1f MB\n", ru.ru_maxrss / 1e3);
  return 0;
}

}  // namespace
}  // namespace ps

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return ps::Main();
}
