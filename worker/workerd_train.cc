// Workerd's training of one assignment: the parameter client, the data and
// the trainer (Train; TrainCtr for a ctr model). Registration, polling and
// reporting: workerd.cc.
#include <memory>
#include <string>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "spdlog/spdlog.h"
#include "worker/client/ps_client.h"
#include "worker/client/sparse_client.h"
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
    const Assignment& a, PsClient* dense,
    const std::function<void(const Progress&)>& report, Progress* last) {
  PS_ASSIGN_OR_RETURN(
      std::unique_ptr<GrpcSparseClient> sparse,
      GrpcSparseClient::Create(JobClientOptions(), a, &security_));
  const WorkerdConfig& c = config_.workerd;
  CtrTrainer::Options options;
  options.job = a.spec();
  options.rank = a.rank();
  options.num_workers = a.num_workers();
  options.start_step = a.start_step();
  if (c.devices_size() > 0) {
    options.devices.assign(c.devices().begin(), c.devices().end());
  }
  options.threads_per_device = static_cast<int>(c.threads_per_device());
  options.tracer = &tracer_;
  options.leader = [this] { return session_->leads(); };
  options.overlap_data = !c.disable_overlap();
  options.data_plan = DataPlanFor(a);
  PS_ASSIGN_OR_RETURN(std::unique_ptr<CtrTrainer> trainer,
                      CtrTrainer::Create(options, dense, sparse.get()));
  absl::Status status =
      trainer->Run(report, [this] { return session_->abort_requested(); });
  *last = trainer->last_progress();
  next_step_ = trainer->next_step();
  return status;
}

absl::Status Workerd::Train(const Assignment& a,
                            const std::function<void(const Progress&)>& report,
                            Progress* last) {
  PS_ASSIGN_OR_RETURN(std::unique_ptr<PsClient> client,
                      PsClient::Create(JobClientOptions(), a, &security_));
  {
    absl::MutexLock l(&mu_);
    job_client_ = client->async();
    if (stopping_.HasBeenNotified()) job_client_->CancelAll("workerd stopping");
  }
  absl::Cleanup forget_client = [this] {
    absl::MutexLock l(&mu_);
    job_client_ = nullptr;
  };
  if (a.spec().model().has_ctr()) {
    return TrainCtr(a, client.get(), report, last);
  }
  TrainerOptions options = TrainerOptionsFor(a, config_.workerd);
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
  *last = trainer->last_progress();
  next_step_ = trainer->next_step();
  PsClientStats cs = client->stats();
  spdlog::info("job {}: {} requests, {} retries, {} MB sent, {} MB received",
               a.job_id(), cs.requests, cs.retries, cs.bytes_sent / 1e6,
               cs.bytes_received / 1e6);
  return status;
}

}  // namespace ps
