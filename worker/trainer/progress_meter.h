// ProgressMeter: the trainer's running account of one run, turned into the
// Progress it reports (see worker/trainer/trainer.h for what each field
// means): where the time went (data wait, compute, communication), the loss
// and accuracy since the last report, and when the next report is due.
//
//   ProgressMeter meter(options);            // at Run's start
//   meter.AddStep(data, compute, comm, loss, correct);
//   if (meter.ReportDue(t + 1, step_end)) meter.Report(t + 1, on_progress);
//
// Thread-compatible: the trainer's thread uses it alone.
#ifndef WORKER_TRAINER_PROGRESS_METER_H_
#define WORKER_TRAINER_PROGRESS_METER_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>

#include "absl/time/time.h"
#include "proto/coordinator.pb.h"

namespace ps {

class ProgressMeter {
 public:
  using Clock = std::chrono::steady_clock;

  struct Options {
    uint64_t total_steps = 0;
    uint64_t steps_per_epoch = 1;  // must be >= 1
    uint64_t batch_size = 0;
    uint32_t num_workers = 1;
    // A report is due every report_interval, and also every
    // report_every_steps steps when > 0.
    absl::Duration report_interval = absl::Seconds(1);
    uint64_t report_every_steps = 0;
    // The clock (tests give a fake one); Clock::now when empty.
    std::function<Clock::time_point()> now;
    // A run that carries on an earlier one of the same job in this process
    // (a re-placement, worker/placement_follower.h): that run's last
    // Progress and the steps it ran. The times (elapsed, data, compute,
    // comm), the pace and the test scores continue from them.
    std::optional<Progress> continues;
    uint64_t continued_steps = 0;
  };

  // The run starts now: elapsed_s counts from here. test_accuracy starts at
  // -1 (no evaluation yet).
  explicit ProgressMeter(Options options);

  // Time spent in communication outside a step (the first Pull).
  void AddComm(Clock::duration d) { comm_s_ += Seconds(d); }

  // One step done: the time it spent waiting for its batch, computing and
  // blocked on the network (exposed communication: Pull/PushPull, or an
  // overlapped step's waits for parameters), and the summed loss and
  // correct count of its batch.
  void AddStep(Clock::duration data, Clock::duration compute,
               Clock::duration comm, double loss_sum, size_t correct);

  // Whether to report after `step_done` steps (with the step's end time),
  // by step count or report interval. Never for the last step: the final
  // report follows it.
  bool ReportDue(uint64_t step_done, Clock::time_point step_end) const;

  // An elastic data job's position, from its plan (elastic_batches.h):
  // the job's steps as now estimated, the epoch the next step reads and the
  // workers reading it. They replace Options' total_steps, steps_per_epoch
  // and num_workers in the reports from now on.
  void SetPlan(uint64_t total_steps, uint32_t epoch, uint32_t num_workers) {
    total_steps_ = total_steps;
    epoch_ = epoch;
    num_workers_ = num_workers;
    progress_.set_total_steps(total_steps);
  }

  // Whether the steps overlap communication with compute (reported).
  void SetOverlap(bool overlap) { progress_.set_overlap(overlap); }

  void SetTestAccuracy(float accuracy) {
    progress_.set_test_accuracy(accuracy);
  }
  // A ctr model's evaluation (-1 until the first).
  void SetCtrMetrics(float auc, float logloss, float teacher_auc) {
    progress_.set_test_auc(auc);
    progress_.set_test_logloss(logloss);
    progress_.set_teacher_auc(teacher_auc);
  }

  // A ctr model's sparse table traffic and row cache, cumulative.
  void SetSparse(const SparseProgress& sparse) {
    *progress_.mutable_sparse() = sparse;
  }

  // Fills the progress after `step_done` steps, hands it to `on_progress`
  // (may be empty) and starts a new report window.
  void Report(uint64_t step_done,
              const std::function<void(const Progress&)>& on_progress);

  // Seconds since the run started, and in the step loop (data + compute +
  // comm).
  double elapsed_s() const {
    return elapsed_before_ + Seconds(Now() - run_start_);
  }
  double train_s() const { return data_s_ + compute_s_ + comm_s_; }

  const Progress& progress() const { return progress_; }

 private:
  static double Seconds(Clock::duration d) {
    return std::chrono::duration<double>(d).count();
  }
  Clock::time_point Now() const {
    return options_.now ? options_.now() : Clock::now();
  }

  const Options options_;
  uint64_t total_steps_;
  std::optional<uint32_t> epoch_;  // SetPlan's; else step / steps_per_epoch
  uint32_t num_workers_;
  const Clock::duration report_interval_;
  const Clock::time_point run_start_;
  Progress progress_;

  double elapsed_before_ = 0.0;  // Options::continues
  double data_s_ = 0.0, compute_s_ = 0.0, comm_s_ = 0.0;
  uint64_t steps_run_ = 0;
  // Since the last report.
  double loss_sum_ = 0.0;
  size_t correct_ = 0;
  uint64_t examples_ = 0;
  uint64_t steps_since_report_ = 0;
  Clock::time_point last_report_;
};

}  // namespace ps

#endif  // WORKER_TRAINER_PROGRESS_METER_H_
