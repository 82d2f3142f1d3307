#include "worker/trainer/trainer.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "spdlog/spdlog.h"
#include "worker/data/loader.h"

namespace ps {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

absl::Status AtStep(uint64_t step, const absl::Status& s) {
  return absl::Status(s.code(), absl::StrCat("step ", step, ": ", s.message()));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Trainer>> Trainer::Create(
    TrainerOptions options, ParameterClient* client) {
  if (client == nullptr) {
    return absl::InvalidArgumentError("client: null parameter client");
  }
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
  if (options.data.train == nullptr || options.data.test == nullptr) {
    absl::StatusOr<TrainTestData> data =
        LoadDataset(job.data(), options.data_dir, job.seed());
    if (!data.ok()) return data.status();
    options.data = *std::move(data);
  }
  absl::StatusOr<ShardPlan> plan = ShardPlan::Create(
      options.data.train->size(), options.rank, options.num_workers,
      job.data().batch_size(), job.seed());
  if (!plan.ok()) return plan.status();
  const uint64_t total = plan->steps_per_epoch() * job.data().epochs();
  if (options.start_step > total) {
    return absl::InvalidArgumentError(
        absl::StrFormat("start_step: %d is past the job's %d steps",
                        options.start_step, total));
  }

  DeviceGroup::Options group;
  group.devices = options.devices;
  group.weights = options.weights;
  group.threads_per_device = options.threads_per_device;
  group.max_batch =
      std::max<size_t>(job.data().batch_size(), options.eval_batch);
  absl::StatusOr<std::unique_ptr<DeviceGroup>> devices =
      DeviceGroup::Create(job.model(), group);
  if (!devices.ok()) return devices.status();
  const Dataset& train = *options.data.train;
  const Dataset& test = *options.data.test;
  if ((*devices)->input_dim() != train.dim() ||
      (*devices)->input_dim() != test.dim()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("model.input_dim: %d, but the data set has %d features",
                        (*devices)->input_dim(), train.dim()));
  }
  if ((*devices)->num_classes() != train.num_classes() ||
      (*devices)->num_classes() != test.num_classes()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "model.num_classes: %d, but the data set has %d classes",
        (*devices)->num_classes(), train.num_classes()));
  }
  return std::unique_ptr<Trainer>(new Trainer(
      std::move(options), client, *std::move(plan), *std::move(devices)));
}

Trainer::Trainer(TrainerOptions options, ParameterClient* client,
                 ShardPlan plan, std::unique_ptr<DeviceGroup> devices)
    : options_(std::move(options)),
      client_(client),
      plan_(std::move(plan)),
      devices_(std::move(devices)),
      total_steps_(plan_.steps_per_epoch() * options_.job.data().epochs()),
      params_(devices_->num_parameters()),
      grad_(devices_->num_parameters()) {
  if (options_.rank == 0) {
    const size_t chunk =
        std::min(options_.eval_batch, options_.data.test->size());
    eval_x_.resize(chunk * options_.data.test->dim());
    eval_labels_.resize(chunk);
  }
}

absl::Status Trainer::EvaluateTestSet(float* accuracy) {
  const Dataset& test = *options_.data.test;
  size_t correct = 0;
  for (size_t begin = 0; begin < test.size(); begin += eval_labels_.size()) {
    const size_t n = std::min(eval_labels_.size(), test.size() - begin);
    test.CopyRange(begin, n, eval_x_.data(), eval_labels_.data());
    double loss = 0.0;
    size_t c = 0;
    absl::Status s = devices_->Evaluate(params_.data(), eval_x_.data(),
                                        eval_labels_.data(), n, &loss, &c);
    if (!s.ok()) return s;
    correct += c;
  }
  *accuracy = test.size() == 0 ? 0.0f
                               : static_cast<float>(correct) /
                                     static_cast<float>(test.size());
  return absl::OkStatus();
}

absl::Status Trainer::Run(const ProgressCallback& on_progress,
                          const AbortCheck& should_abort) {
  const uint64_t batch = plan_.batch_size();
  const uint64_t spe = plan_.steps_per_epoch();
  const uint64_t eval_every = options_.job.eval_every();
  const bool evaluates = options_.rank == 0;
  const Clock::time_point run_start = Clock::now();

  progress_.Clear();
  progress_.set_total_steps(total_steps_);
  progress_.set_test_accuracy(-1.0f);

  double data_s = 0.0, compute_s = 0.0, comm_s = 0.0;
  // Since the last report.
  double loss_sum = 0.0;
  size_t correct = 0;
  uint64_t examples = 0;
  uint64_t steps_since_report = 0;
  Clock::time_point last_report = run_start;
  uint64_t steps_run = 0;

  auto report = [&](uint64_t step_done) {
    progress_.set_step(step_done);
    progress_.set_epoch(static_cast<uint32_t>(step_done / spe));
    if (examples > 0) {
      progress_.set_loss(static_cast<float>(loss_sum / examples));
      progress_.set_train_accuracy(static_cast<float>(
          static_cast<double>(correct) / static_cast<double>(examples)));
    }
    const double loop_s = data_s + compute_s + comm_s;
    progress_.set_samples_per_s(
        loop_s > 0.0 ? static_cast<float>(static_cast<double>(steps_run) *
                                          batch * options_.num_workers / loop_s)
                     : 0.0f);
    progress_.set_data_s(data_s);
    progress_.set_compute_s(compute_s);
    progress_.set_comm_s(comm_s);
    progress_.set_elapsed_s(Seconds(Clock::now() - run_start));
    if (on_progress) on_progress(progress_);
    loss_sum = 0.0;
    correct = 0;
    examples = 0;
    steps_since_report = 0;
    last_report = Clock::now();
  };

  // One line per evaluation, for time-to-accuracy measurements
  // (tools/bench_e2e.sh): elapsed_s counts from Run's start, evaluations
  // included; train_s is the step loop alone.
  auto log_eval = [&](uint64_t step_done, float accuracy) {
    spdlog::info(
        "eval job={} step={} epoch={} test_accuracy={:.4f} elapsed_s={:.3f} "
        "train_s={:.3f}",
        options_.job.name(), step_done, step_done / spe, accuracy,
        Seconds(Clock::now() - run_start), data_s + compute_s + comm_s);
  };

  const uint64_t start = options_.start_step;
  // The loader starts filling batches while the parameters are pulled.
  BatchLoader::Options loader_options;
  loader_options.num_threads = options_.loader_threads;
  loader_options.prefetch = options_.prefetch;
  absl::StatusOr<std::unique_ptr<BatchLoader>> loader = BatchLoader::Create(
      options_.data.train, plan_, start, total_steps_, loader_options);
  if (!loader.ok()) return loader.status();

  {
    const Clock::time_point t0 = Clock::now();
    absl::Status s = client_->Pull(start, absl::MakeSpan(params_));
    comm_s += Seconds(Clock::now() - t0);
    if (!s.ok()) {
      return absl::Status(
          s.code(), absl::StrCat("pull at step ", start, ": ", s.message()));
    }
  }

  const auto report_interval = std::chrono::duration_cast<Clock::duration>(
      absl::ToChronoNanoseconds(options_.report_interval));
  for (uint64_t t = start; t < total_steps_; ++t) {
    if (should_abort && should_abort()) {
      return AtStep(t, absl::CancelledError("job aborted"));
    }
    const Clock::time_point t0 = Clock::now();
    absl::StatusOr<std::unique_ptr<Batch>> b =
        (*loader)->Pop(absl::Now() + options_.data_timeout);
    const Clock::time_point t1 = Clock::now();
    if (!b.ok()) return AtStep(t, b.status());

    double step_loss = 0.0;
    size_t step_correct = 0;
    absl::Status s = devices_->ComputeGradient(
        params_.data(), (*b)->x.data(), (*b)->labels.data(), (*b)->size,
        grad_.data(), &step_loss, &step_correct);
    (*loader)->Recycle(*std::move(b));
    const Clock::time_point t2 = Clock::now();
    if (!s.ok()) return AtStep(t, s);

    s = client_->PushPull(t, grad_, absl::MakeSpan(params_));
    const Clock::time_point t3 = Clock::now();
    if (!s.ok()) return AtStep(t, s);

    data_s += Seconds(t1 - t0);
    compute_s += Seconds(t2 - t1);
    comm_s += Seconds(t3 - t2);
    loss_sum += step_loss;
    correct += step_correct;
    examples += batch;
    ++steps_run;
    ++steps_since_report;

    const uint64_t done = t + 1;
    if (evaluates && eval_every > 0 && done % eval_every == 0 &&
        done < total_steps_) {
      float accuracy;
      s = EvaluateTestSet(&accuracy);
      if (!s.ok()) return AtStep(t, s);
      progress_.set_test_accuracy(accuracy);
      log_eval(done, accuracy);
      report(done);
    } else if (done < total_steps_ &&  // the final report follows
               ((options_.report_every_steps > 0 &&
                 steps_since_report >= options_.report_every_steps) ||
                t3 - last_report >= report_interval)) {
      report(done);
    }
  }
  if (evaluates) {
    float accuracy;
    absl::Status s = EvaluateTestSet(&accuracy);
    if (!s.ok()) {
      return absl::Status(s.code(),
                          absl::StrCat("final evaluation: ", s.message()));
    }
    progress_.set_test_accuracy(accuracy);
    log_eval(total_steps_, accuracy);
  }
  report(total_steps_);
  return absl::OkStatus();
}

}  // namespace ps
