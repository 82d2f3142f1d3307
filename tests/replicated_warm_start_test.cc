// Replicated jobs warm-started (docs/OPERATIONS.md "Replication" and "Warm
// start"): psd processes and workerd train a synthetic BSP MLP with
// replication 2 on 3 shards, without checkpoints, and each test ends
// SUCCEEDED bitwise identical to an undisturbed run of the same job without
// replicas and from the same start.
// From an .npz file: every copy, primary and backup, reads the file at the
// start. Then the file is deleted, shard 1 (a primary) is SIGKILLed and
// failed over (shard 2 serves its chunks from the backups), and restarted:
// the coordinator registers the job on it again as a joining copy, which
// does not read the file but copies its replicas from the live ones. Once
// it caught up shard 2 is SIGKILLed, so that shard 1 serves its own chunks
// again from the copy.
// From a job (init.from_job): the source's chunks are on the primaries'
// shards only, which send them to their backups before any answer; shard 1
// is SIGKILLed mid-job and shard 2 serves its chunks from those copies.
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/text_proto.h"
#include "core/init.h"
#include "core/model_spec.h"
#include "core/npz_writer.h"
#include "gtest/gtest.h"
#include "proto/coordinator.pb.h"
#include "proto/job.pb.h"
#include "tests/job_parameters.h"
#include "tests/local_cluster.h"
#include "tests/testing/cluster_fixture.h"

namespace ps {
namespace {

// 4096 examples / (2 workers x 32) = 64 steps per epoch: enough steps that
// the job still runs after a failover, a restart and a rejoin.
constexpr uint64_t kEpochs = 40;
constexpr uint64_t kTotalSteps = 64 * kEpochs;
constexpr uint64_t kKillAfterStep = 30;
// The file's values: the job's tensors initialized with another seed than
// the job's (11), so that the start from the file shows in the result.
constexpr uint64_t kFileSeed = 7;

std::string JobText(int replication, const std::string& file) {
  return absl::StrCat(
      ReplicatedMlpJob("replicated-warm", replication, kEpochs, 200),
      "init { from_file: \"", file, "\" }\n");
}

// The job's tensors, initialized from kFileSeed, written to `path`.
void WriteModelFile(const std::string& path) {
  JobSpec spec;
  ASSERT_TRUE(ParseTextProto(JobText(1, path), "job", &spec).ok());
  std::vector<NpyArray> arrays;
  for (const TensorSpec& t : ModelTensors(spec.model())) {
    uint64_t n = 1;
    for (uint64_t d : t.shape()) n *= d;
    std::vector<float> values(n);
    ASSERT_TRUE(InitValues(kFileSeed, t, 0, absl::MakeSpan(values)).ok());
    arrays.push_back(NpyArray::Float32(
        t.name(), std::vector<uint64_t>(t.shape().begin(), t.shape().end()),
        values));
  }
  absl::Status written = WriteNpzFile(path, arrays);
  ASSERT_TRUE(written.ok()) << written;
}

void ExpectLog(const LocalCluster& cluster, const std::string& line) {
  absl::Status st = AwaitLog(cluster, "psd0", line, absl::Seconds(60));
  ASSERT_TRUE(st.ok()) << st;
}

// Waits for the end, SUCCEEDED after every step, and reads the parameters
// through `live` (by shard: where its chunks are served now).
void Finish(LocalCluster& cluster, const std::string& job,
            const std::vector<std::string>& live, uint64_t* checksum,
            uint64_t total_steps = kTotalSteps) {
  absl::StatusOr<JobStatus> end = WaitForJob(
      cluster, job, [](const JobStatus&) { return false; }, absl::Seconds(300));
  ASSERT_TRUE(end.ok()) << end.status();
  ASSERT_EQ(end->state(), SUCCEEDED)
      << end->reason() << "\n--- psd0 ---\n"
      << cluster.Log("psd0") << "\n--- psd1 ---\n"
      << cluster.Log("psd1");
  EXPECT_EQ(end->progress().step(), total_steps);
  for (size_t s = 0; s < live.size(); ++s) {
    ASSERT_TRUE(
        WriteFileAtomically(absl::StrCat(cluster.dir(), "/s", s, ".addr"),
                            live[s] + "\n")
            .ok());
  }
  absl::StatusOr<FinishedJob> finished = ReadFinishedJob(cluster, job, live);
  ASSERT_TRUE(finished.ok()) << finished.status();
  *checksum = finished->checksum;
  (void)cluster.Stop();  // the killed shards exit by SIGKILL: reported
}

// The same job without replicas, undisturbed.
void Undisturbed(uint64_t* checksum) {
  LocalCluster cluster(TestDir("undisturbed"), ThreeShardsOutlastingFailover());
  ASSERT_TRUE(cluster.Start().ok());
  const std::string file = cluster.dir() + "/model.npz";
  ASSERT_NO_FATAL_FAILURE(WriteModelFile(file));
  absl::StatusOr<std::string> job = SubmitJob(cluster, JobText(1, file));
  ASSERT_TRUE(job.ok()) << job.status();
  absl::StatusOr<std::vector<std::string>> addresses =
      ShardAddresses(cluster, 3);
  ASSERT_TRUE(addresses.ok()) << addresses.status();
  ASSERT_NO_FATAL_FAILURE(Finish(cluster, *job, *addresses, checksum));
}

TEST(ReplicatedWarmStartTest, FailoverAndRejoinWithoutTheFileBitwiseIdentical) {
  uint64_t calm = 0;
  ASSERT_NO_FATAL_FAILURE(Undisturbed(&calm));

  LocalCluster cluster(TestDir("replicated"), ThreeShardsOutlastingFailover());
  ASSERT_TRUE(cluster.Start().ok());
  const std::string file = cluster.dir() + "/model.npz";
  ASSERT_NO_FATAL_FAILURE(WriteModelFile(file));
  absl::StatusOr<RunningJob> running = StartJobUntilStep(
      cluster, JobText(2, file), 3, kKillAfterStep, absl::Seconds(120));
  ASSERT_TRUE(running.ok()) << running.status();
  const std::string& job = running->id;
  std::vector<std::string>& a = running->addresses;
  // Every shard read it at the start; nothing may need it from now on.
  ASSERT_EQ(std::remove(file.c_str()), 0);

  absl::Status failed = KillAndAwaitFailover(cluster, 1, 1, absl::Seconds(30));
  ASSERT_TRUE(failed.ok()) << failed;
  // Restarted on a new port (its address file names it).
  const std::string address_file = cluster.dir() + "/s1.addr";
  ASSERT_TRUE(WriteFileAtomically(address_file, "").ok());
  absl::Status restarted = cluster.StartShard(1);
  ASSERT_TRUE(restarted.ok()) << restarted << cluster.Log("psd1");
  absl::StatusOr<std::string> moved =
      WaitForFile(address_file, absl::Seconds(10));
  ASSERT_TRUE(moved.ok()) << moved.status();
  a[1] = *moved;
  ASSERT_NO_FATAL_FAILURE(ExpectLog(
      cluster, "shard 1 answers again: it rejoins as a backup at epoch 2"));
  ASSERT_NO_FATAL_FAILURE(
      ExpectLog(cluster, "shard 1 caught up: a backup again at epoch 3"));
  absl::StatusOr<JobStats> s1 = ReadShardJobStats(a[1], job);
  ASSERT_TRUE(s1.ok()) << s1.status();
  EXPECT_EQ(s1->replica_copied_chunks(), s1->backup_chunks());
  EXPECT_EQ(s1->pushes(), 0u);

  // Shard 1's copies, made from the live ones, serve its chunks again.
  failed = KillAndAwaitFailover(cluster, 2, 4, absl::Seconds(30));
  ASSERT_TRUE(failed.ok()) << failed;
  uint64_t disturbed = 0;
  ASSERT_NO_FATAL_FAILURE(Finish(cluster, job, {a[0], a[1], a[0]}, &disturbed));
  EXPECT_EQ(disturbed, calm) << "a copy did not start from the file, or the "
                                "rejoined copy was not exact";
}

// init.from_job: the source, a short unreplicated run of the same model,
// ends SUCCEEDED on the cluster first; the job starts from its parameters
// and momentum. 10 epochs: a kill at step 30 lands well inside.
constexpr uint64_t kSourceEpochs = 2;
constexpr uint64_t kFromJobEpochs = 10;
constexpr uint64_t kFromJobSteps = 64 * kFromJobEpochs;

std::string FromJobText(int replication) {
  return absl::StrCat(
      ReplicatedMlpJob("warm-from-job", replication, kFromJobEpochs, 200),
      "init { from_job: \"source\" optimizer_state: true }\n");
}

// Runs the source job to SUCCEEDED on `cluster`.
void RunSource(const LocalCluster& cluster) {
  absl::StatusOr<CommandResult> ran =
      RunJob(cluster, ReplicatedMlpJob("source", 1, kSourceEpochs, 200),
             absl::Seconds(120));
  ASSERT_TRUE(ran.ok()) << ran.status();
  ASSERT_EQ(ran->exit_code, 0) << ran->out << ran->err;
}

// The warm-started job without replicas, undisturbed.
void UndisturbedFromJob(uint64_t* checksum) {
  LocalCluster cluster(TestDir("from-job-undisturbed"),
                       ThreeShardsOutlastingFailover());
  ASSERT_TRUE(cluster.Start().ok());
  ASSERT_NO_FATAL_FAILURE(RunSource(cluster));
  absl::StatusOr<std::string> job = SubmitJob(cluster, FromJobText(1));
  ASSERT_TRUE(job.ok()) << job.status();
  absl::StatusOr<std::vector<std::string>> addresses =
      ShardAddresses(cluster, 3);
  ASSERT_TRUE(addresses.ok()) << addresses.status();
  ASSERT_NO_FATAL_FAILURE(
      Finish(cluster, *job, *addresses, checksum, kFromJobSteps));
}

// Replication 2 from a job: only the primaries' shards hold the source's
// chunks, and they forward them to their backups before any answer. Shard
// 1 (a primary) is SIGKILLed mid-job and never restarted: shard 2 serves
// its chunks from the copies it was sent, and the job ends bitwise where
// the undisturbed unreplicated run from the same source does.
TEST(ReplicatedWarmStartTest, FromAJobFailoverBitwiseIdentical) {
  uint64_t calm = 0;
  ASSERT_NO_FATAL_FAILURE(UndisturbedFromJob(&calm));

  LocalCluster cluster(TestDir("from-job-replicated"),
                       ThreeShardsOutlastingFailover());
  ASSERT_TRUE(cluster.Start().ok());
  ASSERT_NO_FATAL_FAILURE(RunSource(cluster));
  absl::StatusOr<RunningJob> running = StartJobUntilStep(
      cluster, FromJobText(2), 3, kKillAfterStep, absl::Seconds(120));
  ASSERT_TRUE(running.ok()) << running.status();
  const std::vector<std::string>& a = running->addresses;
  absl::StatusOr<JobStats> s2 = ReadShardJobStats(a[2], running->id);
  ASSERT_TRUE(s2.ok()) << s2.status();
  // Shard 2 holds shard 1's chunks as backups, each sent by shard 1.
  EXPECT_GT(s2->backup_chunks(), 0u);
  EXPECT_EQ(s2->replica_copied_chunks(), s2->backup_chunks());

  absl::Status failed = KillAndAwaitFailover(cluster, 1, 1, absl::Seconds(30));
  ASSERT_TRUE(failed.ok()) << failed;
  uint64_t disturbed = 0;
  ASSERT_NO_FATAL_FAILURE(Finish(cluster, running->id, {a[0], a[2], a[2]},
                                 &disturbed, kFromJobSteps));
  EXPECT_NE(calm, 0u);
  EXPECT_EQ(disturbed, calm) << "a backup did not start from the source's "
                                "values, or lost a step in the failover";
}

}  // namespace
}  // namespace ps
