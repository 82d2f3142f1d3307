#include "tools/psbench/psbench_clients.h"

#include <algorithm>
#include <atomic>
#include <memory>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/blocking_counter.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "tools/psbench/psbench_util.h"

namespace ps {
namespace bench {
namespace {

constexpr uint64_t kNoStep = std::numeric_limits<uint64_t>::max();

// Floats in the job's tensors.
uint64_t JobFloats(const Assignment& assignment) {
  uint64_t n = 0;
  for (const TensorSpec& t : assignment.spec().tensors()) {
    uint64_t k = 1;
    for (uint64_t d : t.shape()) k *= d;
    n += k;
  }
  return n;
}

// The shared state of one RunClients call: the step-consistent stop, the
// error count, and each client's measurements. Thread-safe; the clients'
// threads call Body, the driver thread the rest.
class Fleet {
 public:
  Fleet(std::vector<std::unique_ptr<PsClient>> clients, uint64_t floats,
        uint64_t max_steps)
      : clients_(std::move(clients)),
        floats_(floats),
        max_steps_(max_steps),
        warmed_(static_cast<int>(clients_.size())),
        running_(static_cast<int>(clients_.size())),
        per_(clients_.size()) {}

  // Starts the client threads, walks through the phases, stops and joins
  // them. Returns the start of the measured phase (ns).
  int64_t Drive(const ClientPhases& phases,
                const std::function<void()>& on_measure,
                const std::function<void()>& on_measure_end);

  ClientRun Collect(int64_t start_ns);

 private:
  struct PerClient {
    uint64_t steps = 0;
    int64_t last_end_ns = 0;
    std::vector<double> latencies_us;
  };

  void Body(int r);
  void Fail(const absl::Status& s);
  // Whether client may start `step`; false once the stop step is reached.
  bool StartStep(uint64_t step);
  void RequestStop() {
    absl::MutexLock l(&mu_);
    stop_requested_ = true;
  }

  const std::vector<std::unique_ptr<PsClient>> clients_;
  const uint64_t floats_;
  const uint64_t max_steps_;

  absl::Mutex mu_;
  uint64_t stop_step_ ABSL_GUARDED_BY(mu_) = kNoStep;
  uint64_t max_started_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_requested_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t errors_ ABSL_GUARDED_BY(mu_) = 0;
  std::string first_error_ ABSL_GUARDED_BY(mu_);

  std::atomic<int64_t> measure_start_ns_{std::numeric_limits<int64_t>::max()};
  absl::BlockingCounter warmed_;
  absl::Notification go_;
  std::atomic<int> running_;
  absl::Notification all_exited_;
  std::vector<PerClient> per_;  // [r] written only by client r's thread
};

void Fleet::Fail(const absl::Status& s) {
  absl::MutexLock l(&mu_);
  if (errors_++ == 0) first_error_ = s.ToString();
  stop_requested_ = true;
}

bool Fleet::StartStep(uint64_t step) {
  absl::MutexLock l(&mu_);
  if (step > max_steps_) stop_requested_ = true;
  if (stop_requested_ && stop_step_ == kNoStep) stop_step_ = max_started_ + 1;
  if (step >= stop_step_) return false;
  max_started_ = std::max(max_started_, step);
  return true;
}

void Fleet::Body(int r) {
  PsClient& c = *clients_[r];
  std::vector<float> grad = NormalFloats(floats_, 1000 + r, kGradStddev);
  std::vector<float> params(floats_);
  absl::Status s = c.Pull(0, absl::MakeSpan(params));
  if (s.ok()) s = c.PushPull(0, grad, absl::MakeSpan(params));  // warm-up
  if (!s.ok()) Fail(s);
  warmed_.DecrementCount();
  go_.WaitForNotification();
  for (uint64_t step = 1; s.ok() && StartStep(step); ++step) {
    const int64_t t0 = absl::GetCurrentTimeNanos();
    s = c.PushPull(step, grad, absl::MakeSpan(params));
    const int64_t t1 = absl::GetCurrentTimeNanos();
    if (!s.ok()) {
      Fail(s);
      break;
    }
    if (t0 >= measure_start_ns_.load(std::memory_order_acquire)) {
      per_[r].steps++;
      per_[r].last_end_ns = t1;
      per_[r].latencies_us.push_back((t1 - t0) / 1e3);
    }
  }
  if (running_.fetch_sub(1) == 1) all_exited_.Notify();
}

int64_t Fleet::Drive(const ClientPhases& phases,
                     const std::function<void()>& on_measure,
                     const std::function<void()>& on_measure_end) {
  std::vector<std::thread> threads;
  for (size_t r = 0; r < clients_.size(); ++r) {
    threads.emplace_back([this, r] { Body(static_cast<int>(r)); });
  }
  warmed_.Wait();
  go_.Notify();
  if (phases.warmup > absl::ZeroDuration()) {
    all_exited_.WaitForNotificationWithTimeout(phases.warmup);
  }
  const int64_t start_ns = absl::GetCurrentTimeNanos();
  measure_start_ns_.store(start_ns, std::memory_order_release);
  if (on_measure) on_measure();
  all_exited_.WaitForNotificationWithTimeout(phases.measure);
  if (on_measure_end) on_measure_end();
  RequestStop();
  for (std::thread& t : threads) t.join();
  return start_ns;
}

ClientRun Fleet::Collect(int64_t start_ns) {
  ClientRun run;
  int64_t last_end = start_ns;
  for (PerClient& p : per_) {
    run.steps += p.steps;
    last_end = std::max(last_end, p.last_end_ns);
    run.latencies_us.insert(run.latencies_us.end(), p.latencies_us.begin(),
                            p.latencies_us.end());
  }
  run.seconds = (last_end - start_ns) / 1e9;
  absl::MutexLock l(&mu_);
  run.errors = errors_;
  run.first_error = first_error_;
  return run;
}

}  // namespace

CpuMeter::CpuMeter(const BenchCluster& cluster) {
  if (cluster.in_process()) {
    scope_ = "this process (clients and shards)";
  } else if (absl::StatusOr<std::vector<pid_t>> pids = cluster.ServerPids();
             pids.ok()) {
    servers_ = *pids;
    scope_ = absl::StrCat("this process and psd pids ",
                          absl::StrJoin(servers_, ","));
  } else {
    scope_ = absl::StrCat("this process only (", pids.status().message(), ")");
  }
}

double CpuMeter::Now() const {
  double total = CpuSeconds();
  for (pid_t pid : servers_) {
    absl::StatusOr<double> s = ProcessCpuSeconds(pid);
    if (s.ok()) total += *s;
  }
  return total;
}

absl::StatusOr<ClientRun> RunClients(
    const BenchCluster& cluster, const Assignment& assignment, int clients,
    const PsClientOptions& client_options, const ClientPhases& phases,
    const std::function<void()>& on_measure,
    const std::function<void()>& on_measure_end) {
  std::vector<std::unique_ptr<PsClient>> ps_clients;
  for (int r = 0; r < clients; ++r) {
    Assignment a = assignment;
    a.set_rank(static_cast<uint32_t>(r));
    PS_ASSIGN_OR_RETURN(
        std::unique_ptr<PsClient> c,
        PsClient::Create(client_options, a, &cluster.security()));
    ps_clients.push_back(std::move(c));
  }
  Fleet fleet(std::move(ps_clients), JobFloats(assignment), phases.max_steps);
  const int64_t start_ns = fleet.Drive(phases, on_measure, on_measure_end);
  return fleet.Collect(start_ns);
}

}  // namespace bench
}  // namespace ps
