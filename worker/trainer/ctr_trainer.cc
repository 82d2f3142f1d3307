#include "worker/trainer/ctr_trainer.h"

#include <algorithm>
#include <future>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "core/model_spec.h"
#include "core/table_spec.h"
#include "spdlog/spdlog.h"
#include "worker/trainer/ctr_devices.h"
#include "worker/trainer/ctr_metrics.h"
#include "worker/trainer/step_marks.h"

namespace ps {
namespace {

using Clock = ProgressMeter::Clock;

absl::Status AtStep(uint64_t step, const absl::Status& s) {
  return absl::Status(s.code(), absl::StrCat("step ", step, ": ", s.message()));
}

const TableSpec* FindTable(const JobSpec& job, const std::string& name) {
  for (const TableSpec& t : job.tables()) {
    if (t.name() == name) return &t;
  }
  return nullptr;
}

absl::Status Validate(const CtrTrainer::Options& o) {
  const JobSpec& job = o.job;
  if (!job.model().has_ctr()) {
    return absl::InvalidArgumentError("model: not a ctr model");
  }
  PS_RETURN_IF_ERROR(ValidateModelSpec(job.model()));
  if (FindTable(job, job.model().ctr().table()) == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("model.ctr.table: \"",
                                                   job.model().ctr().table(),
                                                   "\" is not in tables"));
  }
  if (job.data().batch_size() == 0 || job.data().epochs() == 0) {
    return absl::InvalidArgumentError(
        "data: batch_size and epochs must be >= 1");
  }
  if (o.num_workers == 0 || o.rank >= o.num_workers) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "rank: %d is not below num_workers %d", o.rank, o.num_workers));
  }
  if (o.eval_batch == 0) {
    return absl::InvalidArgumentError("eval_batch: must be >= 1");
  }
  return absl::OkStatus();
}

// The table's hot-row cache, or null when its row_cache_bytes (after the
// defaults) is 0.
absl::StatusOr<std::unique_ptr<HotRowCache>> CacheFor(const TableSpec& spec) {
  TableSpec t = spec;
  ApplyTableDefaults(&t);
  if (t.row_cache_bytes() == 0) return std::unique_ptr<HotRowCache>();
  HotRowCacheOptions o;
  o.dim = t.dim();
  o.max_staleness = t.max_row_staleness();
  o.capacity_bytes = t.row_cache_bytes();
  o.policy = RowCachePolicy::kLru;
  return HotRowCache::Create(o);
}

}  // namespace

absl::StatusOr<std::unique_ptr<CtrTrainer>> CtrTrainer::Create(
    Options options, ParameterClient* dense, SparseClient* sparse) {
  if (dense == nullptr || sparse == nullptr) {
    return absl::InvalidArgumentError("client: null parameter client");
  }
  PS_RETURN_IF_ERROR(Validate(options));
  CtrDataOptions data_options;
  data_options.rank = options.rank;
  data_options.num_workers = options.num_workers;
  // Ranks that may come to lead (TrainerOptions::leader) need the test set.
  const bool may_lead = options.rank == 0 || options.leader != nullptr;
  data_options.test_set = may_lead;
  data_options.count_log_interval = options.count_log_interval;
  data_options.logged_bad_rows = options.logged_bad_rows;
  PS_ASSIGN_OR_RETURN(std::unique_ptr<CtrDataSource> data,
                      CreateCtrDataSource(options.job, data_options));
  const size_t batch = options.job.data().batch_size();
  PS_ASSIGN_OR_RETURN(std::unique_ptr<CtrDevices> devices,
                      CtrDevices::Create(options.job.model(), options.devices,
                                         options.threads_per_device, batch));
  std::unique_ptr<CtrReplica> eval_model;
  if (may_lead) {
    PS_ASSIGN_OR_RETURN(eval_model, CtrReplica::Create(options.job.model(),
                                                       devices->first_backend(),
                                                       options.eval_batch));
  }
  PS_ASSIGN_OR_RETURN(
      std::unique_ptr<HotRowCache> cache,
      CacheFor(*FindTable(options.job, options.job.model().ctr().table())));
  std::unique_ptr<ElasticBatches> elastic;
  if (options.data_plan) {
    if (data->train_examples() == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "data.dataset: an elastic data job of a ctr model reads ",
          kCtrSyntheticDatasetName, ", not \"", options.job.data().dataset(),
          "\""));
    }
    PS_ASSIGN_OR_RETURN(ElasticSampler sampler,
                        ElasticSampler::Create(data->train_examples(), batch,
                                               options.job.seed()));
    elastic = std::make_unique<ElasticBatches>(
        nullptr, std::move(sampler), options.rank, options.job.data().epochs(),
        options.data_plan);
  }
  return std::unique_ptr<CtrTrainer>(new CtrTrainer(
      std::move(options), dense, sparse, std::move(data), std::move(devices),
      std::move(eval_model), std::move(cache), std::move(elastic)));
}

CtrTrainer::CtrTrainer(Options options, ParameterClient* dense,
                       SparseClient* sparse,
                       std::unique_ptr<CtrDataSource> data,
                       std::unique_ptr<CtrDevices> devices,
                       std::unique_ptr<CtrReplica> eval_model,
                       std::unique_ptr<HotRowCache> cache,
                       std::unique_ptr<ElasticBatches> elastic)
    : options_(std::move(options)),
      dense_(dense),
      sparse_(sparse),
      data_(std::move(data)),
      table_(options_.job.model().ctr().table()),
      dim_(FindTable(options_.job, table_)->dim()),
      batch_size_(options_.job.data().batch_size()),
      steps_per_epoch_(data_->steps_per_epoch()),
      total_steps_(steps_per_epoch_ * options_.job.data().epochs()),
      elastic_(std::move(elastic)),
      devices_(std::move(devices)),
      eval_model_(std::move(eval_model)),
      cache_(std::move(cache)) {
  const size_t n = devices_->num_parameters();
  params_.assign(n, 0.0f);
  grad_.assign(n, 0.0f);
}

std::function<absl::Status()> CtrTrainer::Reader(uint64_t t, CtrBatch* batch) {
  if (elastic_ == nullptr) {
    return [this, t, batch] { return data_->TrainBatch(t, batch); };
  }
  absl::Status indices = elastic_->StepIndices(t, &indices_);
  if (!indices.ok()) return [indices] { return indices; };
  return [this, batch] { return data_->ExamplesAt(indices_, batch); };
}

absl::Status CtrTrainer::LoadBatch(uint64_t t) {
  PS_RETURN_IF_ERROR(Reader(t, &batch_)());
  return PrepareBatch(batch_);
}

bool CtrTrainer::NextKnown(uint64_t t) const {
  if (elastic_ != nullptr) return !elastic_->NeedsPlan(t + 1);
  return t + 1 < total_steps_;
}

absl::Status CtrTrainer::PrepareElastic(uint64_t t, bool* run) {
  PS_ASSIGN_OR_RETURN(ElasticBatches::Next next, elastic_->Prepare(t));
  if (next == ElasticBatches::Next::kLeave) {
    next_step_ = t;
    return absl::CancelledError(absl::StrFormat(
        "scaled down: rank %d reads no data from step %d", options_.rank, t));
  }
  *run = next == ElasticBatches::Next::kRun;
  total_steps_ = *run ? elastic_->EstimatedTotalSteps() : t;
  meter_->SetPlan(total_steps_,
                  *run ? elastic_->epoch() : options_.job.data().epochs(),
                  elastic_->workers());
  return absl::OkStatus();
}

absl::Status CtrTrainer::PrepareBatch(const CtrBatch& batch) {
  // Prepare copies what the step needs: `batch` may be read into again.
  PS_RETURN_IF_ERROR(devices_->Prepare(batch));
  const absl::Span<const uint64_t> ids = devices_->unique_ids();
  next_ids_.assign(ids.begin(), ids.end());
  return absl::OkStatus();
}

absl::Status CtrTrainer::LoadNext(uint64_t t,
                                  std::future<absl::Status>* reading) {
  PS_RETURN_IF_ERROR(reading->valid() ? reading->get()
                                      : Reader(t + 1, &next_batch_)());
  return PrepareBatch(next_batch_);
}

absl::Status CtrTrainer::PullRows(uint64_t step, absl::Span<const uint64_t> ids,
                                  std::vector<float>* rows) {
  rows->resize(ids.size() * dim_);
  SparseTableStep s;
  s.table = table_;
  s.pull_ids = ids;
  s.pull_rows = absl::MakeSpan(*rows);
  return sparse_->Exchange(step, /*push=*/false, {s});
}

absl::Status CtrTrainer::PullFirstRows(uint64_t step) {
  next_rows_.resize(next_ids_.size() * dim_);
  if (cache_ == nullptr) {
    rows_pulled_ += next_ids_.size();
    return PullRows(step, next_ids_, &next_rows_);
  }
  // Without a push the rows read are those of version `step`.
  cache_->Read(step, next_ids_, absl::MakeSpan(next_rows_), &misses_);
  rows_pulled_ += misses_.ids.size();
  SparseTableStep s;
  s.table = table_;
  s.pull_ids = misses_.ids;
  s.pull_rows = absl::MakeSpan(misses_.rows);
  PS_RETURN_IF_ERROR(sparse_->Exchange(step, /*push=*/false, {s}));
  cache_->Complete(step, misses_, absl::MakeSpan(next_rows_));
  return absl::OkStatus();
}

void CtrTrainer::ReportSparse() {
  SparseProgress p;
  p.set_rows_pushed(rows_pushed_);
  p.set_rows_pulled(rows_pulled_);
  if (cache_ != nullptr) {
    const HotRowCacheStats c = cache_->stats();
    p.set_row_cache_hits(c.hits);
    p.set_row_cache_misses(c.misses);
    p.set_row_cache_evictions(c.evictions);
    p.set_row_cache_bytes_saved(c.bytes_saved);
    p.set_row_cache_bytes_used(c.bytes_used);
  }
  meter_->SetSparse(p);
}

absl::Status CtrTrainer::Step(uint64_t t) {
  StepMarks marks(options_.tracer, t);
  const Clock::time_point start = Clock::now();
  // Batch t is prepared (its ids pulled with the previous step).
  ids_.swap(next_ids_);
  rows_.swap(next_rows_);
  row_grads_.resize(rows_.size());
  // Not known: the last step, or an elastic plan's boundary (the next
  // batch's rows are pulled once its plan is in, PrepareElastic).
  const bool last = !NextKnown(t);
  // Batch t + 1 is read while batch t computes; the data source and
  // next_batch_ are the reader's until get() (an early return waits for it:
  // std::async's future joins in its destructor).
  std::future<absl::Status> reading;
  if (!last && options_.overlap_data) {
    reading = std::async(std::launch::async, Reader(t + 1, &next_batch_));
  }
  double loss_sum = 0.0;
  PS_RETURN_IF_ERROR(devices_->ComputeGradient(
      params_.data(), rows_.data(), grad_.data(), row_grads_.data(), &loss_sum,
      1.0f / static_cast<float>(batch_size_)));
  const Clock::time_point computed = Clock::now();
  marks.Phase(TRACE_COMPUTE);
  // The next batch's ids ride with this step's push.
  if (!last) PS_RETURN_IF_ERROR(LoadNext(t, &reading));
  if (last) next_ids_.clear();
  next_rows_.resize(next_ids_.size() * dim_);
  const Clock::time_point loaded = Clock::now();
  marks.Phase(TRACE_DATA_WAIT);

  // The sparse exchange runs beside the dense PushPull.
  SparseStep step;
  step.step = t;
  step.push = true;
  SparseTableStep& s = step.tables.emplace_back();
  s.table = table_;
  s.push_ids = ids_;
  s.push_grads = row_grads_;
  s.pull_ids = next_ids_;
  s.pull_rows = absl::MakeSpan(next_rows_);
  // With a push the rows read are those of version t + 1.
  if (cache_ != nullptr) {
    cache_->Read(t + 1, next_ids_, absl::MakeSpan(next_rows_), &misses_);
    s.pull_ids = misses_.ids;
    s.pull_rows = absl::MakeSpan(misses_.rows);
  }
  rows_pushed_ += ids_.size();
  rows_pulled_ += s.pull_ids.size();
  const RequestHandle sparse = sparse_->Start(std::move(step));
  absl::Status dense_status =
      dense_->PushPull(t, grad_, absl::MakeSpan(params_));
  // Bounded: every attempt of the sparse client has a deadline.
  const absl::Status sparse_status = sparse_->Wait(sparse);
  PS_RETURN_IF_ERROR(dense_status);
  PS_RETURN_IF_ERROR(sparse_status);
  if (cache_ != nullptr) {
    cache_->Complete(t + 1, misses_, absl::MakeSpan(next_rows_));
  }
  const Clock::time_point end = Clock::now();
  marks.Phase(TRACE_COMM_WAIT);
  marks.Finish();
  meter_->AddStep(loaded - computed, computed - start, end - loaded, loss_sum,
                  /*correct=*/0);
  ReportSparse();
  return absl::OkStatus();
}

bool CtrTrainer::Leads() const {
  return options_.leader ? options_.leader() : options_.rank == 0;
}

absl::Status CtrTrainer::Evaluate(uint64_t done) {
  if (eval_model_ == nullptr || !Leads()) return absl::OkStatus();
  CtrMetricsAccumulator model_metrics, teacher_metrics;
  bool has_teacher = false;
  std::vector<float> probs(options_.eval_batch), rows;
  PS_RETURN_IF_ERROR(data_->ForEachTestBatch(
      options_.eval_batch,
      [&](const CtrBatch& batch, const double* teacher) -> absl::Status {
        PS_RETURN_IF_ERROR(eval_model_->Prepare(batch));
        PS_RETURN_IF_ERROR(PullRows(done, eval_model_->unique_ids(), &rows));
        PS_RETURN_IF_ERROR(
            eval_model_->Predict(params_.data(), rows.data(), probs.data()));
        has_teacher = teacher != nullptr;
        for (size_t i = 0; i < batch.size; ++i) {
          PS_RETURN_IF_ERROR(model_metrics.Add(probs[i], batch.labels[i]));
          if (has_teacher && !teacher_auc_) {
            PS_RETURN_IF_ERROR(
                teacher_metrics.Add(teacher[i], batch.labels[i]));
          }
        }
        return absl::OkStatus();
      }));
  // No teacher (criteo-tsv): -1, as Progress.teacher_auc documents.
  if (!teacher_auc_) {
    teacher_auc_ = has_teacher ? teacher_metrics.Summary().auc : -1.0;
  }
  const CtrMetrics m = model_metrics.Summary();
  meter_->SetCtrMetrics(m.auc, m.logloss, *teacher_auc_);
  spdlog::info(
      "eval job={} step={} epoch={} test_auc={:.4f} test_logloss={:.4f} "
      "teacher_auc={:.4f} elapsed_s={:.2f} train_s={:.2f}",
      options_.job.name(), done,
      elastic_ != nullptr ? elastic_->epoch() : done / steps_per_epoch_, m.auc,
      m.logloss, *teacher_auc_, meter_->elapsed_s(), meter_->train_s());
  return absl::OkStatus();
}

absl::Status CtrTrainer::BeginAt(uint64_t t) {
  PS_RETURN_IF_ERROR(LoadBatch(t));
  return PullFirstRows(t);
}

absl::Status CtrTrainer::Run(const ProgressCallback& on_progress,
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
  const uint64_t start = options_.start_step;
  const bool elastic = elastic_ != nullptr;
  if (!elastic && start > total_steps_) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "start_step: %d is past the job's %d steps", start, total_steps_));
  }
  bool run = elastic || start < total_steps_;
  // A joiner's first plan waits for the job's workers to seal its step.
  if (elastic) PS_RETURN_IF_ERROR(AtStep(start, PrepareElastic(start, &run)));
  const Clock::time_point pull_start = Clock::now();
  PS_RETURN_IF_ERROR(
      AtStep(start, dense_->Pull(start, absl::MakeSpan(params_))));
  if (run) PS_RETURN_IF_ERROR(AtStep(start, BeginAt(start)));
  meter_->AddComm(Clock::now() - pull_start);
  const uint64_t eval_every = options_.job.eval_every();
  next_step_ = start;
  for (uint64_t t = start; run && (elastic || t < total_steps_); ++t) {
    next_step_ = t;
    if (should_abort && should_abort()) {
      return absl::CancelledError(absl::StrCat("aborted before step ", t));
    }
    if (elastic && t > start && elastic_->NeedsPlan(t)) {
      // A plan's boundary: the step before pushed without pulling; this
      // step's plan, batch and rows now.
      PS_RETURN_IF_ERROR(AtStep(t, PrepareElastic(t, &run)));
      if (!run) break;
      const Clock::time_point begin = Clock::now();
      PS_RETURN_IF_ERROR(AtStep(t, BeginAt(t)));
      meter_->AddComm(Clock::now() - begin);
    }
    PS_RETURN_IF_ERROR(AtStep(t, Step(t)));
    const uint64_t done = t + 1;
    next_step_ = done;
    if (eval_every > 0 && done % eval_every == 0 && done < total_steps_) {
      PS_RETURN_IF_ERROR(AtStep(done, Evaluate(done)));
      meter_->Report(done, on_progress);
    } else if (done < total_steps_ && meter_->ReportDue(done, Clock::now())) {
      meter_->Report(done, on_progress);
    }
  }
  return Finish(on_progress);
}

absl::Status CtrTrainer::Finish(const ProgressCallback& on_progress) {
  // The last step's exchanges are in: its trace is complete.
  if (options_.tracer != nullptr) {
    options_.tracer->Reached(std::numeric_limits<uint64_t>::max());
  }
  PS_RETURN_IF_ERROR(AtStep(total_steps_, Evaluate(total_steps_)));
  ReportSparse();
  const SparseProgress& sp = meter_->progress().sparse();
  spdlog::info(
      "sparse job={} rank={} rows_pushed={} rows_pulled={} row_cache_hits={} "
      "row_cache_misses={} row_cache_evictions={} row_cache_bytes_saved={} "
      "split_calls={} parts={}",
      options_.job.name(), options_.rank, sp.rows_pushed(), sp.rows_pulled(),
      sp.row_cache_hits(), sp.row_cache_misses(), sp.row_cache_evictions(),
      sp.row_cache_bytes_saved(), sparse_->stats().split_calls,
      sparse_->stats().parts);
  meter_->Report(total_steps_, on_progress);
  return absl::OkStatus();
}

}  // namespace ps
