// ExchangePipeline: the communication side of the overlapped step. Backward
// hands it each layer's gradient as soon as it is final (last layer first);
// it fuses small layers and starts one TensorExchange (push + pull, one
// request per shard) per fused group at once, while backward goes on. The
// next step's forward asks for each layer's parameters just before it
// needs them and blocks only if they have not arrived yet: that wait is the
// exposed communication the trainer reports.
//
//   ExchangePipeline pipe(client, layers, options, grad, absl::MakeSpan(p));
//   ... step t, backward: pipe.LayerReady(t, l) for l = L-1, ..., 0 ...
//   pipe.Flush(t);
//   ... step t + 1, forward: PS_RETURN_IF_ERROR(pipe.AwaitLayer(l)) ...
//   PS_RETURN_IF_ERROR(pipe.AwaitAll());  // before evaluating, at the end
//
// Fusion: layers are held until the held bytes reach fusion_bytes (a
// layer's tensors always travel together: backward produces them at the
// same moment), then go out as one exchange; Flush sends what is held.
// Priority (Options::prioritize): an exchange gets num_layers - (its first
// layer), so when a shard's calls queue, the layers the next forward needs
// first go first.
//
// Thread-safe. LayerReady and Flush are called one at a time (the
// DeviceGroup guarantees it for layer_ready); AwaitLayer from any thread.
// The gradient and params spans are borrowed until AwaitAll returned with
// nothing in flight; the destructor waits for that too.
#ifndef WORKER_TRAINER_EXCHANGE_PIPELINE_H_
#define WORKER_TRAINER_EXCHANGE_PIPELINE_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "common/defaults.h"
#include "worker/client/parameter_client.h"

namespace ps {

class ExchangePipeline {
 public:
  struct Layer {
    std::vector<std::string> tensors;  // the job's tensor names
    size_t bytes = 0;                  // payload of its gradient
  };
  struct Options {
    // Layers are held until this many bytes are held (0: none is held).
    size_t fusion_bytes = kDefaultFusionBytes;
    // Exchanges carry priorities (below); else all have priority 0 and
    // travel in start order. Only safe where the shards answer without
    // waiting for other workers (ASP): under BSP/SSP a call in flight holds
    // one of the shard's max_inflight_per_shard slots until every worker
    // pushed its chunks, and two workers whose queues were reordered
    // differently could each hold the slots the other's pushes need. In
    // start order every worker's calls go out in the same order, which
    // cannot deadlock; and while a step's calls all fit in flight nothing
    // queues, so priorities would change nothing anyway.
    bool prioritize = true;
    // At most this many exchanges a step: the last one takes every layer
    // still to come (>= 1; 0 = no limit). Set it to the client's
    // max_inflight_per_shard: then a step's exchanges fit in flight at
    // once (unless one is cut into several requests), so none waits in
    // the client's queue behind calls that the shards hold back until all
    // of the step has arrived (BSP with every_steps: 1 checkpoints holds
    // every answer until every chunk of the shard is applied).
    int max_exchanges_per_step = 0;
  };

  // `client` (supports_exchange()), `gradient` and `params` are borrowed
  // and must outlive the pipeline. Every layer starts with its parameters
  // in (the caller pulled them).
  ExchangePipeline(ParameterClient* client, std::vector<Layer> layers,
                   Options options, absl::Span<const float> gradient,
                   absl::Span<float> params);
  // Waits for every exchange in flight.
  ~ExchangePipeline();

  ExchangePipeline(const ExchangePipeline&) = delete;
  ExchangePipeline& operator=(const ExchangePipeline&) = delete;

  // Layer `layer`'s gradient of `step` is final: holds it, and starts an
  // exchange of what is held once that reaches fusion_bytes. Its
  // parameters are out until that exchange is done.
  void LayerReady(uint64_t step, size_t layer);
  // Starts an exchange of what is held (end of backward); the next
  // LayerReady begins a new step.
  void Flush(uint64_t step);
  // Drops what is held without sending it (a failed step): those layers
  // stay out, failed with `why`, until the next LayerReady.
  void Discard(absl::Status why);

  // Blocks until `layer`'s parameters are in; the status of the exchange
  // that brought them.
  absl::Status AwaitLayer(size_t layer);
  // Blocks until no exchange is in flight; the first error of any exchange
  // since the last AwaitAll (OK if none).
  absl::Status AwaitAll();

  size_t num_layers() const { return layers_.size(); }
  // Exchanges started so far.
  uint64_t exchanges_started() const;
  // The lowest step of an exchange that failed so far (none: nullopt). A
  // trainer whose run failed resumes there: that step's push did not
  // complete, though the step after it may have started computing.
  std::optional<uint64_t> first_failed_step() const;

 private:
  void StartHeld(uint64_t step) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Done(uint64_t step, const std::vector<size_t>& layers,
            const absl::Status& s);

  ParameterClient* const client_;  // borrowed
  const std::vector<Layer> layers_;
  const Options options_;
  const absl::Span<const float> gradient_;
  const absl::Span<float> params_;

  mutable absl::Mutex mu_;
  // Per layer: its parameters are in, and the status that brought them.
  std::vector<bool> in_ ABSL_GUARDED_BY(mu_);
  std::vector<absl::Status> status_ ABSL_GUARDED_BY(mu_);
  std::vector<size_t> held_ ABSL_GUARDED_BY(mu_);  // layers, in order held
  size_t held_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  int started_this_step_ ABSL_GUARDED_BY(mu_) = 0;
  int in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t started_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status first_error_ ABSL_GUARDED_BY(mu_);
  std::optional<uint64_t> first_failed_step_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ps

#endif  // WORKER_TRAINER_EXCHANGE_PIPELINE_H_
