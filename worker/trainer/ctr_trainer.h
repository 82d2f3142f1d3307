// CtrTrainer: one worker's training loop for a ctr model (ModelSpec.ctr):
// dense MLP parameters through the ParameterClient, embedding rows through
// the SparseClient (the job's sparse table), examples from the job's data
// set through a CtrDataSource (worker/trainer/ctr_data.h): "ctr-synthetic"
// (the generator) or "criteo-tsv" (Criteo TSV files).
//
//   CtrTrainer::Options options;
//   options.job = assignment.spec();  options.rank = ...;  ...
//   PS_ASSIGN_OR_RETURN(std::unique_ptr<CtrTrainer> t,
//                       CtrTrainer::Create(options, dense.get(),
//                       sparse.get()));
//   PS_RETURN_IF_ERROR(t->Run(on_progress, should_abort));
//
// The step (the same for BSP, ASP and SSP; the shards differ):
//
//   Pull(start) dense; rows(start) = Exchange(start, no push, ids(start))
//   for t in [start, total):
//     grads = model.ComputeGradient(params, rows(t))     compute, while
//                   batch t + 1 is read on a second thread (overlap_data)
//     ids(t + 1) = the unique ids of batch t + 1          data
//     in parallel:  params = PushPull(t, dense grad)     communication
//                   rows(t + 1) = Exchange(t, push ids(t), row grads,
//                                          pull ids(t + 1))
//
// so a step costs one dense and one sparse round trip, and the next batch's
// rows come back with this step's push (BSP: at version t + 1, as the
// dense parameters). Both gradients are this worker's batch mean (grad_scale
// 1 / batch); the shards average over the workers. BSP is bitwise
// reproducible: the model is deterministic, and each shard sums a row's
// gradients in rank order.
//
// Data: step t reads this rank's batch t of the source, epoch t /
// steps_per_epoch; ctr_data.h (synthetic) and ctr_data_tsv.h (criteo-tsv,
// which counts the training file's rows in Create) say which examples.
//
// Evaluation (by the job's leader, rank 0 unless Options::leader says
// otherwise; every job.eval_every steps and at the end): the test
// set's AUC and logloss with the parameters and rows after that step, and,
// once, the planted teacher's AUC on the same set (the best reachable; -1
// for criteo-tsv, which has no teacher), reported in Progress.test_auc /
// test_logloss / teacher_auc and logged as
// "eval job=NAME step=S epoch=E test_auc=A test_logloss=L teacher_auc=T
// elapsed_s=E train_s=T".
//
// Progress: as Trainer's (worker/trainer/trainer.h), loss the training
// logloss; train_accuracy is not measured (0): AUC is the metric; sparse
// the rows this worker pushed and pulled for training and its hot-row
// cache's counters. Every device of options.devices computes a slice of
// each batch (worker/trainer/ctr_devices.h).
//
// Hot-row cache (TableSpec.max_row_staleness, row_cache_bytes;
// worker/client/hot_row_cache.h): with row_cache_bytes > 0 (filled in
// when max_row_staleness > 0) the rows of batch t + 1 that were pulled at
// most max_row_staleness steps ago come from the cache, and only the others
// ride with step t's push; every row's gradient is still pushed. With
// max_row_staleness 0 every row is pulled, bitwise as without a cache.
// Evaluation always pulls the rows it reads.
#ifndef WORKER_TRAINER_CTR_TRAINER_H_
#define WORKER_TRAINER_CTR_TRAINER_H_

#include <cstdint>
#include <functional>
#include <future>
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
#include "worker/backend/backend.h"
#include "worker/client/hot_row_cache.h"
#include "worker/client/parameter_client.h"
#include "worker/client/sparse_client.h"
#include "worker/data/ctr_example.h"
#include "worker/model/ctr_model.h"
#include "worker/trainer/ctr_data.h"
#include "worker/trainer/ctr_devices.h"
#include "worker/trainer/elastic_batches.h"
#include "worker/trainer/progress_meter.h"

namespace ps {

class CtrTrainer {
 public:
  struct Options {
    JobSpec job;  // normalized (tables' defaults and tensors filled)
    uint32_t rank = 0;
    uint32_t num_workers = 1;
    uint64_t start_step = 0;
    // A run that carries on an earlier run of the job in this process (after
    // a re-placement): its last Progress and the steps it ran, so the
    // reports' times, pace and test scores continue (ProgressMeter::Options).
    std::optional<Progress> continues;
    uint64_t continued_steps = 0;
    // The worker's devices (WorkerdConfig.devices): the batch is split over
    // them and their gradients summed before the push (ctr_devices.h);
    // evaluation runs on the first.
    std::vector<std::string> devices = {kDefaultDevice};
    int threads_per_device = kDefaultThreadsPerDevice;
    absl::Duration report_interval = absl::Seconds(1);
    uint64_t report_every_steps = 0;
    // Test examples per evaluation call (their rows must fit one message
    // per shard).
    size_t eval_batch = 2048;
    // criteo-tsv: the count pass's logging (ctr_data.h).
    absl::Duration count_log_interval = absl::Seconds(10);
    int logged_bad_rows = 5;
    // Step timelines (psctl trace): borrowed, may be null. The trainer
    // records each covered step's phases and tells it Reached(step).
    TraceRecorder* tracer = nullptr;
    // Whether this worker leads its job now, as TrainerOptions::leader:
    // the leader evaluates the test set. Polled at each evaluation point.
    // Null: rank 0 leads, always. Set, every rank opens the test set.
    std::function<bool()> leader;
    // Read batch t + 1 from the data source on a second thread while batch
    // t computes (the step's data time is then only what compute did not
    // cover); false reads it after compute, on the trainer's thread.
    // workerd: !WorkerdConfig.disable_overlap.
    bool overlap_data = true;
    // An elastic data job (Assignment.elastic_data; ctr-synthetic only):
    // the coordinator's plan of each step (ElasticBatches::AskPlan), asked
    // at the start and at each segment boundary. Null: this rank's fixed
    // share of the data (ctr_data.h).
    ElasticBatches::AskPlan data_plan;
  };
  using ProgressCallback = std::function<void(const Progress&)>;
  using AbortCheck = std::function<bool()>;

  // `dense` and `sparse` are borrowed and must outlive the trainer.
  // kInvalidArgument naming the field for a job that is not a ctr model on
  // ctr-synthetic or criteo-tsv data, or whose table is missing; the data
  // source's errors (ctr_data.h). criteo-tsv: reads the training file (and
  // on rank 0, or every rank when `leader` is set, the test file) once to
  // count its rows; see ctr_data_tsv.h.
  static absl::StatusOr<std::unique_ptr<CtrTrainer>> Create(
      Options options, ParameterClient* dense, SparseClient* sparse);

  // Trains from start_step to total_steps(); OK, kCancelled (should_abort,
  // polled before each step, or a plan without this rank: scaled down) or
  // the first error prefixed with its step. An elastic data job's
  // total_steps() is its plan's estimate, final once the plan is done.
  absl::Status Run(const ProgressCallback& on_progress,
                   const AbortCheck& should_abort);

  uint64_t steps_per_epoch() const { return steps_per_epoch_; }
  uint64_t total_steps() const { return total_steps_; }
  const std::vector<float>& parameters() const { return params_; }
  const Progress& last_progress() const { return meter_->progress(); }
  // After Run: the first step it did not complete (total_steps() when
  // done).
  uint64_t next_step() const { return next_step_; }

 private:
  CtrTrainer(Options options, ParameterClient* dense, SparseClient* sparse,
             std::unique_ptr<CtrDataSource> data,
             std::unique_ptr<CtrDevices> devices,
             std::unique_ptr<CtrReplica> eval_model,
             std::unique_ptr<HotRowCache> cache,
             std::unique_ptr<ElasticBatches> elastic);

  // Batch t of this rank into batch_, and the model's unique ids for it.
  absl::Status LoadBatch(uint64_t t);
  // This rank's examples of step t into *batch: its fixed share, or what
  // the elastic plan held gives it (indices taken here, on the caller's
  // thread; the read itself may run on another).
  std::function<absl::Status()> Reader(uint64_t t, CtrBatch* batch);
  // Elastic: the plan of step t (asked when outside the segment held).
  // *run false: the plan is done at t (total_steps_ = t); kCancelled when
  // this rank reads no data from t on.
  absl::Status PrepareElastic(uint64_t t, bool* run);
  // Whether step t + 1's batch is known during step t (its ids then ride
  // with step t's push).
  bool NextKnown(uint64_t t) const;
  // Batch t and its rows (without a push): the start, and after an elastic
  // plan's boundary.
  absl::Status BeginAt(uint64_t t);
  // After the last step: the final evaluation, the log line and report.
  absl::Status Finish(const ProgressCallback& on_progress);
  // The model's unique ids of `batch` (read already) into next_ids_.
  absl::Status PrepareBatch(const CtrBatch& batch);
  // Batch t + 1 into next_batch_ and its ids into next_ids_, the read begun
  // by Step on a second thread (`reading` valid) or done here.
  absl::Status LoadNext(uint64_t t, std::future<absl::Status>* reading);
  // Rows of `ids` at the version step `step` reads, without a push.
  absl::Status PullRows(uint64_t step, absl::Span<const uint64_t> ids,
                        std::vector<float>* rows);
  // The rows of next_ids_ into next_rows_ before step `step` (the start),
  // through the cache when there is one.
  absl::Status PullFirstRows(uint64_t step);
  // The table traffic and cache counters so far, into the meter.
  void ReportSparse();
  absl::Status Step(uint64_t t);
  absl::Status Evaluate(uint64_t done);
  // Whether this rank evaluates now (Options::leader).
  bool Leads() const;

  const Options options_;
  ParameterClient* const dense_;  // borrowed
  SparseClient* const sparse_;    // borrowed
  std::unique_ptr<CtrDataSource> data_;
  const std::string table_;
  const uint32_t dim_;
  const uint64_t batch_size_;
  const uint64_t steps_per_epoch_;
  uint64_t total_steps_;                     // elastic: the plan's estimate
  std::unique_ptr<ElasticBatches> elastic_;  // null: fixed shares
  std::vector<uint32_t> indices_;            // elastic: a step's examples
  uint64_t next_step_ = 0;
  std::unique_ptr<CtrDevices> devices_;
  std::unique_ptr<CtrReplica> eval_model_;  // ranks that may lead only
  std::unique_ptr<ProgressMeter> meter_;
  std::unique_ptr<HotRowCache> cache_;  // null: no row cache
  RowCacheMisses misses_;               // the cache's part of a pull
  uint64_t rows_pushed_ = 0, rows_pulled_ = 0;

  CtrBatch batch_;
  // Batch t + 1, read while batch t computes (Options::overlap_data).
  CtrBatch next_batch_;
  std::vector<float> params_, grad_;
  std::vector<uint64_t> ids_;     // the current batch's unique ids
  std::vector<float> rows_;       // their rows
  std::vector<float> row_grads_;  // their gradients
  std::vector<uint64_t> next_ids_;
  std::vector<float> next_rows_;
  std::optional<double> teacher_auc_;
};

}  // namespace ps

#endif  // WORKER_TRAINER_CTR_TRAINER_H_
