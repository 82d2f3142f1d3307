// The client fleet of psbench's transport, load and sparse modes: W
// threads, each with its own PsClient (rank = index), run PushPull steps on
// one job; and the CPU meter the modes read around their measurements.
//
//   ClientPhases phases;
//   phases.measure = absl::Seconds(3);
//   PS_ASSIGN_OR_RETURN(ClientRun run,
//                       RunClients(cluster, assignment, /*clients=*/2,
//                                  PsClientOptions(), phases, nullptr,
//                                  nullptr));
#ifndef TOOLS_PSBENCH_PSBENCH_CLIENTS_H_
#define TOOLS_PSBENCH_PSBENCH_CLIENTS_H_

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/coordinator.pb.h"
#include "tools/psbench/psbench_cluster.h"
#include "worker/client/ps_client.h"

namespace ps {
namespace bench {

// CPU time of the clients (this process) and of the shards: this process
// when they run in it, else this process plus the psd processes serving the
// shards (those visible through /proc). Thread-safe after construction.
class CpuMeter {
 public:
  explicit CpuMeter(const BenchCluster& cluster);
  // Whose CPU time Now() counts.
  const std::string& scope() const { return scope_; }
  // CPU-seconds used so far by those processes.
  double Now() const;

 private:
  std::vector<pid_t> servers_;
  std::string scope_;
};

// Gradients and initial parameters: N(0, 0.01^2), like a trained model's.
inline constexpr float kGradStddev = 0.01f;

// What RunClients measured.
struct ClientRun {
  uint64_t steps = 0;  // measured steps, all clients
  uint64_t errors = 0;
  std::string first_error;
  double seconds = 0;  // measure start to the last measured step's end
  std::vector<double> latencies_us;
};

// Phases the driver thread of RunClients walks through.
struct ClientPhases {
  absl::Duration warmup;   // traffic not measured, after the warm-up steps
  absl::Duration measure;  // traffic measured
  uint64_t max_steps = std::numeric_limits<uint64_t>::max();  // per client
};

// `clients` threads, each with its own PsClient (rank = index), run
// PushPull steps on the job of `assignment`: one warm-up step each, then
// `phases.warmup` of unmeasured traffic, then `phases.measure` measured.
// `on_measure` runs right after the measured phase starts and
// `on_measure_end` right before the clients are told to stop, with all of
// them still running (load: RSS at start and end, under the same traffic);
// either may be empty. Stopping is step-consistent (no client starts a step
// that another will not start), so BSP clients never wait for a peer that
// left. Blocks for the phases. Step errors are counted (each client stops
// at its first); a client that cannot be created is an error.
absl::StatusOr<ClientRun> RunClients(
    const BenchCluster& cluster, const Assignment& assignment, int clients,
    const PsClientOptions& client_options, const ClientPhases& phases,
    const std::function<void()>& on_measure,
    const std::function<void()>& on_measure_end);

}  // namespace bench
}  // namespace ps

#endif  // TOOLS_PSBENCH_PSBENCH_CLIENTS_H_
