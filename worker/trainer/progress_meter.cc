#include "worker/trainer/progress_meter.h"

#include <utility>

namespace ps {

ProgressMeter::ProgressMeter(Options options)
    : options_(std::move(options)),
      total_steps_(options_.total_steps),
      num_workers_(options_.num_workers),
      report_interval_(std::chrono::duration_cast<Clock::duration>(
          absl::ToChronoNanoseconds(options_.report_interval))),
      run_start_(Now()),
      last_report_(run_start_) {
  progress_.set_total_steps(options_.total_steps);
  progress_.set_test_accuracy(-1.0f);
  progress_.set_test_auc(-1.0f);
  progress_.set_test_logloss(-1.0f);
  progress_.set_teacher_auc(-1.0f);
  if (options_.continues.has_value()) {
    const Progress& before = *options_.continues;
    elapsed_before_ = before.elapsed_s();
    data_s_ = before.data_s();
    compute_s_ = before.compute_s();
    comm_s_ = before.comm_s();
    steps_run_ = options_.continued_steps;
    progress_.set_test_accuracy(before.test_accuracy());
    progress_.set_test_auc(before.test_auc());
    progress_.set_test_logloss(before.test_logloss());
    progress_.set_teacher_auc(before.teacher_auc());
  }
}

void ProgressMeter::AddStep(Clock::duration data, Clock::duration compute,
                            Clock::duration comm, double loss_sum,
                            size_t correct) {
  data_s_ += Seconds(data);
  compute_s_ += Seconds(compute);
  comm_s_ += Seconds(comm);
  loss_sum_ += loss_sum;
  correct_ += correct;
  examples_ += options_.batch_size;
  ++steps_run_;
  ++steps_since_report_;
}

bool ProgressMeter::ReportDue(uint64_t step_done,
                              Clock::time_point step_end) const {
  if (step_done >= total_steps_) return false;  // the final follows
  return (options_.report_every_steps > 0 &&
          steps_since_report_ >= options_.report_every_steps) ||
         step_end - last_report_ >= report_interval_;
}

void ProgressMeter::Report(
    uint64_t step_done,
    const std::function<void(const Progress&)>& on_progress) {
  progress_.set_step(step_done);
  progress_.set_epoch(
      epoch_.has_value()
          ? *epoch_
          : static_cast<uint32_t>(step_done / options_.steps_per_epoch));
  if (examples_ > 0) {
    progress_.set_loss(static_cast<float>(loss_sum_ / examples_));
    progress_.set_train_accuracy(static_cast<float>(
        static_cast<double>(correct_) / static_cast<double>(examples_)));
  }
  const double loop_s = train_s();
  progress_.set_samples_per_s(
      loop_s > 0.0
          ? static_cast<float>(static_cast<double>(steps_run_) *
                               options_.batch_size * num_workers_ / loop_s)
          : 0.0f);
  progress_.set_data_s(data_s_);
  progress_.set_compute_s(compute_s_);
  progress_.set_comm_s(comm_s_);
  progress_.set_elapsed_s(elapsed_s());
  if (on_progress) on_progress(progress_);
  loss_sum_ = 0.0;
  correct_ = 0;
  examples_ = 0;
  steps_since_report_ = 0;
  last_report_ = Now();
}

}  // namespace ps
