// Measures the pause a shard checkpoint of a large sparse table causes: a
// BSP job with one worker fills a --rows x --dim Adagrad table, then one
// thread runs SparseExchange steps (push + pull of --probe_ids random
// stored rows) back to back, first alone for --baseline_s, then while the
// main thread takes CheckpointNow. Prints the exchange latencies (p50,
// p99, p99.9, max) of both phases, the checkpoint's duration and file
// sizes, and the extra memory during the save: the highest resident set
// sampled every 5 ms while it ran less the one just before it, beside the
// bytes of the rows the probe changed meanwhile (their records).
//
//   bazel run //server:shard_sparse_checkpoint_benchmark --
//       --rows=10000000 --dir=/tmp/ps_ckpt_bench
//
// --mode=incremental: the bytes an incremental checkpoint writes after
// --ctr_steps steps of the CTR workload against a full one of the same
// state. Two identical jobs ("inc", tables_full_every --full_every, and
// "full", every checkpoint full) get the same steps: --ctr_warmup_steps,
// a checkpoint of each, --ctr_steps more, a checkpoint of each; it prints
// both tables files' sizes (and times) and their ratio. A step is one
// worker's push of the unique ids of --ctr_batch examples drawn as
// ctr-synthetic draws them (worker/data/ctr_synthetic.h: per field a Zipf
// rank, exponent 1.1, over Criteo's 26 cardinalities, by the same
// //core:zipf sampler; the uniforms come from a std engine here), dim 16,
// Adagrad.
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/synchronization/notification.h"
#include "common/status_macros.h"
#include "core/sparse_ids.h"
#include "core/zipf.h"
#include "server/checkpoint.h"
#include "server/shard.h"
#include "server/testing/shard_test_util.h"

ABSL_FLAG(uint64_t, rows, 10000000, "rows in the table");
ABSL_FLAG(uint32_t, dim, 16, "embedding dim");
ABSL_FLAG(uint32_t, fill_batch, 4096, "new ids per fill step");
ABSL_FLAG(uint32_t, probe_ids, 256, "ids pushed and pulled per probe step");
ABSL_FLAG(double, baseline_s, 3, "seconds of probing without a checkpoint");
ABSL_FLAG(std::string, dir, "/tmp/ps_sparse_ckpt_bench",
          "checkpoint directory (emptied first)");
ABSL_FLAG(std::string, mode, "pause",
          "pause: exchange latencies during a checkpoint; incremental: an "
          "increment's bytes against a full checkpoint's (CTR workload)");
ABSL_FLAG(uint32_t, ctr_warmup_steps, 1000,
          "incremental: CTR steps before the first checkpoint");
ABSL_FLAG(uint32_t, ctr_steps, 100,
          "incremental: CTR steps between the two checkpoints");
ABSL_FLAG(uint32_t, ctr_batch, 1024,
          "incremental: examples per step (26 ids each)");
ABSL_FLAG(uint32_t, full_every, 10,
          "incremental: tables_full_every of the incremental job");

namespace ps {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

uint64_t IdOf(uint64_t i) { return MixId64(i + 1); }

std::string Bytes(const void* p, size_t n) {
  return std::string(static_cast<const char*>(p), n);
}

// One BSP step of worker 0: push grads for `ids`, pull them when `pull`.
absl::Status Step(Shard& shard, uint64_t step, const std::vector<uint64_t>& ids,
                  bool pull, const std::string& job = "bench") {
  const uint32_t dim = absl::GetFlag(FLAGS_dim);
  SparseExchangeRequest req;
  req.set_job_id(job);
  req.set_step(step);
  req.set_push(true);
  SparseRows* g = req.add_gradients();
  g->set_table("emb");
  g->set_ids(Bytes(ids.data(), ids.size() * 8));
  const std::vector<float> grads(ids.size() * dim, 0.001f);
  g->set_values(Bytes(grads.data(), grads.size() * 4));
  if (pull) {
    SparseRows* p = req.add_pull();
    p->set_table("emb");
    p->set_ids(g->ids());
  }
  SparseExchangeResponse resp;
  absl::Notification done;
  absl::Status status;
  shard.SparseExchange(req, &resp, [&](absl::Status s) {
    status = std::move(s);
    done.Notify();
  });
  done.WaitForNotification();
  return status;
}

struct Latencies {
  std::vector<double> ms;
  void Print(const char* what) {
    std::sort(ms.begin(), ms.end());
    auto at = [&](double q) {
      return ms.empty() ? 0.0 : ms[static_cast<size_t>(q * (ms.size() - 1))];
    };
    std::printf(
        "%-22s %6zu steps: p50 %7.2f ms  p99 %7.2f ms  p99.9 %7.2f ms  max "
        "%7.2f ms\n",
        what, ms.size(), at(0.5), at(0.99), at(0.999),
        ms.empty() ? 0 : ms.back());
  }
};

// Steps from `*step` on until `stop`, recording each step's latency.
void Probe(Shard& shard, uint64_t* step, const std::atomic<bool>& stop,
           Latencies* out) {
  const uint64_t rows = absl::GetFlag(FLAGS_rows);
  std::vector<uint64_t> ids(absl::GetFlag(FLAGS_probe_ids));
  uint64_t x = 12345;
  while (!stop.load(std::memory_order_relaxed)) {
    for (uint64_t& id : ids) id = IdOf((x = MixId64(x)) % rows);
    const auto a = Clock::now();
    const absl::Status st = Step(shard, (*step)++, ids, true);
    out->ms.push_back(Seconds(a, Clock::now()) * 1e3);
    if (!st.ok()) std::fprintf(stderr, "probe: %s\n", st.ToString().c_str());
  }
}

// The resident set now, bytes (/proc/self/statm).
uint64_t ResidentBytes() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return 0;
  unsigned long size = 0, resident = 0;
  const int n = std::fscanf(f, "%lu %lu", &size, &resident);
  std::fclose(f);
  return n == 2 ? resident * static_cast<uint64_t>(sysconf(_SC_PAGESIZE)) : 0;
}

uint64_t DirBytes(const std::string& dir, const std::string& suffix) {
  uint64_t n = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.size() > suffix.size() &&
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) {
      n = std::max<uint64_t>(n, e.file_size());
    }
  }
  return n;
}

// Registers the benchmark's one-table BSP job on `shard`.
absl::Status RegisterBenchJob(Shard& shard, const std::string& job = "bench",
                              uint32_t tables_full_every = 1) {
  JobSpec spec = shard_test::Spec(BSP, 1);
  spec.mutable_checkpoint()->set_every_seconds(3600);  // on, not triggered
  spec.mutable_checkpoint()->set_tables_full_every(tables_full_every);
  TableSpec* t = spec.add_tables();
  t->set_name("emb");
  t->set_dim(absl::GetFlag(FLAGS_dim));
  t->mutable_init()->set_kind(UNIFORM);
  t->mutable_init()->set_scale(0.01f);
  t->mutable_optimizer()->set_kind(ADAGRAD);
  t->mutable_optimizer()->set_learning_rate(0.01f);
  RegisterJobResponse resp;
  return shard.RegisterJob(shard_test::Registration(job, spec), &resp);
}

// Pushes every one of --rows rows once, from step `*step` on.
absl::Status Fill(Shard& shard, uint64_t* step) {
  const uint64_t rows = absl::GetFlag(FLAGS_rows);
  const uint32_t batch = absl::GetFlag(FLAGS_fill_batch);
  const auto a = Clock::now();
  std::vector<uint64_t> ids;
  for (uint64_t i = 0; i < rows; i += batch) {
    ids.clear();
    for (uint64_t k = i; k < std::min<uint64_t>(rows, i + batch); ++k) {
      ids.push_back(IdOf(k));
    }
    if (absl::Status st = Step(shard, (*step)++, ids, false); !st.ok()) {
      return st;
    }
  }
  StatsRequest sreq;
  ShardStats stats;
  shard.Stats(sreq, &stats);
  const TableStats& ts = stats.job_stats(0).tables(0);
  std::printf("filled %lu rows (dim %u, Adagrad) in %.1f s: %.1f MB used\n",
              static_cast<unsigned long>(ts.rows()), absl::GetFlag(FLAGS_dim),
              Seconds(a, Clock::now()), ts.bytes_used() / 1e6);
  return absl::OkStatus();
}

struct Memory {
  uint64_t before = 0;  // resident just before the checkpoint
  uint64_t peak = 0;    // highest sampled while it ran
};

// Probes for --baseline_s without a checkpoint into `base`, then probes while
// one checkpoint is written into `during`; `*ckpt_s` is the checkpoint's time.
absl::Status ProbeAroundCheckpoint(Shard& shard, uint64_t* step,
                                   Latencies* base, Latencies* during,
                                   double* ckpt_s, Memory* mem) {
  {
    std::atomic<bool> stop{false};
    std::thread p([&] { Probe(shard, step, stop, base); });
    std::this_thread::sleep_for(
        std::chrono::duration<double>(absl::GetFlag(FLAGS_baseline_s)));
    stop = true;
    p.join();
  }
  std::atomic<bool> stop{false};
  std::thread p([&] { Probe(shard, step, stop, during); });
  // Let the probe run a moment before the checkpoint starts.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  mem->before = mem->peak = ResidentBytes();
  std::atomic<bool> saved{false};
  std::thread sampler([&] {
    while (!saved.load()) {
      mem->peak = std::max(mem->peak, ResidentBytes());
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  });
  const size_t steps_before = during->ms.size();
  const auto a = Clock::now();
  const absl::Status st = shard.CheckpointNow("bench");
  *ckpt_s = Seconds(a, Clock::now());
  saved = true;
  sampler.join();
  stop = true;
  p.join();
  std::printf(
      "probe steps during the save: %zu (%zu rows pushed)\n",
      during->ms.size() - steps_before,
      (during->ms.size() - steps_before) * absl::GetFlag(FLAGS_probe_ids));
  return st;
}

int Fail(const char* what, const absl::Status& st) {
  std::fprintf(stderr, "%s%s\n", what, st.ToString().c_str());
  return 1;
}

// A std engine as a ZipfSampler generator.
struct MtUniform {
  explicit MtUniform(uint64_t seed) : engine(seed) {}
  double Uniform() { return std::uniform_real_distribution<double>()(engine); }
  std::mt19937_64 engine;
};

// The unique ids of one CTR step: --ctr_batch examples, 26 fields each.
class CtrIds {
 public:
  CtrIds() : rng_(42) {
    // Criteo Kaggle's cardinalities (worker/data/ctr_synthetic.h).
    const uint64_t cards[26] = {
        1460,  583,  10131227, 2202608, 305, 24,     12517,   633,   3,
        93145, 5683, 8351593,  3194,    27,  14992,  5461306, 10,    5652,
        2173,  4,    7046547,  18,      15,  286181, 105,     142572};
    for (uint64_t n : cards) fields_.emplace_back(n, 1.1);
  }
  const std::vector<uint64_t>& Next() {
    ids_.clear();
    for (uint32_t e = 0; e < absl::GetFlag(FLAGS_ctr_batch); ++e) {
      for (size_t f = 0; f < fields_.size(); ++f) {
        ids_.push_back((uint64_t{f} << 40) | (fields_[f].Sample(&rng_) - 1));
      }
    }
    std::sort(ids_.begin(), ids_.end());
    ids_.erase(std::unique(ids_.begin(), ids_.end()), ids_.end());
    return ids_;
  }

 private:
  MtUniform rng_;
  std::vector<ZipfSampler> fields_;
  std::vector<uint64_t> ids_;
};

// `n` CTR steps into both jobs, from step `*step` on.
absl::Status CtrSteps(Shard& shard, CtrIds& ids, uint32_t n, uint64_t* step) {
  for (uint32_t i = 0; i < n; ++i, ++*step) {
    const std::vector<uint64_t>& batch = ids.Next();
    for (const char* job : {"inc", "full"}) {
      PS_RETURN_IF_ERROR(Step(shard, *step, batch, false, job));
    }
  }
  return absl::OkStatus();
}

// A checkpoint of each job: the seconds each took.
absl::Status CheckpointBoth(Shard& shard, double seconds[2]) {
  int k = 0;
  for (const char* job : {"inc", "full"}) {
    const auto a = Clock::now();
    PS_RETURN_IF_ERROR(shard.CheckpointNow(job));
    seconds[k++] = Seconds(a, Clock::now());
  }
  return absl::OkStatus();
}

int IncrementalMain(Shard& shard, const std::string& dir) {
  for (const auto& [job, every] :
       {std::pair<std::string, uint32_t>{"inc",
                                         absl::GetFlag(FLAGS_full_every)},
        std::pair<std::string, uint32_t>{"full", 1}}) {
    if (absl::Status st = RegisterBenchJob(shard, job, every); !st.ok()) {
      return Fail("register: ", st);
    }
  }
  CtrIds ids;
  uint64_t step = 0;
  double first[2], second[2];
  const auto a = Clock::now();
  absl::Status st =
      CtrSteps(shard, ids, absl::GetFlag(FLAGS_ctr_warmup_steps), &step);
  if (st.ok()) st = CheckpointBoth(shard, first);
  const double warm_s = Seconds(a, Clock::now());
  if (st.ok()) st = CtrSteps(shard, ids, absl::GetFlag(FLAGS_ctr_steps), &step);
  if (st.ok()) st = CheckpointBoth(shard, second);
  if (!st.ok()) return Fail("incremental: ", st);
  absl::StatusOr<std::unique_ptr<CheckpointStore>> store =
      CheckpointStore::OpenForReading(dir, 0);
  if (!store.ok()) return Fail("", store.status());
  // Sequences: 1 at registration, 2 after the warm-up, 3 after the steps.
  auto size = [&](const char* job, uint64_t seq) {
    return std::filesystem::file_size((*store)->TablesPathFor(job, seq));
  };
  StatsRequest sreq;
  ShardStats stats;
  shard.Stats(sreq, &stats);
  std::printf(
      "%u warm-up steps of %u examples (%.1f s), then %u steps; "
      "table rows %lu\n",
      absl::GetFlag(FLAGS_ctr_warmup_steps), absl::GetFlag(FLAGS_ctr_batch),
      warm_s, absl::GetFlag(FLAGS_ctr_steps),
      static_cast<unsigned long>(stats.job_stats(0).tables(0).rows()));
  std::printf(
      "after the warm-up: inc job %.2f MB (%.2f s), full job %.2f MB "
      "(%.2f s)\n",
      size("inc", 2) / 1e6, first[0], size("full", 2) / 1e6, first[1]);
  const double inc = size("inc", 3), full = size("full", 3);
  std::printf(
      "after %u more steps: increment %.2f MB (%.2f s), full %.2f MB "
      "(%.2f s): increment / full = %.3f\n",
      absl::GetFlag(FLAGS_ctr_steps), inc / 1e6, second[0], full / 1e6,
      second[1], inc / full);
  return 0;
}

int Main() {
  const std::string dir = absl::GetFlag(FLAGS_dir);
  std::filesystem::remove_all(dir);
  ShardOptions options = shard_test::Options(0, 64ull << 30);
  options.checkpoint_dir = dir;
  Shard shard(options);
  Shard::RestoreReport report;
  if (absl::Status st = shard.OpenCheckpoints(&report); !st.ok()) {
    return Fail("", st);
  }
  if (absl::GetFlag(FLAGS_mode) == "incremental") {
    const int rc = IncrementalMain(shard, dir);
    for (const char* job : {"inc", "full"}) {
      DropJobRequest drop;  // deletes its files, and no last checkpoint
      drop.set_job_id(job);
      (void)shard.DropJob(drop);
    }
    std::filesystem::remove_all(dir);
    return rc;
  }
  if (absl::GetFlag(FLAGS_mode) != "pause") {
    std::fprintf(stderr, "--mode: pause or incremental, got %s\n",
                 absl::GetFlag(FLAGS_mode).c_str());
    return 2;
  }
  if (absl::Status st = RegisterBenchJob(shard); !st.ok()) return Fail("", st);
  uint64_t step = 0;
  if (absl::Status st = Fill(shard, &step); !st.ok()) return Fail("fill: ", st);
  Latencies base, during;
  double ckpt_s = 0;
  Memory mem;
  if (absl::Status st =
          ProbeAroundCheckpoint(shard, &step, &base, &during, &ckpt_s, &mem);
      !st.ok()) {
    return Fail("checkpoint: ", st);
  }
  base.Print("without checkpoint");
  during.Print("during checkpoint");
  rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  std::printf(
      "checkpoint: %.2f s; files: .tables %.1f MB, .ckpt %.1f KB; peak RSS "
      "%.1f MB\n",
      ckpt_s, DirBytes(dir, ".tables") / 1e6, DirBytes(dir, ".ckpt") / 1e3,
      ru.ru_maxrss / 1e3);
  std::printf(
      "resident before the save %.1f MB, peak during it %.1f MB: "
      "%.2f MB extra\n",
      mem.before / 1e6, mem.peak / 1e6, (mem.peak - mem.before) / 1e6);
  DropJobRequest drop;  // deletes its files, and no last checkpoint
  drop.set_job_id("bench");
  (void)shard.DropJob(drop);
  std::filesystem::remove_all(dir);
  return 0;
}

}  // namespace
}  // namespace ps

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return ps::Main();
}
