#include "tests/testing/cluster_fixture.h"

#include <filesystem>
#include <iostream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "common/text_proto.h"
#include "tests/checksum.h"
#include "tests/job_parameters.h"

namespace ps {
namespace {

// The first jobN.pbtxt not yet in the cluster's folder, holding `spec`.
absl::StatusOr<std::string> WriteSpec(const LocalCluster& cluster,
                                      const std::string& spec) {
  std::string path;
  for (int n = 1;; ++n) {
    path = absl::StrCat(cluster.dir(), "/job", n, ".pbtxt");
    if (!std::filesystem::exists(path)) break;
  }
  PS_RETURN_IF_ERROR(WriteFileAtomically(path, spec));
  return path;
}

}  // namespace

absl::StatusOr<std::string> SubmitJob(const LocalCluster& cluster,
                                      const std::string& spec) {
  PS_ASSIGN_OR_RETURN(std::string path, WriteSpec(cluster, spec));
  PS_ASSIGN_OR_RETURN(CommandResult r, cluster.Psctl({"submit", path}));
  const std::string prefix = "submitted ";
  if (r.exit_code != 0 || r.out.rfind(prefix, 0) != 0) {
    return absl::UnavailableError(absl::StrCat(
        "psctl submit ", path, ": exit ", r.exit_code, ": ", r.out, r.err));
  }
  std::string job = r.out.substr(prefix.size());
  return job.substr(0, job.find_first_of(" \n"));
}

absl::StatusOr<CommandResult> RunJob(const LocalCluster& cluster,
                                     const std::string& spec,
                                     absl::Duration timeout) {
  PS_ASSIGN_OR_RETURN(std::string path, WriteSpec(cluster, spec));
  return cluster.Psctl(
      {"submit", path, "--wait",
       absl::StrCat("--timeout=", absl::ToInt64Seconds(timeout))},
      timeout + absl::Seconds(30));
}

absl::StatusOr<JobStatus> WaitForJob(
    const LocalCluster& cluster, const std::string& job,
    const std::function<bool(const JobStatus&)>& done, absl::Duration timeout,
    WhileUnreachable unreachable, JobStatus* last) {
  const absl::Time deadline = absl::Now() + timeout;
  JobStatus latest;
  while (absl::Now() < deadline) {
    bool unknown = false;
    absl::StatusOr<JobStatus> js = ReadJobStatus(cluster, job, &unknown);
    if (unknown) return absl::NotFoundError(js.status().message());
    if (!js.ok()) {
      if (unreachable == WhileUnreachable::kRetry) continue;
      return js.status();
    }
    latest = *std::move(js);
    if (last != nullptr) *last = latest;
    if (done(latest) || JobEnded(latest)) return latest;
  }
  return absl::DeadlineExceededError(
      absl::StrCat("job ", job, " still at step ", latest.progress().step(),
                   " after ", absl::FormatDuration(timeout)));
}

uint64_t JobStep(const LocalCluster& cluster, const std::string& job) {
  absl::StatusOr<JobStatus> status = ReadJobStatus(cluster, job);
  return status.ok() ? status->progress().step() : 0;
}

absl::StatusOr<std::vector<std::string>> ShardAddresses(
    const LocalCluster& cluster, int shards) {
  std::vector<std::string> addresses;
  for (int i = 0; i < shards; ++i) {
    PS_ASSIGN_OR_RETURN(
        std::string address,
        WaitForFile(absl::StrCat(cluster.dir(), "/s", i, ".addr"),
                    absl::Seconds(5)));
    addresses.push_back(std::move(address));
  }
  return addresses;
}

absl::StatusOr<FinishedJob> ReadFinishedJob(
    const LocalCluster& cluster, const std::string& job,
    const std::vector<std::string>& addresses) {
  PS_ASSIGN_OR_RETURN(JobParameters params,
                      ReadJobParameters(cluster, job, addresses));
  FinishedJob finished;
  finished.status = std::move(params.status);
  finished.checksum = ParamChecksum(params.values);
  for (const std::string& address : addresses) {
    PS_ASSIGN_OR_RETURN(JobStats stats, ReadShardJobStats(address, job));
    finished.shard_stats.push_back(std::move(stats));
  }
  return finished;
}

absl::Status AwaitLog(const LocalCluster& cluster, const std::string& name,
                      const std::string& line, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (cluster.Log(name).find(line) == std::string::npos) {
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          name, " never logged \"", line, "\"\n", cluster.Log(name)));
    }
    absl::SleepFor(absl::Milliseconds(20));  // a poll, not a synchronization
  }
  return absl::OkStatus();
}

absl::StatusOr<RunningJob> StartJobUntilStep(const LocalCluster& cluster,
                                             const std::string& spec,
                                             int shards, uint64_t step,
                                             absl::Duration timeout) {
  RunningJob job;
  PS_ASSIGN_OR_RETURN(job.id, SubmitJob(cluster, spec));
  PS_ASSIGN_OR_RETURN(job.addresses, ShardAddresses(cluster, shards));
  PS_ASSIGN_OR_RETURN(JobStatus status, WaitForJob(
                                            cluster, job.id,
                                            [step](const JobStatus& js) {
                                              return js.state() == RUNNING &&
                                                     js.progress().step() >=
                                                         step;
                                            },
                                            timeout));
  if (status.state() != RUNNING) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job ", job.id, " ended at step ", status.progress().step(),
        " before step ", step, ": ", status.reason()));
  }
  return job;
}

std::string ReplicatedMlpJob(const std::string& name, int replication,
                             int epochs, int eval_every) {
  return absl::StrCat(
      R"pb(name: ")pb", name,
      R"pb("
           model { mlp { input_dim: 784 hidden: 32 num_classes: 10 } }
           data { dataset: "synthetic" batch_size: 32 synthetic_train: 4096
                  synthetic_test: 512
                  epochs:)pb",
      epochs, R"pb(
        }
        optimizer { kind: SGD learning_rate: 0.05 momentum: 0.9 }
        consistency { mode: BSP step_deadline_ms: 30000 }
        num_workers: 2
        partition_bytes: 16384
        seed: 11
        eval_every: )pb",
      eval_every, "\nreplication: ", replication, "\n");
}

std::string AsyncMlpJob(const std::string& name, const std::string& consistency,
                        int epochs, const std::string& extra) {
  return absl::StrCat(
      "name: \"", name, "\"\n",
      "model { mlp { input_dim: 784 hidden: 32 num_classes: 10 } }\n",
      "data { dataset: \"synthetic\" batch_size: 32 synthetic_train: 4096 ",
      "synthetic_test: 512 epochs: ", epochs, " }\n",
      "optimizer { kind: SGD learning_rate: 0.02 }\n", "consistency { ",
      consistency, " step_deadline_ms: 30000 }\n",
      "num_workers: 2 partition_bytes: 16384 seed: 11 eval_every: 400\n", extra,
      "\n");
}

std::vector<AsyncMode> AsyncModes() {
  return {{"asp", "mode: ASP"}, {"ssp", "mode: SSP staleness: 4"}};
}

std::string AsyncModeName(const ::testing::TestParamInfo<AsyncMode>& info) {
  return info.param.name;
}

absl::Status KillAndAwaitFailover(LocalCluster& cluster, int s, uint64_t epoch,
                                  absl::Duration timeout) {
  cluster.shard(s).Kill();
  return AwaitLog(cluster, "psd0",
                  absl::StrCat("shard ", s, " failed over at epoch ", epoch),
                  timeout);
}

void RunFor(const LocalCluster& cluster, const std::string& job,
            uint64_t steps) {
  const uint64_t at = JobStep(cluster, job);
  absl::StatusOr<JobStatus> later = WaitForJob(
      cluster, job,
      [&](const JobStatus& s) { return s.progress().step() >= at + steps; },
      absl::Seconds(120));
  EXPECT_TRUE(later.ok()) << later.status() << "\n" << cluster.Log("worker0");
  if (!later.ok()) return;
  EXPECT_EQ(later->state(), RUNNING)
      << "the job ended within " << steps << " steps of step " << at << ": "
      << later->reason() << "\n--- worker0 ---\n"
      << cluster.Log("worker0");
}

absl::StatusOr<CommandResult> ScaleShards(const LocalCluster& cluster,
                                          const std::string& job,
                                          const std::string& arg) {
  return cluster.Psctl({"scale", job, arg});
}

bool MoveEnded(const ReshardStatus& status) {
  const std::string& phase = status.phase();
  return phase == "done" || phase.rfind("aborted", 0) == 0 ||
         phase.rfind("failed", 0) == 0;
}

ReshardStatus MoveAndAwait(const LocalCluster& cluster, const std::string& job,
                           const std::string& arg) {
  absl::StatusOr<CommandResult> r = ScaleShards(cluster, job, arg);
  EXPECT_TRUE(r.ok()) << r.status();
  if (!r.ok()) return ReshardStatus();
  EXPECT_EQ(r->exit_code, 0) << r->out << r->err;
  JobStatus last;
  absl::StatusOr<JobStatus> s = WaitForJob(
      cluster, job, [](const JobStatus& js) { return MoveEnded(js.reshard()); },
      absl::Seconds(60), WhileUnreachable::kFail, &last);
  EXPECT_TRUE(s.ok()) << s.status() << "\n" << cluster.Log("psd0");
  std::cout << "psctl scale " << job << " " << arg << ": "
            << last.reshard().ShortDebugString() << std::endl;
  return last.reshard();
}

absl::StatusOr<JobStatus> AwaitSuccess(const LocalCluster& cluster,
                                       const std::string& job,
                                       absl::Duration timeout,
                                       const std::vector<std::string>& logs) {
  absl::StatusOr<JobStatus> end = WaitForJob(
      cluster, job, [](const JobStatus&) { return false; }, timeout);
  EXPECT_TRUE(end.ok()) << end.status();
  if (end.ok() && end->state() != SUCCEEDED) {
    std::string text;
    for (const std::string& name : logs) {
      absl::StrAppend(&text, "\n--- ", name, " ---\n", cluster.Log(name));
    }
    ADD_FAILURE() << "job " << job << " ended " << JobState_Name(end->state())
                  << ": " << end->reason() << text;
  }
  return end;
}

LocalClusterOptions ThreeShards() {
  LocalClusterOptions o;
  o.shards = 3;
  return o;
}

LocalClusterOptions ThreeShardsOutlastingFailover() {
  LocalClusterOptions o = ThreeShards();
  o.workerd_extra = "rpc_max_attempts: 30";
  return o;
}

void ClusterTest::SetUp() {
  dir_ =
      TestDir(::testing::UnitTest::GetInstance()->current_test_info()->name());
  cluster_ = std::make_unique<LocalCluster>(dir_, ClusterOptions());
  ASSERT_TRUE(cluster_->Start().ok());
}

void ClusterTest::TearDown() {
  absl::Status s = cluster_->Stop();
  EXPECT_TRUE(s.ok()) << s;
}

std::string ClusterTest::Submit(const std::string& spec) {
  absl::StatusOr<std::string> job = SubmitJob(*cluster_, spec);
  EXPECT_TRUE(job.ok()) << job.status();
  return job.ok() ? *job : "";
}

bool ClusterTest::WaitFor(const std::string& job,
                          const std::function<bool(const JobStatus&)>& done,
                          absl::Duration timeout, JobStatus* last) {
  absl::StatusOr<JobStatus> js =
      WaitForJob(*cluster_, job, done, timeout, WhileUnreachable::kRetry, last);
  return js.ok() && done(*js);
}

}  // namespace ps
