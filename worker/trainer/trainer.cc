#include "worker/trainer/trainer.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "core/model_spec.h"
#include "spdlog/spdlog.h"
#include "worker/trainer/step_marks.h"

namespace ps {
namespace {

absl::Status AtStep(uint64_t step, const absl::Status& s) {
  return absl::Status(s.code(), absl::StrCat("step ", step, ": ", s.message()));
}

absl::Status Prefixed(const std::string& prefix, const absl::Status& s) {
  return absl::Status(s.code(), absl::StrCat(prefix, s.message()));
}

// kInvalidArgument naming the field for a bad job or option.
absl::Status Validate(const TrainerOptions& options) {
  const JobSpec& job = options.job;
  if (job.model().model_case() == ModelSpec::MODEL_NOT_SET) {
    return absl::InvalidArgumentError("model: no model in the job");
  }
  if (job.data().batch_size() == 0) {
    return absl::InvalidArgumentError("data.batch_size: must be >= 1");
  }
  if (job.data().epochs() == 0) {
    return absl::InvalidArgumentError("data.epochs: must be >= 1");
  }
  if (options.num_workers == 0) {
    return absl::InvalidArgumentError("num_workers: must be >= 1");
  }
  if (options.rank >= options.num_workers) {
    return absl::InvalidArgumentError(
        absl::StrFormat("rank: %d is not below num_workers %d", options.rank,
                        options.num_workers));
  }
  if (options.loader_threads == 0) {
    return absl::InvalidArgumentError("loader_threads: must be >= 1");
  }
  if (options.prefetch == 0) {
    return absl::InvalidArgumentError("prefetch: must be >= 1");
  }
  if (options.eval_batch == 0) {
    return absl::InvalidArgumentError("eval_batch: must be >= 1");
  }
  return absl::OkStatus();
}

// kInvalidArgument when the model's input or class count is not the data's.
absl::Status CheckModelFitsData(const DeviceGroup& devices,
                                const TrainTestData& data) {
  const Dataset& train = *data.train;
  const Dataset& test = *data.test;
  if (devices.input_dim() != train.dim() || devices.input_dim() != test.dim()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("model.input_dim: %d, but the data set has %d features",
                        devices.input_dim(), train.dim()));
  }
  if (devices.num_classes() != train.num_classes() ||
      devices.num_classes() != test.num_classes()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "model.num_classes: %d, but the data set has %d classes",
        devices.num_classes(), train.num_classes()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Trainer>> Trainer::Create(
    TrainerOptions options, ParameterClient* client) {
  if (client == nullptr) {
    return absl::InvalidArgumentError("client: null parameter client");
  }
  PS_RETURN_IF_ERROR(Validate(options));
  if (options.job.model().has_lab()) {
    return CreateLab(std::move(options), client);
  }
  const JobSpec& job = options.job;
  if (options.data.train == nullptr || options.data.test == nullptr) {
    PS_ASSIGN_OR_RETURN(options.data,
                        LoadDataset(job.data(), options.data_dir, job.seed()));
  }
  std::optional<ShardPlan> plan;
  std::unique_ptr<ElasticBatches> elastic;
  if (options.data_plan) {
    PS_ASSIGN_OR_RETURN(
        ElasticSampler sampler,
        ElasticSampler::Create(options.data.train->size(),
                               job.data().batch_size(), job.seed()));
    elastic = std::make_unique<ElasticBatches>(
        options.data.train, std::move(sampler), options.rank,
        job.data().epochs(), options.data_plan);
  } else {
    PS_ASSIGN_OR_RETURN(
        plan, ShardPlan::Create(options.data.train->size(), options.rank,
                                options.num_workers, job.data().batch_size(),
                                job.seed()));
  }
  // An elastic job's steps are the plan's: no fixed end to check against.
  const uint64_t total = plan ? plan->steps_per_epoch() * job.data().epochs()
                              : std::numeric_limits<uint64_t>::max();
  if (options.start_step > total) {
    return absl::InvalidArgumentError(
        absl::StrFormat("start_step: %d is past the job's %d steps",
                        options.start_step, total));
  }
  DeviceGroup::Options group;
  group.devices = options.devices;
  group.weights = options.weights;
  group.threads_per_device = options.threads_per_device;
  group.cpu_kernels = options.cpu_kernels;
  group.cpu_kernel_choices = options.cpu_kernel_choices;
  group.tune_batch = job.data().batch_size();
  group.max_batch =
      std::max<size_t>(job.data().batch_size(), options.eval_batch);
  PS_ASSIGN_OR_RETURN(std::unique_ptr<DeviceGroup> devices,
                      DeviceGroup::Create(job.model(), group));
  // Decided once, here: the start log says which kernels run each layer.
  for (const std::string& choice : devices->kernel_choices()) {
    spdlog::info("job {}: kernels: {}", job.name(), choice);
  }
  PS_RETURN_IF_ERROR(CheckModelFitsData(*devices, options.data));
  return std::unique_ptr<Trainer>(
      new Trainer(std::move(options), client, std::move(plan),
                  std::move(devices), nullptr, std::move(elastic)));
}

absl::StatusOr<std::unique_ptr<Trainer>> Trainer::CreateLab(
    TrainerOptions options, ParameterClient* client) {
  PS_ASSIGN_OR_RETURN(std::unique_ptr<LabWorkload> lab,
                      LabWorkload::Create(options.job.model(), options.rank));
  const uint64_t total = lab->steps_per_epoch() * options.job.data().epochs();
  if (options.start_step > total) {
    return absl::InvalidArgumentError(
        absl::StrFormat("start_step: %d is past the job's %d steps",
                        options.start_step, total));
  }
  return std::unique_ptr<Trainer>(new Trainer(
      std::move(options), client, std::nullopt, nullptr, std::move(lab)));
}

Trainer::Trainer(TrainerOptions options, ParameterClient* client,
                 std::optional<ShardPlan> plan,
                 std::unique_ptr<DeviceGroup> devices,
                 std::unique_ptr<LabWorkload> lab,
                 std::unique_ptr<ElasticBatches> elastic)
    : options_(std::move(options)),
      client_(client),
      plan_(std::move(plan)),
      devices_(std::move(devices)),
      lab_(std::move(lab)),
      elastic_(std::move(elastic)),
      // An elastic job's until its first plan: the submitted workers'.
      steps_per_epoch_(
          lab_ ? lab_->steps_per_epoch()
          : plan_
              ? plan_->steps_per_epoch()
              : std::max<uint64_t>(
                    1, StepsPerEpoch(options_.data.train->size(),
                                     std::max(1u, options_.job.num_workers()),
                                     options_.job.data().batch_size()))),
      batch_size_(plan_ ? plan_->batch_size()
                        : options_.job.data().batch_size()),
      total_steps_(steps_per_epoch_ * options_.job.data().epochs()),
      evaluator_((options_.rank == 0 || options_.leader) && devices_
                     ? std::make_unique<Evaluator>(
                           options_.data.test.get(), devices_.get(),
                           options_.eval_batch, options_.job.eval_every())
                     : nullptr),
      params_(lab_ ? lab_->num_parameters() : devices_->num_parameters()),
      grad_(params_.size()) {
  // The lab's gradient is the same every step: filled once, pushed as is.
  if (lab_) lab_->FillGradient(absl::MakeSpan(grad_));
  PinBuffers();
}

// Unpinned before the buffers go: a backend unpins what is left only when
// it ends, after the members.
Trainer::~Trainer() { UnpinBuffers(); }

std::vector<float> Trainer::TakeParameters() {
  UnpinBuffers();
  return std::move(params_);
}

void Trainer::PinBuffers() {
  if (!devices_) return;
  for (std::vector<float>* v : {&params_, &grad_}) {
    absl::Status s = devices_->PinHost(v->data(), v->size() * sizeof(float));
    if (!s.ok()) {
      spdlog::warn(
          "job {}: {} stays unpinned (copies to the devices go through "
          "staging buffers): {}",
          options_.job.name(), v == &params_ ? "parameters" : "gradient",
          s.ToString());
    }
  }
}

void Trainer::UnpinBuffers() {
  if (!devices_) return;
  devices_->UnpinHost(params_.data());
  devices_->UnpinHost(grad_.data());
}

const Progress& Trainer::last_progress() const {
  return meter_ ? meter_->progress() : Progress::default_instance();
}

absl::Status Trainer::PullInitial() {
  const uint64_t start = options_.start_step;
  if (options_.initial_params != nullptr &&
      options_.initial_params->size() == params_.size()) {
    // Copied, not swapped: the exchange pipeline borrows params_' buffer.
    std::copy(options_.initial_params->begin(), options_.initial_params->end(),
              params_.begin());
    *options_.initial_params = std::vector<float>();  // freed
    return absl::OkStatus();
  }
  const Clock::time_point t0 = Clock::now();
  absl::Status s = client_->Pull(start, absl::MakeSpan(params_));
  meter_->AddComm(Clock::now() - t0);
  if (!s.ok()) return Prefixed(absl::StrCat("pull at step ", start, ": "), s);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Batch>> Trainer::PopBatch(uint64_t t,
                                                         BatchLoader* loader) {
  if (elastic_) return elastic_->Fill(t);
  return loader->Pop(absl::Now() + options_.data_timeout);
}

void Trainer::RecycleBatch(BatchLoader* loader, std::unique_ptr<Batch> b) {
  if (elastic_) {
    elastic_->Recycle(std::move(b));
  } else {
    loader->Recycle(std::move(b));
  }
}

absl::Status Trainer::Step(uint64_t t, BatchLoader* loader,
                           Clock::time_point* step_end) {
  StepMarks marks(options_.tracer, t);
  const Clock::time_point t0 = Clock::now();
  PS_ASSIGN_OR_RETURN(std::unique_ptr<Batch> b, PopBatch(t, loader));
  const Clock::time_point t1 = Clock::now();
  marks.Phase(TRACE_DATA_WAIT);
  double loss = 0.0;
  size_t correct = 0;
  absl::Status s = devices_->ComputeGradient(
      params_.data(), b->x.data(), b->labels.data(), b->size, grad_.data(),
      &loss, &correct, /*hooks=*/nullptr,
      StepTrace{marks.recorder(), marks.step()});
  RecycleBatch(loader, std::move(b));
  const Clock::time_point t2 = Clock::now();
  marks.Phase(TRACE_COMPUTE);
  PS_RETURN_IF_ERROR(s);
  PS_RETURN_IF_ERROR(client_->PushPull(t, grad_, absl::MakeSpan(params_)));
  *step_end = Clock::now();
  marks.Phase(TRACE_COMM_WAIT);
  marks.Finish();
  meter_->AddStep(t1 - t0, t2 - t1, *step_end - t2, loss, correct);
  return absl::OkStatus();
}

absl::Status Trainer::OverlapStep(uint64_t t, BatchLoader* loader,
                                  Clock::time_point* step_end) {
  StepMarks marks(options_.tracer, t);
  const Clock::time_point t0 = Clock::now();
  PS_ASSIGN_OR_RETURN(std::unique_ptr<Batch> b, PopBatch(t, loader));
  const Clock::time_point t1 = Clock::now();
  marks.Phase(TRACE_DATA_WAIT);
  // Exposed communication: this thread blocked on a layer's parameters.
  // Device threads wait too, but under this one's compute or wait.
  Clock::duration blocked = Clock::duration::zero();
  const std::thread::id trainer_thread = std::this_thread::get_id();
  GradientHooks hooks;
  hooks.before_forward = [&](size_t layer) {
    if (std::this_thread::get_id() != trainer_thread) {
      return pipeline_->AwaitLayer(layer);
    }
    const Clock::time_point w0 = Clock::now();
    const int64_t w0_ns = marks.traced() ? TraceRecorder::NowNs() : 0;
    absl::Status s = pipeline_->AwaitLayer(layer);
    blocked += Clock::now() - w0;
    if (marks.traced()) {
      marks.Add(TRACE_COMM_WAIT, w0_ns, TraceRecorder::NowNs());
    }
    return s;
  };
  hooks.layer_ready = [&](size_t layer) { pipeline_->LayerReady(t, layer); };
  double loss = 0.0;
  size_t correct = 0;
  absl::Status s = devices_->ComputeGradient(
      params_.data(), b->x.data(), b->labels.data(), b->size, grad_.data(),
      &loss, &correct, &hooks, StepTrace{marks.recorder(), marks.step()});
  RecycleBatch(loader, std::move(b));
  if (!s.ok()) {
    pipeline_->Discard(s);
    return s;
  }
  pipeline_->Flush(t);
  *step_end = Clock::now();
  marks.Phase(TRACE_COMPUTE);  // the waits above are inside it
  marks.Finish();
  meter_->AddStep(t1 - t0, *step_end - t1 - blocked, blocked, loss, correct);
  return absl::OkStatus();
}

absl::Status Trainer::OverlapLabStep(uint64_t t, Clock::time_point* step_end) {
  StepMarks marks(options_.tracer, t);
  const Clock::time_point t0 = Clock::now();
  Clock::duration blocked = Clock::duration::zero();
  const size_t layers = pipeline_->num_layers();
  const double share = 1.0 / (3.0 * static_cast<double>(layers));
  for (size_t l = 0; l < layers; ++l) {
    const Clock::time_point w0 = Clock::now();
    const int64_t w0_ns = marks.traced() ? TraceRecorder::NowNs() : 0;
    absl::Status s = pipeline_->AwaitLayer(l);
    blocked += Clock::now() - w0;
    if (marks.traced()) {
      marks.Add(TRACE_COMM_WAIT, w0_ns, TraceRecorder::NowNs());
    }
    PS_RETURN_IF_ERROR(s);
    lab_->Compute(share);
  }
  for (size_t l = layers; l-- > 0;) {
    lab_->Compute(2.0 * share);
    pipeline_->LayerReady(t, l);
  }
  pipeline_->Flush(t);
  *step_end = Clock::now();
  marks.Phase(TRACE_COMPUTE);
  marks.Finish();
  meter_->AddStep(Clock::duration::zero(), *step_end - t0 - blocked, blocked,
                  /*loss_sum=*/0.0, /*correct=*/0);
  return absl::OkStatus();
}

absl::Status Trainer::Drain() {
  if (!pipeline_) return absl::OkStatus();
  const Clock::time_point t0 = Clock::now();
  absl::Status s = pipeline_->AwaitAll();
  meter_->AddComm(Clock::now() - t0);
  return s;
}

absl::Status Trainer::LabStep(uint64_t t, Clock::time_point* step_end) {
  StepMarks marks(options_.tracer, t);
  const Clock::time_point t0 = Clock::now();
  lab_->Compute();
  const Clock::time_point t1 = Clock::now();
  marks.Phase(TRACE_COMPUTE);
  PS_RETURN_IF_ERROR(client_->PushPull(t, grad_, absl::MakeSpan(params_)));
  *step_end = Clock::now();
  marks.Phase(TRACE_COMM_WAIT);
  marks.Finish();
  meter_->AddStep(Clock::duration::zero(), t1 - t0, *step_end - t1,
                  /*loss_sum=*/0.0, /*correct=*/0);
  return absl::OkStatus();
}

absl::Status Trainer::Evaluate(uint64_t done) {
  // The parameters of the last step's exchanges must be in.
  PS_RETURN_IF_ERROR(Drain());
  PS_ASSIGN_OR_RETURN(float accuracy, evaluator_->Accuracy(params_.data()));
  meter_->SetTestAccuracy(accuracy);
  // One line per evaluation, for time-to-accuracy measurements
  // (tools/bench/bench_e2e.sh): elapsed_s counts from Run's start, evaluations
  // included; train_s is the step loop alone.
  spdlog::info(
      "eval job={} step={} epoch={} test_accuracy={:.4f} elapsed_s={:.3f} "
      "train_s={:.3f}",
      options_.job.name(), done, done / steps_per_epoch_, accuracy,
      meter_->elapsed_s(), meter_->train_s());
  return absl::OkStatus();
}

bool Trainer::Leads() const {
  return options_.leader ? options_.leader() : options_.rank == 0;
}

absl::Status Trainer::AfterStep(uint64_t done, Clock::time_point step_end,
                                const ProgressCallback& on_progress) {
  if (evaluator_ && evaluator_->Due(done, total_steps_) && Leads()) {
    PS_RETURN_IF_ERROR(Evaluate(done));
    meter_->Report(done, on_progress);
  } else if (meter_->ReportDue(done, step_end)) {
    meter_->Report(done, on_progress);
  }
  return absl::OkStatus();
}

absl::Status Trainer::PrepareElastic(uint64_t t, bool* run) {
  // Asking for step t may seal it, and the coordinator changes the quorum
  // there: this worker's exchanges of the steps before must all be in (an
  // overlapped step sends its last layers after its compute returned), or
  // a leaving rank's last push would meet the new quorum.
  if (elastic_->NeedsPlan(t)) PS_RETURN_IF_ERROR(Drain());
  PS_ASSIGN_OR_RETURN(ElasticBatches::Next next, elastic_->Prepare(t));
  if (next == ElasticBatches::Next::kLeave) {
    next_step_ = t;
    return absl::CancelledError(absl::StrFormat(
        "scaled down: rank %d reads no data from step %d", options_.rank, t));
  }
  *run = next == ElasticBatches::Next::kRun;
  if (!*run) {
    total_steps_ = t;  // the plan's end: every epoch was read
    meter_->SetPlan(t, options_.job.data().epochs(), elastic_->workers());
    return absl::OkStatus();
  }
  total_steps_ = elastic_->EstimatedTotalSteps();
  meter_->SetPlan(total_steps_, elastic_->epoch(), elastic_->workers());
  return absl::OkStatus();
}

absl::Status Trainer::Run(const ProgressCallback& on_progress,
                          const AbortCheck& should_abort) {
  ProgressMeter::Options meter;
  meter.total_steps = total_steps_;
  meter.steps_per_epoch = steps_per_epoch_;
  meter.batch_size = batch_size_;
  meter.num_workers = options_.num_workers;
  meter.report_interval = options_.report_interval;
  meter.report_every_steps = options_.report_every_steps;
  meter.continues = options_.continues;
  meter.continued_steps = options_.continued_steps;
  meter_ = std::make_unique<ProgressMeter>(std::move(meter));
  if (options_.overlap && client_->supports_exchange()) {
    // Layer l is the tensors 2l and 2l + 1 (fc<l> or lab<l>: w, b; see
    // core/model_spec.h), in the flat layout's order.
    const std::vector<TensorSpec> tensors = ModelTensors(options_.job.model());
    std::vector<ExchangePipeline::Layer> layers(tensors.size() / 2);
    for (size_t l = 0; l < layers.size(); ++l) {
      for (const TensorSpec& t : {tensors[2 * l], tensors[2 * l + 1]}) {
        layers[l].tensors.push_back(t.name());
        layers[l].bytes += NumParameters({t}) * sizeof(float);
      }
    }
    ExchangePipeline::Options pipe;
    pipe.fusion_bytes = options_.fusion_bytes;
    pipe.max_exchanges_per_step = options_.max_exchanges_per_step;
    // Under BSP/SSP calls wait on the shards for the other workers: start
    // order, the same on every worker (see ExchangePipeline::Options).
    pipe.prioritize = options_.job.consistency().mode() == ASP;
    pipeline_ = std::make_unique<ExchangePipeline>(
        client_, std::move(layers), pipe, grad_, absl::MakeSpan(params_));
  }
  meter_->SetOverlap(pipeline_ != nullptr);
  absl::Status s = RunSteps(on_progress, should_abort);
  // Exchanges in flight borrow params_ and grad_: none may outlive Run.
  if (pipeline_) pipeline_->AwaitAll().IgnoreError();
  // An exchange's failure surfaces in the next step's forward: the step it
  // pushed for is the first not done (a re-placed job resumes there).
  if (!s.ok() && pipeline_ && pipeline_->first_failed_step().has_value()) {
    next_step_ = std::min(next_step_, *pipeline_->first_failed_step());
  }
  return s;
}

absl::Status Trainer::RunSteps(const ProgressCallback& on_progress,
                               const AbortCheck& should_abort) {
  // The loader starts filling batches while the parameters are pulled.
  std::unique_ptr<BatchLoader> loader;
  if (plan_) {
    BatchLoader::Options loader_options;
    loader_options.num_threads = options_.loader_threads;
    loader_options.prefetch = options_.prefetch;
    PS_ASSIGN_OR_RETURN(
        loader,
        BatchLoader::Create(options_.data.train, *plan_, options_.start_step,
                            total_steps_, loader_options));
  }
  next_step_ = options_.start_step;
  bool run = true;
  // A joiner's first plan waits for the job's workers to seal its step.
  if (elastic_) {
    PS_RETURN_IF_ERROR(PrepareElastic(options_.start_step, &run));
  }
  if (!run) return absl::OkStatus();
  PS_RETURN_IF_ERROR(PullInitial());

  // An elastic job's total is an estimate: its plan says where it ends (a
  // scale in the last epoch may add a step or take one away).
  for (uint64_t t = options_.start_step; elastic_ || t < total_steps_; ++t) {
    next_step_ = t;
    if (should_abort && should_abort()) {
      return AtStep(t, absl::CancelledError("job aborted"));
    }
    if (elastic_ && t > options_.start_step) {
      absl::Status s = PrepareElastic(t, &run);
      if (!s.ok()) return AtStep(t, s);
      if (!run) break;
    }
    Clock::time_point step_end;
    absl::Status s;
    if (lab_) {
      s = pipeline_ ? OverlapLabStep(t, &step_end) : LabStep(t, &step_end);
    } else {
      s = pipeline_ ? OverlapStep(t, loader.get(), &step_end)
                    : Step(t, loader.get(), &step_end);
    }
    if (s.ok()) s = AfterStep(t + 1, step_end, on_progress);
    if (!s.ok()) return AtStep(t, s);
  }
  {
    absl::Status s = Drain();
    if (!s.ok()) return AtStep(total_steps_ - 1, s);
  }
  next_step_ = total_steps_;
  // The last step's exchanges are in: its trace is complete.
  if (options_.tracer != nullptr) {
    options_.tracer->Reached(std::numeric_limits<uint64_t>::max());
  }
  if (evaluator_ && Leads()) {
    absl::Status s = Evaluate(total_steps_);
    if (!s.ok()) return Prefixed("final evaluation: ", s);
  }
  meter_->Report(total_steps_, on_progress);
  return absl::OkStatus();
}

}  // namespace ps
