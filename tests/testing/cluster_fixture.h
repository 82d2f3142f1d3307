// What the multi-process tests share around a LocalCluster: a gtest fixture
// that runs one cluster per test, and a job's round trip through psctl
// (submit, poll its status until a condition holds, read the finished job
// back from the shards).
//
//   class MyTest : public ClusterTest {};
//   TEST_F(MyTest, Trains) {
//     absl::StatusOr<std::string> job = SubmitJob(*cluster_, kJobText);
//     ASSERT_TRUE(job.ok()) << job.status();
//     absl::StatusOr<JobStatus> end = WaitForJob(
//         *cluster_, *job, [](const JobStatus&) { return false; },
//         absl::Seconds(120));
//     ASSERT_TRUE(end.ok()) << end.status();
//     EXPECT_EQ(end->state(), SUCCEEDED);
//   }
//
// Every wait has a deadline; polls are one psctl call per round, no sleeps.
// Not thread-safe: one test thread drives a cluster.
#ifndef TESTS_TESTING_CLUSTER_FIXTURE_H_
#define TESTS_TESTING_CLUSTER_FIXTURE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "proto/coordinator.pb.h"
#include "proto/ps.pb.h"
#include "tests/local_cluster.h"
#include "tests/subprocess.h"

namespace ps {

// Writes `spec` (a JobSpec in text format) to a new file jobN.pbtxt in the
// cluster's folder and runs `psctl submit FILE`; returns the job id psctl
// printed ("submitted job-000001 ..."). A psctl that fails or prints
// something else is an error carrying its output.
absl::StatusOr<std::string> SubmitJob(const LocalCluster& cluster,
                                      const std::string& spec);

// Like SubmitJob, with `psctl submit FILE --wait --timeout=SECONDS`: returns
// psctl's exit code and output once the job ended, psctl gave up after
// `timeout`, or (30 s later) its own deadline passed.
absl::StatusOr<CommandResult> RunJob(const LocalCluster& cluster,
                                     const std::string& spec,
                                     absl::Duration timeout);

// What WaitForJob does with a round in which psctl cannot read the status
// (other than "unknown job", which always ends the wait with NOT_FOUND).
enum class WhileUnreachable {
  kFail,   // end the wait with psctl's error
  kRetry,  // poll again (a coordinator that restarts)
};

// Polls `psctl status JOB --json` until `done` holds or the job ended
// (SUCCEEDED, FAILED, CANCELLED; it never changes again) and returns that
// status; DEADLINE_EXCEEDED naming the last step after `timeout`. `last`,
// when set, receives every status read, so it holds the last one also after
// an error.
absl::StatusOr<JobStatus> WaitForJob(
    const LocalCluster& cluster, const std::string& job,
    const std::function<bool(const JobStatus&)>& done, absl::Duration timeout,
    WhileUnreachable unreachable = WhileUnreachable::kFail,
    JobStatus* last = nullptr);

// The job's last reported step (psctl status --json); 0 when psctl cannot
// tell.
uint64_t JobStep(const LocalCluster& cluster, const std::string& job);

// The listening "host:port" of shards 0 .. shards-1, read from their address
// files (waiting up to 5 s for each).
absl::StatusOr<std::vector<std::string>> ShardAddresses(
    const LocalCluster& cluster, int shards);

// A job that ended with its parameters still on the shards, read back.
struct FinishedJob {
  JobStatus status;       // as psctl status printed it before the pull
  uint64_t checksum = 0;  // ParamChecksum of the parameters, in spec order
  std::vector<JobStats> shard_stats;  // the job's stats, by shard
};

// Reads `job` from the shards at `addresses` (one per shard, in shard
// order): its parameters at its reported step and each shard's stats of it.
absl::StatusOr<FinishedJob> ReadFinishedJob(
    const LocalCluster& cluster, const std::string& job,
    const std::vector<std::string>& addresses);

// Polls the log NAME.log of `cluster` (psd0: the coordinator's) until it
// holds `line`; DEADLINE_EXCEEDED carrying the log after `timeout`.
absl::Status AwaitLog(const LocalCluster& cluster, const std::string& name,
                      const std::string& line, absl::Duration timeout);

// A job running on a started cluster, and where its shards listen.
struct RunningJob {
  std::string id;
  std::vector<std::string> addresses;  // by shard id
};

// Submits `spec` to `cluster` (with `shards` shards) and waits up to
// `timeout` until the job runs and reports step >= `step`;
// FAILED_PRECONDITION when it ended before.
absl::StatusOr<RunningJob> StartJobUntilStep(const LocalCluster& cluster,
                                             const std::string& spec,
                                             int shards, uint64_t step,
                                             absl::Duration timeout);

// The replicated-shard tests' job: a synthetic BSP MLP (784-32-10, 4096
// examples, 2 workers x 32: 64 steps an epoch, SGD with momentum, seed 11)
// named `name`, with `replication` copies, `epochs` epochs and an
// evaluation every `eval_every` steps.
std::string ReplicatedMlpJob(const std::string& name, int replication,
                             int epochs = 3, int eval_every = 20);

// The asynchronous tests' job: a synthetic MLP (784-32-10, 4096 examples,
// 2 workers x 32: 64 steps per worker and epoch, SGD at 0.02, seed 11)
// named `name`, with `consistency` the body of its consistency block (and
// step_deadline_ms 30000), `epochs` epochs and `extra` more spec fields.
std::string AsyncMlpJob(const std::string& name, const std::string& consistency,
                        int epochs, const std::string& extra);

// The modes the asynchronous tests run in: ASP, and SSP with staleness 4.
struct AsyncMode {
  const char* name;         // the test's directory
  const char* consistency;  // the spec's consistency fields
};
std::vector<AsyncMode> AsyncModes();
// The test name's suffix: the mode's name.
std::string AsyncModeName(const ::testing::TestParamInfo<AsyncMode>& info);

// Replicated jobs: SIGKILLs shard `s` and waits up to `timeout` for the
// coordinator (psd0) to log that it failed it over at `epoch`.
absl::Status KillAndAwaitFailover(LocalCluster& cluster, int s, uint64_t epoch,
                                  absl::Duration timeout);

// Waits up to 120 s until `job` reports `steps` more steps than it does
// now, running: a test failure naming the reason (with worker0's log)
// otherwise.
void RunFor(const LocalCluster& cluster, const std::string& job,
            uint64_t steps);

// Live re-placement (`psctl scale JOB --shards=N` / `--drain=K`): `psctl
// scale JOB ARG`, its exit code and output.
absl::StatusOr<CommandResult> ScaleShards(const LocalCluster& cluster,
                                          const std::string& job,
                                          const std::string& arg);

// Whether a move is over: done, aborted or failed.
bool MoveEnded(const ReshardStatus& status);

// `psctl scale JOB ARG`, which must exit 0 (a test failure otherwise), then
// waits up to 60 s for the move to end; the job's last ReshardStatus
// (printed).
ReshardStatus MoveAndAwait(const LocalCluster& cluster, const std::string& job,
                           const std::string& arg);

// Waits up to `timeout` for `job` to end and returns its status; a test
// failure carrying the logs named in `logs` unless it SUCCEEDED.
absl::StatusOr<JobStatus> AwaitSuccess(
    const LocalCluster& cluster, const std::string& job, absl::Duration timeout,
    const std::vector<std::string>& logs = {"psd0", "worker0"});

// A cluster of 3 shards (and 2 workers), the re-placement and replicated
// tests' (a job on 2 grows to 3; a job with 2 copies survives a failover).
LocalClusterOptions ThreeShards();
// ThreeShards whose workers try each request up to 30 times (backoff capped
// at 2 s): enough to outlast a shard's failover.
LocalClusterOptions ThreeShardsOutlastingFailover();

// A fixture with one LocalCluster per test, in a fresh folder named after
// the test: started in SetUp (a failure there fails the test), stopped in
// TearDown (a process that does not exit cleanly fails the test).
class ClusterTest : public ::testing::Test {
 protected:
  // The cluster each test runs on (default: 2 shards, 2 workers).
  virtual LocalClusterOptions ClusterOptions() const { return {}; }

  void SetUp() override;
  void TearDown() override;

  // SubmitJob that reports a failure (non-fatally) and then returns "".
  std::string Submit(const std::string& spec);

  // WaitForJob retrying unreachable rounds: true when `done` holds for the
  // status it returned, which is left in *last (so is the last one read
  // when the wait fails).
  bool WaitFor(const std::string& job,
               const std::function<bool(const JobStatus&)>& done,
               absl::Duration timeout, JobStatus* last);

  std::string dir_;
  std::unique_ptr<LocalCluster> cluster_;
};

}  // namespace ps

#endif  // TESTS_TESTING_CLUSTER_FIXTURE_H_
