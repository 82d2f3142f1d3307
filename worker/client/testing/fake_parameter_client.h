// FakeParameterServer: an in-process stand-in for the psd shards, for tests.
// It holds the flat parameter vector, applies SGD (with optional momentum)
// and runs BSP across `num_workers` clients, each driven by its own thread.
//
//   FakeParameterServer server(initial, {/*learning_rate=*/0.1f});
//   std::unique_ptr<ParameterClient> client = server.NewClient(/*rank=*/0);
//   Trainer trainer(options, client.get());   // the client is borrowed
//   ...
//   std::vector<float> final_params = server.parameters();
//
// BSP as the real shards do it: step t's push from every worker is kept;
// when the last arrives, the gradients are summed in rank order, divided by
// num_workers, and the optimizer applied (version t -> t + 1). PushPull
// returns the parameters at version t + 1; Pull(t) waits for version >= t.
//
// With Options::tensors its clients also support StartExchange: then each
// tensor keeps its own version and step, as the shards' chunks do; a
// tensor's step is applied (rank order, over its range) once every worker
// pushed it, and an exchange is done once all of its tensors are. The
// model's version() is the lowest tensor version. Every exchange is logged
// (exchanges()). Whole-model PushPull and exchanges must not be mixed in
// one run.
#ifndef WORKER_CLIENT_TESTING_FAKE_PARAMETER_CLIENT_H_
#define WORKER_CLIENT_TESTING_FAKE_PARAMETER_CLIENT_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "proto/job.pb.h"
#include "worker/client/parameter_client.h"

namespace ps {

// The job's initial parameters, laid out flat in `tensors` order, exactly as
// the shards initialise them (core/init.h). kInvalidArgument for a bad
// init spec.
absl::StatusOr<std::vector<float>> InitialParameters(
    uint64_t seed, const std::vector<TensorSpec>& tensors);

// Thread-safe.
class FakeParameterServer {
 public:
  struct Options {
    float learning_rate = 0.1f;
    // v = momentum * v + g; p -= learning_rate * v (PyTorch's SGD).
    float momentum = 0.0f;
    uint32_t num_workers = 1;
    // The version (applied updates) the parameters start at; a worker that
    // resumes at step s needs version >= s.
    uint64_t initial_version = 0;
    // How long a Pull or PushPull waits for the other workers.
    absl::Duration step_deadline = absl::Seconds(60);
    // The model's tensors in flat order (their sizes must add up to the
    // parameter count); empty: no StartExchange.
    std::vector<TensorSpec> tensors;
  };

  // One StartExchange, as it arrived.
  struct ExchangeRecord {
    uint32_t rank = 0;
    uint64_t step = 0;
    std::vector<std::string> tensors;
    int priority = 0;
  };

  FakeParameterServer(std::vector<float> initial, Options options);

  // A client for worker `rank` (< num_workers). The server must outlive it.
  std::unique_ptr<ParameterClient> NewClient(uint32_t rank);

  // Makes worker `rank`'s push for `step` fail with `status` (once).
  void FailPush(uint32_t rank, uint64_t step, absl::Status status);

  std::vector<float> parameters() const;
  uint64_t version() const;
  // Pushes received, every worker together.
  uint64_t pushes() const;
  // Every exchange started, in arrival order.
  std::vector<ExchangeRecord> exchanges() const;

 private:
  class Client;

  absl::Status Pull(uint64_t step, absl::Span<float> params);
  absl::Status PushPull(uint32_t rank, uint64_t step,
                        absl::Span<const float> gradient,
                        absl::Span<float> params);
  void Exchange(uint32_t rank, TensorExchange x);
  // Applies a tensor's step once every worker pushed it.
  void MaybeApplyTensorLocked(size_t tensor) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The exchanges now done, removed from waiting_, params copied.
  std::vector<std::pair<std::function<void(const absl::Status&)>, absl::Status>>
  TakeDoneLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Waits until version_ > step - 1 (>= step) or the deadline.
  absl::Status AwaitVersionLocked(uint64_t version, const char* what)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Options options_;
  mutable absl::Mutex mu_;
  std::vector<float> params_ ABSL_GUARDED_BY(mu_);
  std::vector<float> velocity_ ABSL_GUARDED_BY(mu_);
  uint64_t version_ ABSL_GUARDED_BY(mu_);
  uint64_t pushes_ ABSL_GUARDED_BY(mu_) = 0;
  // Step version_'s gradient per rank, and which ranks have pushed it.
  std::vector<std::vector<float>> pending_ ABSL_GUARDED_BY(mu_);
  std::vector<bool> arrived_ ABSL_GUARDED_BY(mu_);
  std::vector<float> sum_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, absl::Status> failures_ ABSL_GUARDED_BY(mu_);

  // Per-tensor state (Options::tensors).
  struct TensorState {
    size_t offset = 0;
    size_t length = 0;
    uint64_t version = 0;
    std::vector<bool> arrived;  // by rank, for step `version`
  };
  struct Waiting {
    uint64_t step = 0;
    std::vector<size_t> tensors;
    absl::Span<float> params;
    std::function<void(const absl::Status&)> done;
  };
  absl::flat_hash_map<std::string, size_t> tensor_index_;  // const after ctor
  std::vector<TensorState> tensors_ ABSL_GUARDED_BY(mu_);
  std::vector<Waiting> waiting_ ABSL_GUARDED_BY(mu_);
  std::vector<ExchangeRecord> exchanges_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ps

#endif  // WORKER_CLIENT_TESTING_FAKE_PARAMETER_CLIENT_H_
