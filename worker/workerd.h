// Workerd: the worker daemon's logic. Registers with the coordinator,
// heartbeats, long-polls for an assignment, runs the job with the worker
// engine (Trainer over PsClient), reports progress, and goes back to wait.
//
//   PS_ASSIGN_OR_RETURN(LoadedWorkerdConfig config, LoadWorkerdConfig(path));
//   Workerd workerd(config);
//   std::thread t([&] { status = workerd.Run(); });
//   ... SIGTERM ...  workerd.Stop();  t.join();
//
// Life cycle:
//
//   Run() --> connecting --register ok--> idle --assignment--> training
//                ^  retry with backoff      ^                     |
//                |                          +--- done / failed ---+
//                +-- coordinator forgot us (heartbeat says reregister)
//   training: a shard refused the placement epoch (the job was re-placed)
//     --> GetAssignment(job_id) --> training again from the refused step.
//   Stop() from any state: the current step finishes, Run() returns OK.
//   With leave_on_term, Stop() does not cancel the step in flight, and Run()
//   unregisters (Unregister RPC, naming the first step not run) before it
//   returns: the coordinator drops the worker at once.
#ifndef WORKER_WORKERD_H_
#define WORKER_WORKERD_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "common/config.h"
#include "common/metrics_server.h"
#include "common/security.h"
#include "common/trace_recorder.h"
#include "proto/coordinator.grpc.pb.h"
#include "worker/backend/cpu/kernel_choices.h"
#include "worker/client/async_ps_client.h"
#include "worker/client/shard_relocator.h"
#include "worker/coordinator_session.h"
#include "worker/data/dataset.h"
#include "worker/trainer/elastic_batches.h"
#include "worker/worker_metrics.h"

namespace ps {

class AsyncPsClient;

class PsClient;

// Checks every device of `config` against this build and machine before
// anything starts: "gpu:N" needs CUDA in the build and N below the number of
// visible GPUs. kFailedPrecondition naming the first bad device, e.g.
// `devices[1] "gpu:0": no CUDA devices visible`. The second form takes the
// build's answers (CudaBuilt(), GpuCount()) as arguments, for tests.
absl::Status CheckDevices(const WorkerdConfig& config);
absl::Status CheckDevices(const WorkerdConfig& config, bool cuda_built,
                          int gpu_count);

// Run() on one thread; Stop() from any thread.
class Workerd {
 public:
  explicit Workerd(LoadedWorkerdConfig config);
  ~Workerd();

  // With metrics_address set: serves /metrics (WorkerMetrics) there and
  // writes metrics_address_file; call before Run (without it the progress
  // is not exported). INVALID_ARGUMENT naming metrics_address when its port
  // cannot be bound. OK and nothing done without metrics_address.
  absl::Status StartMetrics();

  // Serves jobs until Stop() (OK) or, with max_jobs, until that many jobs
  // ended. Errors only for what cannot be retried (bad security files).
  absl::Status Run();
  void Stop();

 private:
  absl::Status Connect();
  // Connect's last step: the session (registration, heartbeats, leader and
  // abort flags) over stub_.
  void StartSession();
  // Each heartbeat answer, on the session's thread: the job's trace window.
  void OnHeartbeat(const HeartbeatResponse& resp);
  // Runs one assignment to its end and reports the outcome.
  void RunJob(const Assignment& assignment);
  // Tells the coordinator this worker leaves (Unregister naming next_step_
  // and `reason`): at Run's end with leave_on_term, and after a job that a
  // scale down asked it to leave (HeartbeatResponse.leave_job).
  void Leave(const std::string& reason);
  // Sends one progress report; an answer that aborts the job sets
  // abort_job_ and abort_reason_.
  void SendProgress(const ProgressReport& report);
  // RunJob's training: client, data, trainer; `report` gets the progress
  // reports and *last the final one. A job whose dense chunks are re-placed
  // while it trains (a shard refuses the placement epoch, ABORTED) goes on
  // with the coordinator's new assignment from the refused step
  // (worker/placement_follower.h); a ctr job is never re-placed.
  absl::Status Train(const Assignment& assignment,
                     const std::function<void(const Progress&)>& report,
                     Progress* last);
  // One run of a model trained by Trainer under `assignment` from
  // `start_step`, with its own parameter client; `*next_step` gets the
  // trainer's next_step, *last its last progress unless that is behind.
  // `*encoder` (the job's gradient encoder: top-k residuals) is taken over
  // from the run before and left for the next (PsClientOptions::encoder).
  absl::Status TrainFrom(const Assignment& assignment, uint64_t start_step,
                         const std::function<void(const Progress&)>& report,
                         Progress* last, uint64_t* next_step,
                         std::shared_ptr<GradientEncoder>* encoder);
  // A parameter client for `assignment`, set as job_client_ (what Stop
  // cancels; already cancelled when stopping). ForgetJobClient clears it
  // before the client goes. `encoder`: PsClientOptions::encoder.
  absl::StatusOr<std::unique_ptr<PsClient>> StartJobClient(
      const Assignment& assignment,
      std::shared_ptr<GradientEncoder> encoder = nullptr);
  void ForgetJobClient();
  // This worker's assignment in the running job `job_id` now, with the
  // job's current placement (GetAssignment with job_id; Stop cancels it).
  // NOT_FOUND: the worker holds no rank in it.
  absl::StatusOr<Assignment> CurrentAssignment(const std::string& job_id,
                                               absl::Duration deadline);
  // A ctr model's run from `start_step`: the dense MLP and the table's rows
  // through new clients (worker/trainer/ctr_trainer.h); `*next_step` the
  // first step it did not complete.
  absl::Status TrainCtr(const Assignment& assignment, uint64_t start_step,
                        const std::function<void(const Progress&)>& report,
                        Progress* last, uint64_t* next_step);
  absl::StatusOr<TrainTestData> DataFor(const JobSpec& spec);
  // An elastic data job's plan of `step` (GetDataPlan, workerd_data_plan.cc),
  // asked again while the step is not planned yet (a joiner waits for the
  // job's workers to reach it), until the job is aborted or a bound passes.
  // A plan that leaves this rank out sets scaled_down_.
  absl::StatusOr<GetDataPlanResponse> AskDataPlan(uint64_t step,
                                                  uint64_t train_examples);
  // The trainers' data_plan for `assignment`: AskDataPlan for an elastic
  // data job, else null (a fixed split).
  ElasticBatches::AskPlan DataPlanFor(const Assignment& assignment);
  std::unique_ptr<grpc::ClientContext> NewContext(
      absl::Duration deadline) const;
  // Job `job_id`'s parameter client options, with shards looked for at the
  // coordinator (GetShardAddresses for that job: a failed shard's chunks
  // are served where the job holds their backups) when they keep failing.
  PsClientOptions JobClientOptions(const std::string& job_id);
  // Step timelines: uploads tracer_'s spans to the coordinator once its
  // window is complete, or (job_over) whatever the ended job recorded;
  // each window once. Called by the heartbeat thread and RunJob.
  void MaybeUploadTrace(bool job_over) ABSL_LOCKS_EXCLUDED(trace_mu_);

  const LoadedWorkerdConfig config_;
  std::string name_;
  // cpu_kernels "auto"'s choices (WorkerdConfig.cpu_kernel_choices_file),
  // shared by every job's replicas.
  const std::unique_ptr<KernelChoices> kernel_choices_;
  Security security_;
  std::string coordinator_address_;
  std::unique_ptr<Coordinator::Stub> stub_;
  absl::Notification stopping_;

  absl::Mutex mu_;  // acquired before the session's
  // Registration, heartbeats, the running job, whether this worker leads
  // it (it evaluates the test set) and whether it was aborted. Set once by
  // Connect, under mu_ (Stop reads it there) and before the heartbeats and
  // the jobs, which use it without the lock.
  std::unique_ptr<CoordinatorSession> session_;
  // What Stop cancels so that it takes effect at once, not after a long
  // poll or an RPC's retries: the GetAssignment call in flight and the
  // running job's parameter client. Null when none.
  grpc::ClientContext* poll_context_ ABSL_GUARDED_BY(mu_) = nullptr;
  AsyncPsClient* job_client_ ABSL_GUARDED_BY(mu_) = nullptr;

  // The progress reports feed `metrics_`; `metrics_server_` serves it
  // (null without metrics_address) with `metrics_security_`.
  std::shared_ptr<WorkerMetrics> metrics_ = std::make_shared<WorkerMetrics>();
  Security metrics_security_;
  std::unique_ptr<MetricsServer> metrics_server_;

  // The running job's step timeline: its window comes with heartbeat
  // answers; the trainer and the parameter client record into it.
  TraceRecorder tracer_;
  absl::Mutex trace_mu_;  // serializes uploads; acquired before mu_
  TraceWindow trace_uploaded_ ABSL_GUARDED_BY(trace_mu_);

  // The first step the last job did not run (its trainer's next_step);
  // Run's thread only.
  uint64_t next_step_ = 0;
  // After a run a shard refused for its placement epoch: its parameters
  // (those of the refused step), for the next run instead of a Pull. Used
  // on the job's thread only.
  std::shared_ptr<std::vector<float>> carried_params_;
  // When the job's first run started on this worker (its curve's elapsed
  // time counts from there across re-placements). Job's thread only.
  absl::Time job_run_started_;
  // A heartbeat answered leave_job for the running job (set by the
  // heartbeat thread, taken by RunJob).
  std::atomic<bool> scaled_down_{false};
  // Heartbeats tell it the coordinator's replica epoch; when that moves,
  // the job's clients look the shards up now.
  const std::shared_ptr<RelocateSignal> relocate_ =
      std::make_shared<RelocateSignal>();

  // Data sets kept across jobs: (dataset, data_dir, seed) -> data.
  std::string data_key_;
  TrainTestData data_;
};

}  // namespace ps

#endif  // WORKER_WORKERD_H_
