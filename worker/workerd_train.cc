// Workerd's training of one assignment: the parameter client, the data and
// the trainer (Train; TrainCtr for a ctr model), and, when a shard refuses
// the assignment's placement epoch, the new assignment and a new run from
// the refused step (worker/placement_follower.h). Registration, polling and
// reporting: workerd.cc.
#include <memory>
#include <string>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "common/status_macros.h"
#include "spdlog/spdlog.h"
#include "worker/client/ps_client.h"
#include "worker/client/sparse_client.h"
#include "worker/placement_follower.h"
#include "worker/trainer/ctr_trainer.h"
#include "worker/trainer/trainer.h"
#include "worker/workerd.h"

namespace ps {
namespace {

TrainerOptions TrainerOptionsFor(const Assignment& a, const WorkerdConfig& c) {
  TrainerOptions options;
  options.job = a.spec();
  options.rank = a.rank();
  options.num_workers = a.num_workers();
  options.start_step = a.start_step();
  options.devices.assign(c.devices().begin(), c.devices().end());
  options.weights.assign(c.device_weights().begin(), c.device_weights().end());
  options.threads_per_device = static_cast<int>(c.threads_per_device());
  // Config loading has checked the name.
  options.cpu_kernels =
      ParseCpuKernels(c.cpu_kernels()).value_or(CpuKernels::kOpenBlas);
  options.loader_threads = c.loader_threads();
  options.prefetch = c.prefetch_batches();
  options.data_dir = c.data_dir();
  options.overlap = !c.disable_overlap();
  options.fusion_bytes = c.fusion_bytes();
  options.max_exchanges_per_step = static_cast<int>(c.max_inflight_per_shard());
  return options;
}

// A run of job `a` from `start_step`: after a re-placement (a step past the
// assignment's, with a report of the run before) the job's curve goes on
// from `last`, its wall time counted from the job's first run here (the
// last report is up to a report interval old, and the pause came after
// it), and true; else the run is the job's first here and starts the clock.
// Options: TrainerOptions or CtrTrainer::Options.
template <typename Options>
bool ContinueCurve(const Assignment& a, uint64_t start_step,
                   const Progress& last, absl::Time* started,
                   Options* options) {
  options->start_step = start_step;
  if (start_step > a.start_step() && last.elapsed_s() > 0) {
    options->continues = last;
    options->continues->set_elapsed_s(
        absl::ToDoubleSeconds(absl::Now() - *started));
    options->continued_steps = start_step - a.start_step();
    return true;
  }
  *started = absl::Now();
  return false;
}

}  // namespace

absl::StatusOr<TrainTestData> Workerd::DataFor(const JobSpec& spec) {
  std::string key = absl::StrCat(
      spec.data().dataset(), "|", spec.data().data_dir(), "|",
      spec.data().max_train_examples(), "|", spec.data().synthetic_train(), "|",
      spec.data().synthetic_test(), "|", spec.seed());
  if (key == data_key_ && data_.train != nullptr) return data_;
  PS_ASSIGN_OR_RETURN(
      data_, LoadDataset(spec.data(), config_.workerd.data_dir(), spec.seed()));
  data_key_ = key;
  return data_;
}

absl::Status Workerd::TrainCtr(
    const Assignment& a, uint64_t start_step,
    const std::function<void(const Progress&)>& report, Progress* last,
    uint64_t* next_step) {
  PS_ASSIGN_OR_RETURN(std::unique_ptr<PsClient> dense, StartJobClient(a));
  absl::Cleanup forget_client = [this] { ForgetJobClient(); };
  PS_ASSIGN_OR_RETURN(
      std::unique_ptr<GrpcSparseClient> sparse,
      GrpcSparseClient::Create(JobClientOptions(a.job_id()), a, &security_));
  const WorkerdConfig& c = config_.workerd;
  CtrTrainer::Options options;
  options.job = a.spec();
  options.rank = a.rank();
  options.num_workers = a.num_workers();
  // After a re-placement: the refused step, with the rows and parameters
  // the new placement serves at it (nothing of it was applied anywhere).
  ContinueCurve(a, start_step, *last, &job_run_started_, &options);
  if (c.devices_size() > 0) {
    options.devices.assign(c.devices().begin(), c.devices().end());
  }
  options.threads_per_device = static_cast<int>(c.threads_per_device());
  options.tracer = &tracer_;
  options.leader = [this] { return session_->leads(); };
  options.overlap_data = !c.disable_overlap();
  options.data_plan = DataPlanFor(a);
  PS_ASSIGN_OR_RETURN(std::unique_ptr<CtrTrainer> trainer,
                      CtrTrainer::Create(options, dense.get(), sparse.get()));
  absl::Status status =
      trainer->Run(report, [this] { return session_->abort_requested(); });
  if (trainer->last_progress().step() >= last->step()) {
    *last = trainer->last_progress();
  }
  next_step_ = trainer->next_step();
  *next_step = next_step_;
  return status;
}

absl::StatusOr<std::unique_ptr<PsClient>> Workerd::StartJobClient(
    const Assignment& a, std::shared_ptr<GradientEncoder> encoder) {
  PsClientOptions options = JobClientOptions(a.job_id());
  options.encoder = std::move(encoder);
  PS_ASSIGN_OR_RETURN(std::unique_ptr<PsClient> client,
                      PsClient::Create(options, a, &security_));
  absl::MutexLock l(&mu_);
  job_client_ = client->async();
  if (stopping_.HasBeenNotified()) job_client_->CancelAll("workerd stopping");
  return client;
}

void Workerd::ForgetJobClient() {
  absl::MutexLock l(&mu_);
  job_client_ = nullptr;
}

absl::Status Workerd::Train(const Assignment& a,
                            const std::function<void(const Progress&)>& report,
                            Progress* last) {
  FollowOptions follow;
  follow.wait = [this](absl::Duration d) {
    return !stopping_.WaitForNotificationWithTimeout(d);
  };
  follow.aborted = [this] { return session_->abort_requested(); };
  std::shared_ptr<GradientEncoder> encoder;  // the runs' top-k residuals
  return RunFollowingPlacement(
      a,
      [&](const Assignment& current, uint64_t start, uint64_t* next) {
        // A ctr model's rows move too (Placement.table_shards).
        if (current.spec().model().has_ctr()) {
          return TrainCtr(current, start, report, last, next);
        }
        return TrainFrom(current, start, report, last, next, &encoder);
      },
      [this, &a](absl::Duration deadline) {
        return CurrentAssignment(a.job_id(), deadline);
      },
      follow);
}

absl::Status Workerd::TrainFrom(
    const Assignment& a, uint64_t start_step,
    const std::function<void(const Progress&)>& report, Progress* last,
    uint64_t* next_step, std::shared_ptr<GradientEncoder>* encoder) {
  PS_ASSIGN_OR_RETURN(std::unique_ptr<PsClient> client,
                      StartJobClient(a, *encoder));
  *encoder = client->async()->encoder();
  absl::Cleanup forget_client = [this] { ForgetJobClient(); };
  TrainerOptions options = TrainerOptionsFor(a, config_.workerd);
  if (ContinueCurve(a, start_step, *last, &job_run_started_, &options)) {
    // The parameters the last run ended with are those of the refused step.
    options.initial_params = std::move(carried_params_);
  }
  carried_params_ = nullptr;
  options.cpu_kernel_choices = kernel_choices_.get();
  options.tracer = &tracer_;
  options.leader = [this] { return session_->leads(); };
  options.data_plan = DataPlanFor(a);
  // A lab model reads no data (worker/trainer/lab_workload.h).
  if (!a.spec().model().has_lab()) {
    PS_ASSIGN_OR_RETURN(options.data, DataFor(a.spec()));
  }
  PS_ASSIGN_OR_RETURN(std::unique_ptr<Trainer> trainer,
                      Trainer::Create(options, client.get()));
  absl::Status status =
      trainer->Run(report, [this] { return session_->abort_requested(); });
  // After a re-placement the new trainer's first report may lag the last
  // one of the run before (which may count the refused step's compute).
  if (trainer->last_progress().step() >= last->step()) {
    *last = trainer->last_progress();
  }
  next_step_ = trainer->next_step();
  *next_step = next_step_;
  if (RefusedPlacement(status)) {
    carried_params_ =
        std::make_shared<std::vector<float>>(trainer->TakeParameters());
  }
  PsClientStats cs = client->stats();
  spdlog::info("job {}: {} requests, {} retries, {} MB sent, {} MB received",
               a.job_id(), cs.requests, cs.retries, cs.bytes_sent / 1e6,
               cs.bytes_received / 1e6);
  return status;
}

absl::StatusOr<Assignment> Workerd::CurrentAssignment(const std::string& job_id,
                                                      absl::Duration deadline) {
  GetAssignmentRequest req;
  req.set_worker_id(session_->worker_id());
  req.set_job_id(job_id);
  GetAssignmentResponse resp;
  std::unique_ptr<grpc::ClientContext> ctx = NewContext(deadline);
  {
    absl::MutexLock l(&mu_);
    if (stopping_.HasBeenNotified()) {
      return absl::CancelledError("workerd stopping");
    }
    poll_context_ = ctx.get();  // Stop cancels it
  }
  absl::Status s = FromGrpcStatus(stub_->GetAssignment(ctx.get(), req, &resp));
  {
    absl::MutexLock l(&mu_);
    poll_context_ = nullptr;
  }
  PS_RETURN_IF_ERROR(s);
  if (!resp.has_assignment()) {
    return absl::UnavailableError("GetAssignment answered no assignment");
  }
  return std::move(*resp.mutable_assignment());
}

}  // namespace ps
