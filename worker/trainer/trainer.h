// Trainer: one worker's training loop for one job.
//
//   TrainerOptions options;
//   options.job = assignment.spec();
//   options.rank = assignment.rank();
//   options.num_workers = assignment.num_workers();
//   options.start_step = assignment.start_step();
//   options.data_dir = "/usr/share/datasets/fashion-mnist";
//   absl::StatusOr<std::unique_ptr<Trainer>> trainer =
//       Trainer::Create(options, client.get());   // client is borrowed
//   absl::Status s = (*trainer)->Run(
//       [&](const Progress& p) { reporter.Enqueue(p); },
//       [&] { return abort_requested.load(); });
//
// The step loop is the same for BSP, ASP and SSP (they differ only on the
// shards):
//
//   Pull(start_step) -> for t in [start_step, total_steps):
//       batch = loader.Pop()                 data wait
//       grad  = devices.ComputeGradient()    compute (mean over the batch)
//       params = PushPull(t, grad)           communication
//
// Overlapped steps (options.overlap, the default, with a client that
// supports_exchange() and a model trained on data): the same gradients and
// parameters, but communication runs under compute. Backward hands each
// layer's gradient, reduced across the devices as soon as all of them have
// it (DeviceGroup's GradientHooks), to an ExchangePipeline, which pushes it
// at once (last layer first; small layers fused up to fusion_bytes) and
// pulls that layer's parameters for the next step in the same exchange
// (ASP: the first layer's at the highest priority; BSP/SSP: in start order,
// which cannot deadlock the shards' waits). The next step's forward
// waits per layer, only for a layer whose parameters are not in yet. BSP
// stays bitwise the same: the shards sum every chunk in rank order
// whatever the arrival order, and the devices' per-layer reduce adds the
// same numbers in the same order. Before an evaluation and at the end the
// trainer waits for every exchange in flight.
//
// total_steps = data.epochs * steps_per_epoch, steps_per_epoch =
// floor(floor(train_size / num_workers) / batch_size) on every rank (see
// worker/data/shard.h). Step t reads batch t % steps_per_epoch of epoch
// t / steps_per_epoch, so a worker that starts at start_step > 0 continues
// exactly where a run from 0 would be. Rank 0 evaluates the test set on
// device 0 every job.eval_every steps and at the end.
//
// Progress, as reported:
//   step           steps done (the next step's index); total_steps as above
//   epoch          step / steps_per_epoch: epochs completed
//   loss, train_accuracy  per-example means over the steps since the last
//                  report (the previous values when no step ran since)
//   test_accuracy  rank 0's latest evaluation, -1 before the first (and
//                  always on other ranks)
//   data_s, compute_s, comm_s  cumulative seconds this run spent waiting for
//                  batches, computing gradients (split, replicas, reduce) and
//                  blocked on the network: in Pull/PushPull, or, overlapped,
//                  the trainer thread's waits for parameters that had not
//                  arrived (the exposed communication; what ran under
//                  compute is not in it); evaluation is in none of them
//   overlap        whether the steps were overlapped
//   samples_per_s  num_workers * batch_size * steps run / (data_s +
//                  compute_s + comm_s): the job's rate if every worker ran
//                  at this one's pace
//   elapsed_s      wall time since Run started (evaluation included)
//
// Each evaluation is also logged (spdlog info) as one line, "eval job=NAME
// step=S epoch=E test_accuracy=A elapsed_s=T train_s=L", elapsed_s as above
// and train_s = data_s + compute_s + comm_s: time-to-accuracy for
// tools/bench/bench_e2e.sh.
//
// Buffers (parameters, gradient, batches, evaluation chunk) are allocated
// before the loop; a step allocates nothing. The time split and the reports
// are ProgressMeter's (progress_meter.h), the test accuracy Evaluator's
// (evaluator.h).
//
// The lab model (ModelSpec.lab, lab_workload.h) trains through the same
// client, steps and reports, without data, device replicas or evaluation:
// each step waits lab.compute_ms (compute) and pushes a constant gradient;
// steps_per_epoch = lab.steps_per_epoch, total_steps = steps_per_epoch *
// data.epochs, data_s = 0, loss = train_accuracy = 0, test_accuracy = -1, and
// samples_per_s counts data.batch_size examples per worker per step as above.
// Overlapped, a lab step spends a third of compute_ms in "forward" and two
// thirds in "backward", spread evenly over its layers (lab<i>/w, lab<i>/b),
// with the same per-layer waits and exchanges as a real model.
//
// Abort: should_abort is polled before each step, so a cancelled job stops
// within one step, unless the step is blocked in the client (waiting for
// other workers); the client's own deadline bounds that wait.
#ifndef WORKER_TRAINER_TRAINER_H_
#define WORKER_TRAINER_TRAINER_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/defaults.h"
#include "common/trace_recorder.h"
#include "proto/coordinator.pb.h"
#include "proto/job.pb.h"
#include "worker/client/parameter_client.h"
#include "worker/data/dataset.h"
#include "worker/data/loader.h"
#include "worker/data/shard.h"
#include "worker/trainer/device_group.h"
#include "worker/trainer/elastic_batches.h"
#include "worker/trainer/evaluator.h"
#include "worker/trainer/exchange_pipeline.h"
#include "worker/trainer/lab_workload.h"
#include "worker/trainer/progress_meter.h"

namespace ps {

struct TrainerOptions {
  // From the assignment.
  JobSpec job;
  uint32_t rank = 0;
  uint32_t num_workers = 1;
  uint64_t start_step = 0;
  // A run that carries on an earlier run of the job in this process (after
  // a re-placement): its last Progress and the steps it ran, so the
  // reports' times, pace and test scores continue (ProgressMeter::Options).
  std::optional<Progress> continues;
  uint64_t continued_steps = 0;
  // The parameters of version start_step, held from the run before (a
  // re-placement: its refused step was applied nowhere, so they are the
  // shards' too): taken instead of the first Pull when it holds exactly
  // the model's count. Null or another size: pulled.
  std::shared_ptr<std::vector<float>> initial_params;

  // This worker's replicas, their share of each batch (empty = equal) and
  // BLAS threads per CPU replica (see DeviceGroup::Options).
  std::vector<std::string> devices = {"cpu:0"};
  std::vector<double> weights;
  int threads_per_device = kDefaultThreadsPerDevice;
  // Kernels of "cpu:*" devices (WorkerdConfig.cpu_kernels) and, under
  // kAuto, the table of recorded choices (optional; outlives the trainer).
  CpuKernels cpu_kernels = CpuKernels::kOpenBlas;
  KernelChoices* cpu_kernel_choices = nullptr;

  // Batch loader threads and batches loaded ahead of the step.
  size_t loader_threads = kDefaultLoaderThreads;
  size_t prefetch = kDefaultPrefetchBatches;

  // Where IDX data sets live unless job.data.data_dir says otherwise.
  std::string data_dir;
  // Already loaded sets (a worker can keep them across jobs); when `train` is
  // null, Create loads them from job.data. A lab model uses none.
  TrainTestData data;

  // Progress is reported every report_interval, and also every
  // report_every_steps steps when > 0, after each evaluation and at the end.
  absl::Duration report_interval = absl::Seconds(1);
  uint64_t report_every_steps = 0;
  // Test examples evaluated per call on device 0.
  size_t eval_batch = 1000;
  // Whether this worker leads its job now (workerd: HeartbeatResponse.
  // leads_job): the leader evaluates the test set, so that a job whose
  // rank 0 was lost under SHRINK still reports test accuracy. Polled at
  // each evaluation point. Null: rank 0 leads, always.
  std::function<bool()> leader;
  // A step's batch not loaded within this is an error.
  absl::Duration data_timeout = absl::Seconds(60);

  // Overlapped steps (see the file comment), when the client supports
  // them; and the fusion threshold (ExchangePipeline::Options).
  bool overlap = true;
  size_t fusion_bytes = kDefaultFusionBytes;
  // The client's requests in flight per shard: a step makes at most this
  // many exchanges (ExchangePipeline::Options::max_exchanges_per_step).
  int max_exchanges_per_step = kDefaultMaxInflightPerShard;

  // An elastic data job (Assignment.elastic_data): each step's examples
  // follow the coordinator's data plan (elastic_batches.h) instead of a
  // fixed split over num_workers; the job's steps end where the plan says
  // (total_steps() is an estimate until then), and a rank left out of the
  // plan stops before that step (Run: kCancelled, "scaled down"). Null:
  // the fixed split (ShardPlan). Unused by a lab model.
  ElasticBatches::AskPlan data_plan;

  // Step timelines (psctl trace); borrowed, must outlive the trainer; null:
  // none. The steps it covers record TRACE_STEP, TRACE_DATA_WAIT,
  // TRACE_COMPUTE, TRACE_COMM_WAIT and the devices' spans; every step
  // tells it Reached(step).
  TraceRecorder* tracer = nullptr;
};

// Thread-compatible: one thread calls Run. The callbacks run on that thread.
class Trainer {
 public:
  // Called on the trainer's thread; must not block for long (hand the report
  // to another thread).
  using ProgressCallback = std::function<void(const Progress&)>;
  // Polled before every step; true stops the run with kCancelled.
  using AbortCheck = std::function<bool()>;

  // Loads the data (unless given), plans this rank's shard and builds the
  // device replicas. `client` is borrowed and must outlive the Trainer.
  // kInvalidArgument naming the field for a bad job or option (no model,
  // batch_size 0, epochs 0, rank >= num_workers, start_step past the end, a
  // model whose input or class count does not match the data); data,
  // backend and model errors as their libraries report them. A lab model
  // loads no data and builds no replicas (options.devices are unused).
  static absl::StatusOr<std::unique_ptr<Trainer>> Create(
      TrainerOptions options, ParameterClient* client);
  ~Trainer();

  // Trains from options.start_step to total_steps(). Returns OK when done,
  // kCancelled when should_abort said so (checked before each step), or the
  // first error, prefixed with the step ("step 12: ..."). Blocks. Either
  // callback may be empty. Call once.
  absl::Status Run(const ProgressCallback& on_progress,
                   const AbortCheck& should_abort);

  uint64_t steps_per_epoch() const { return steps_per_epoch_; }
  uint64_t total_steps() const { return total_steps_; }
  // The parameters after the last PushPull.
  const std::vector<float>& parameters() const { return params_; }
  // Hands the parameters over (for the next run's initial_params); the
  // trainer must not run again.
  std::vector<float> TakeParameters();
  // The last progress reported (also filled when no callback is given).
  const Progress& last_progress() const;
  // After Run: the first step it did not run (it completed every step
  // before, exchanges included): total_steps() when done, the step it
  // stopped before when aborted or failed.
  uint64_t next_step() const { return next_step_; }

 private:
  using Clock = ProgressMeter::Clock;

  // One of `plan` + `devices` (a model trained on data) or `lab`.
  Trainer(TrainerOptions options, ParameterClient* client,
          std::optional<ShardPlan> plan, std::unique_ptr<DeviceGroup> devices,
          std::unique_ptr<LabWorkload> lab,
          std::unique_ptr<ElasticBatches> elastic = nullptr);
  // Create for a lab model (options validated).
  static absl::StatusOr<std::unique_ptr<Trainer>> CreateLab(
      TrainerOptions options, ParameterClient* client);

  // The first Pull, at start_step.
  absl::Status PullInitial();
  // One step: its batch, the gradient, PushPull; the time split goes to
  // meter_. `*step_end` is when PushPull returned.
  absl::Status Step(uint64_t t, BatchLoader* loader,
                    Clock::time_point* step_end);
  // Step t's batch: the loader's, or elastic_'s (loader null).
  absl::StatusOr<std::unique_ptr<Batch>> PopBatch(uint64_t t,
                                                  BatchLoader* loader);
  void RecycleBatch(BatchLoader* loader, std::unique_ptr<Batch> b);
  // An elastic data job, before step t: its plan (the job's end, or this
  // rank leaving), and the estimates in meter_. *run false: stop before t.
  absl::Status PrepareElastic(uint64_t t, bool* run);
  // The overlapped step: as Step, with per-layer waits in forward and
  // exchanges started from backward.
  absl::Status OverlapStep(uint64_t t, BatchLoader* loader,
                           Clock::time_point* step_end);
  // Waits for every exchange in flight (none without overlap), the time as
  // communication; the first exchange error.
  absl::Status Drain();
  // The step loop (Run's body before the final drain).
  absl::Status RunSteps(const ProgressCallback& on_progress,
                        const AbortCheck& should_abort);
  // The overlapped lab step (see the file comment).
  absl::Status OverlapLabStep(uint64_t t, Clock::time_point* step_end);
  // A lab model's step: its wait, then PushPull of the constant gradient.
  absl::Status LabStep(uint64_t t, Clock::time_point* step_end);
  // After `done` steps: evaluates and reports, or reports, when due.
  absl::Status AfterStep(uint64_t done, Clock::time_point step_end,
                         const ProgressCallback& on_progress);
  // Evaluates the test set (the leader) after `done` steps and logs it.
  absl::Status Evaluate(uint64_t done);
  // Whether this rank evaluates now (TrainerOptions::leader).
  bool Leads() const;
  // Pins params_ and grad_ on the device backends for direct copies (GPU
  // devices; DeviceGroup::PinHost); a failure is logged and costs only speed.
  void PinBuffers();
  void UnpinBuffers();

  const TrainerOptions options_;
  ParameterClient* const client_;               // borrowed
  const std::optional<ShardPlan> plan_;         // none for a lab model
  const std::unique_ptr<DeviceGroup> devices_;  // null for a lab model
  const std::unique_ptr<LabWorkload> lab_;      // lab model only
  // Elastic data jobs only (TrainerOptions::data_plan); else plan_ is set.
  const std::unique_ptr<ElasticBatches> elastic_;
  const uint64_t steps_per_epoch_;
  const uint64_t batch_size_;
  // Fixed, unless elastic_: then re-estimated at each plan.
  uint64_t total_steps_;
  uint64_t next_step_ = 0;
  // Rank 0 of a model trained on data only (else null); uses devices_.
  const std::unique_ptr<Evaluator> evaluator_;

  std::vector<float> params_;
  std::vector<float> grad_;
  std::unique_ptr<ProgressMeter> meter_;  // made by Run
  // Overlapped steps only (made by Run); borrows params_ and grad_.
  std::unique_ptr<ExchangePipeline> pipeline_;
};

}  // namespace ps

#endif  // WORKER_TRAINER_TRAINER_H_
