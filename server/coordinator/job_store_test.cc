#include "server/coordinator/job_store.h"

#include <linux/capability.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

using ::testing::HasSubstr;

std::string NewPath(const std::string& name) {
  const std::string dir =
      absl::StrCat(std::getenv("TEST_TMPDIR"), "/", name, "-", getpid());
  return dir + "/jobs.sqlite";
}

JobStore::Options At(const std::string& path, uint32_t history = 1000) {
  JobStore::Options o;
  o.path = path;
  o.max_history_rows = history;
  return o;
}

StoredJob MakeJob(int n, JobState state, int ranks) {
  StoredJob job;
  job.status.set_job_id(absl::StrFormat("job-%06d", n));
  job.status.set_name(absl::StrCat("name-", n));
  job.status.set_state(state);
  job.status.set_reason("why");
  job.status.mutable_spec()->set_name(absl::StrCat("name-", n));
  job.status.mutable_spec()->set_num_workers(ranks);
  job.status.mutable_placement()->add_chunks()->set_shard(1);
  job.status.mutable_progress()->set_step(7 * n);
  job.status.mutable_progress()->set_test_accuracy(0.5f);
  job.status.set_submit_time_s(1000.5 + n);
  job.leader_samples_per_s = 12.5f;
  for (int r = 0; r < ranks; ++r) {
    job.ranks.push_back(
        {absl::StrCat("w-", r + 1), absl::StrCat("host-", r), r == 0, r != 1});
    job.status.add_workers(absl::StrCat("host-", r));
  }
  return job;
}

StoredWorker MakeWorker(int seq, const std::string& job, uint32_t rank) {
  StoredWorker w;
  w.id = absl::StrCat("w-", seq);
  w.name = absl::StrCat("host-", seq);
  w.seq = seq;
  w.job_id = job;
  w.joined_job = seq == 2 ? job : "";
  w.rank = rank;
  w.start_step = 3;
  w.abort_reason = seq == 3 ? "job failed" : "";
  return w;
}

void ExpectSameJob(const StoredJob& a, const StoredJob& b) {
  EXPECT_EQ(a.status.SerializeAsString(), b.status.SerializeAsString());
  EXPECT_EQ(a.registering, b.registering);
  EXPECT_EQ(a.leader_samples_per_s, b.leader_samples_per_s);
  ASSERT_EQ(a.ranks.size(), b.ranks.size());
  for (size_t r = 0; r < a.ranks.size(); ++r) {
    EXPECT_EQ(a.ranks[r].worker_id, b.ranks[r].worker_id);
    EXPECT_EQ(a.ranks[r].worker_name, b.ranks[r].worker_name);
    EXPECT_EQ(a.ranks[r].finished, b.ranks[r].finished);
    EXPECT_EQ(a.ranks[r].active, b.ranks[r].active);
  }
}

TEST(JobStoreTest, RoundTripsJobsWorkersAndCounters) {
  const std::string path = NewPath("roundtrip");
  StoredJob running = MakeJob(1, RUNNING, 3);
  StoredJob done = MakeJob(2, SUCCEEDED, 2);
  {
    auto store = JobStore::Open(At(path));
    ASSERT_TRUE(store.ok()) << store.status();
    StoreChanges c;
    c.new_jobs = {running, done};
    c.workers = {MakeWorker(1, "job-000001", 0), MakeWorker(2, "", 0),
                 MakeWorker(3, "", 0)};
    c.next_job = 3;
    c.next_worker_seq = 4;
    ASSERT_TRUE((*store)->Commit(c).ok());
    // A later change: the job moves on, a worker leaves.
    running.status.mutable_progress()->set_step(99);
    running.ranks[1].worker_id = "";
    StoreChanges later;
    later.changed_jobs = {running};
    later.removed_workers = {"w-3"};
    ASSERT_TRUE((*store)->Commit(later).ok());
  }
  auto store = JobStore::Open(At(path));
  ASSERT_TRUE(store.ok()) << store.status();
  auto state = (*store)->Load();
  ASSERT_TRUE(state.ok()) << state.status();
  ASSERT_EQ(state->jobs.size(), 2u);
  ExpectSameJob(state->jobs[0], running);
  ExpectSameJob(state->jobs[1], done);
  ASSERT_EQ(state->workers.size(), 2u);
  EXPECT_EQ(state->workers[0].id, "w-1");
  EXPECT_EQ(state->workers[0].job_id, "job-000001");
  EXPECT_EQ(state->workers[0].start_step, 3u);
  EXPECT_EQ(state->workers[1].joined_job, "");
  EXPECT_EQ(state->next_job, 3u);
  EXPECT_EQ(state->next_worker_seq, 4u);
}

TEST(JobStoreTest, ChangingAJobThatIsNotStoredFailsAndWritesNothing) {
  const std::string path = NewPath("notstored");
  auto store = JobStore::Open(At(path));
  ASSERT_TRUE(store.ok());
  StoreChanges c;
  c.workers = {MakeWorker(1, "", 0)};
  c.changed_jobs = {MakeJob(5, RUNNING, 1)};
  absl::Status s = (*store)->Commit(c);
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal) << s;
  auto state = (*store)->Load();
  ASSERT_TRUE(state.ok());
  EXPECT_TRUE(state->workers.empty()) << "half a transaction was kept";
}

TEST(JobStoreTest, HistoryIsThinnedToItsBound) {
  const std::string path = NewPath("history");
  constexpr uint32_t kRows = 16;
  auto store = JobStore::Open(At(path, kRows));
  ASSERT_TRUE(store.ok());
  StoreChanges first;
  first.new_jobs = {MakeJob(1, RUNNING, 1)};
  ASSERT_TRUE((*store)->Commit(first).ok());
  for (uint64_t step = 1; step <= 200; ++step) {
    StoreChanges c;
    Progress p;
    p.set_step(step);
    p.set_loss(1.0f / step);
    c.progress.push_back({"job-000001", p});
    ASSERT_TRUE((*store)->Commit(c).ok());
  }
  auto history = (*store)->History("job-000001");
  ASSERT_TRUE(history.ok());
  ASSERT_LE(history->size(), kRows);
  ASSERT_GE(history->size(), kRows / 2);
  EXPECT_EQ(history->front().step(), 1u) << "the first row stays";
  EXPECT_EQ(history->back().step(), 200u);
  EXPECT_FLOAT_EQ(history->back().loss(), 1.0f / 200);
  for (size_t i = 1; i < history->size(); ++i) {
    EXPECT_LT((*history)[i - 1].step(), (*history)[i].step());
  }
}

// A metric the worker did not measure (NaN: a Python worker's train
// accuracy) is written as NULL and read back as NaN; before schema 3 the
// column refused it and every later commit failed with it.
TEST(JobStoreTest, UnmeasuredMetricsRoundTripAsNaN) {
  const std::string path = NewPath("nan");
  auto store = JobStore::Open(At(path));
  ASSERT_TRUE(store.ok());
  StoreChanges c;
  c.new_jobs = {MakeJob(1, RUNNING, 1)};
  Progress p;
  p.set_step(7);
  p.set_loss(0.25f);
  p.set_train_accuracy(std::numeric_limits<float>::quiet_NaN());
  p.set_test_accuracy(std::numeric_limits<float>::quiet_NaN());
  p.set_samples_per_s(100);
  c.progress.push_back({"job-000001", p});
  ASSERT_TRUE((*store)->Commit(c).ok());
  auto history = (*store)->History("job-000001");
  ASSERT_TRUE(history.ok()) << history.status();
  ASSERT_EQ(history->size(), 1u);
  EXPECT_FLOAT_EQ(history->front().loss(), 0.25f);
  EXPECT_TRUE(std::isnan(history->front().train_accuracy()));
  EXPECT_TRUE(std::isnan(history->front().test_accuracy()));
  EXPECT_FLOAT_EQ(history->front().samples_per_s(), 100);
}

// A version-2 database (metrics NOT NULL) is migrated to nullable metrics
// and keeps its history.
TEST(JobStoreTest, MigratesTheProgressOfSchemaTwo) {
  const std::string path = NewPath("migrate2");
  {
    auto store = JobStore::Open(At(path));
    ASSERT_TRUE(store.ok());
  }
  {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    ASSERT_EQ(
        sqlite3_exec(
            db,
            "DROP TABLE progress;"
            "CREATE TABLE progress (job_id TEXT NOT NULL, step INTEGER NOT "
            "NULL, epoch INTEGER NOT NULL, loss REAL NOT NULL, train_accuracy "
            "REAL NOT NULL, test_accuracy REAL NOT NULL, samples_per_s REAL "
            "NOT NULL, data_s REAL NOT NULL, compute_s REAL NOT NULL, comm_s "
            "REAL NOT NULL, elapsed_s REAL NOT NULL, PRIMARY KEY (job_id, "
            "step)) WITHOUT ROWID;"
            "INSERT INTO progress VALUES ('job-000001', 5, 1, 0.5, 0.75, -1, "
            "10, 1, 2, 3, 6);"
            "PRAGMA user_version = 2;",
            nullptr, nullptr, nullptr),
        SQLITE_OK);
    sqlite3_close(db);
  }
  auto store = JobStore::Open(At(path));
  ASSERT_TRUE(store.ok()) << store.status();
  auto history = (*store)->History("job-000001");
  ASSERT_TRUE(history.ok()) << history.status();
  ASSERT_EQ(history->size(), 1u);
  EXPECT_EQ(history->front().step(), 5u);
  EXPECT_FLOAT_EQ(history->front().train_accuracy(), 0.75f);
  EXPECT_FLOAT_EQ(history->front().elapsed_s(), 6);
  StoreChanges c;
  Progress p;
  p.set_step(6);
  p.set_loss(std::numeric_limits<float>::quiet_NaN());
  c.progress.push_back({"job-000001", p});
  EXPECT_TRUE((*store)->Commit(c).ok()) << "the loss column takes NULL now";
}

// A version-1 database (before the progress history) is migrated in place
// and keeps its jobs.
TEST(JobStoreTest, MigratesAnOlderSchema) {
  const std::string path = NewPath("migrate");
  {
    auto store = JobStore::Open(At(path));
    ASSERT_TRUE(store.ok());
    StoreChanges c;
    c.new_jobs = {MakeJob(1, SUCCEEDED, 1)};
    ASSERT_TRUE((*store)->Commit(c).ok());
  }
  {
    // Back to version 1 as an older psd left it.
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(db, "DROP TABLE progress; PRAGMA user_version = 1;",
                           nullptr, nullptr, nullptr),
              SQLITE_OK);
    sqlite3_close(db);
  }
  auto store = JobStore::Open(At(path));
  ASSERT_TRUE(store.ok()) << store.status();
  auto state = (*store)->Load();
  ASSERT_TRUE(state.ok());
  ASSERT_EQ(state->jobs.size(), 1u);
  EXPECT_EQ(state->jobs[0].status.state(), SUCCEEDED);
  StoreChanges c;
  c.progress.push_back({"job-000001", Progress()});
  EXPECT_TRUE((*store)->Commit(c).ok()) << "the migration made the table";
}

void ExpectRefused(const std::string& path, const std::string& why) {
  auto store = JobStore::Open(At(path));
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(store.status().message()), HasSubstr(path));
  EXPECT_THAT(std::string(store.status().message()), HasSubstr(why));
}

TEST(JobStoreTest, RefusesANewerSchema) {
  const std::string path = NewPath("newer");
  ASSERT_TRUE(JobStore::Open(At(path)).ok());
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(
      sqlite3_exec(db, "PRAGMA user_version = 9", nullptr, nullptr, nullptr),
      SQLITE_OK);
  sqlite3_close(db);
  ExpectRefused(path, "schema version 9 is newer");
}

TEST(JobStoreTest, RefusesACorruptFileAndLeavesIt) {
  const std::string path = NewPath("corrupt");
  ASSERT_TRUE(JobStore::Open(At(path)).ok());
  const std::string garbage(8192, 'x');
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << garbage;
  }
  ExpectRefused(path, "not a database");
  std::ifstream in(path, std::ios::binary);
  std::string kept((std::istreambuf_iterator<char>(in)), {});
  EXPECT_EQ(kept, garbage) << "a refused file must stay as it was";
}

// Issue 27: SQLite opened an empty file as a new database, and psd
// started empty and rewrote it.
TEST(JobStoreTest, RefusesAZeroLengthFileAndLeavesIt) {
  const std::string path = NewPath("empty");
  std::filesystem::create_directories(
      std::filesystem::path(path).parent_path());
  { std::ofstream create(path); }
  ASSERT_EQ(access(path.c_str(), F_OK), 0);
  ExpectRefused(path, "empty (0 bytes)");
  struct stat st {};
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_size, 0) << "a refused file must stay as it was";
}

// Runs `fn` on a thread whose effective capabilities lack
// CAP_DAC_OVERRIDE, so file modes bind it as they bind any user (tests
// run as root, which chmod alone does not stop). Capabilities are per
// thread; the test's other threads keep theirs.
template <typename Fn>
void WithoutDacOverride(Fn fn) {
  std::thread t([&] {
    if (geteuid() == 0) {
      __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
      __user_cap_data_struct data[2] = {};
      ASSERT_EQ(syscall(SYS_capget, &header, data), 0);
      data[0].effective &= ~(1u << CAP_DAC_OVERRIDE);
      ASSERT_EQ(syscall(SYS_capset, &header, data), 0);
    }
    fn();
  });
  t.join();
}

// Issue 27: SQLite opened a file it could not write read-only, without a
// word; psd started and every commit failed.
TEST(JobStoreTest, RefusesAFileItCannotWrite) {
  const std::string path = NewPath("readonly");
  {
    auto store = JobStore::Open(At(path));
    ASSERT_TRUE(store.ok()) << store.status();
    StoreChanges c;
    c.new_jobs = {MakeJob(1, RUNNING, 1)};
    ASSERT_TRUE((*store)->Commit(c).ok());
  }
  ASSERT_EQ(chmod(path.c_str(), 0444), 0);
  WithoutDacOverride([&] { ExpectRefused(path, "cannot be written"); });
  ASSERT_EQ(chmod(path.c_str(), 0644), 0);
  auto store = JobStore::Open(At(path));
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_EQ((*store)->Load()->jobs.size(), 1u) << "the file was left whole";
}

TEST(JobStoreTest, RefusesAFileLockedByAnotherProcess) {
  const std::string path = NewPath("locked");
  ASSERT_TRUE(JobStore::Open(At(path)).ok());
  int ready[2], release[2];
  ASSERT_EQ(pipe(ready), 0);
  ASSERT_EQ(pipe(release), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto store = JobStore::Open(At(path));
    char c = store.ok() ? 'y' : 'n';
    (void)!write(ready[1], &c, 1);
    (void)!read(release[0], &c, 1);  // holds the store until told
    _exit(0);
  }
  char c = 0;
  ASSERT_EQ(read(ready[0], &c, 1), 1);
  ASSERT_EQ(c, 'y');
  ExpectRefused(path, "locked by another process");
  auto moved = JobStore::MoveAside(path, absl::UnixEpoch());
  EXPECT_EQ(moved.status().code(), absl::StatusCode::kFailedPrecondition);
  (void)!write(release[1], &c, 1);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(JobStore::Open(At(path)).ok()) << "the lock died with it";
}

TEST(JobStoreTest, MoveAsideLetsTheNextOpenStartEmpty) {
  const std::string path = NewPath("aside");
  {
    auto store = JobStore::Open(At(path));
    ASSERT_TRUE(store.ok());
    StoreChanges c;
    c.new_jobs = {MakeJob(1, RUNNING, 1)};
    ASSERT_TRUE((*store)->Commit(c).ok());
  }
  auto moved = JobStore::MoveAside(
      path, absl::FromUnixSeconds(86400 * 365 + 3661));  // 1971-01-01 01:01:01
  ASSERT_TRUE(moved.ok()) << moved.status();
  EXPECT_EQ(*moved, path + ".bad-19710101-010101");
  EXPECT_EQ(access(moved->c_str(), F_OK), 0);
  auto store = JobStore::Open(At(path));
  ASSERT_TRUE(store.ok());
  auto state = (*store)->Load();
  ASSERT_TRUE(state.ok());
  EXPECT_TRUE(state->jobs.empty());
  EXPECT_EQ(
      JobStore::MoveAside(NewPath("none"), absl::UnixEpoch()).status().code(),
      absl::StatusCode::kNotFound);
}

// A full disk (RLIMIT_FSIZE in a child process): the commit that does not
// fit fails naming the file, and every commit before it stays whole.
TEST(JobStoreTest, FullDiskFailsTheCommitAndKeepsTheRest) {
  const std::string path = NewPath("full");
  ASSERT_TRUE(JobStore::Open(At(path)).ok());
  constexpr int kRanks = 8;
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    signal(SIGXFSZ, SIG_IGN);
    rlimit limit{256 << 10, 256 << 10};
    setrlimit(RLIMIT_FSIZE, &limit);
    auto store = JobStore::Open(At(path));
    if (!store.ok()) _exit(3);
    for (int n = 1; n < 100000; ++n) {
      StoreChanges c;
      c.new_jobs = {MakeJob(n, PENDING, kRanks)};
      c.new_jobs[0].status.mutable_spec()->set_name(std::string(4096, 'n'));
      c.next_job = n + 1;
      absl::Status s = (*store)->Commit(c);
      if (!s.ok()) {
        const bool named = absl::StrContains(s.message(), path);
        _exit(n > 1 && named && s.code() == absl::StatusCode::kUnavailable ? 0
                                                                           : 4);
      }
    }
    _exit(5);  // never full
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  ASSERT_EQ(WEXITSTATUS(status), 0);
  auto store = JobStore::Open(At(path));
  ASSERT_TRUE(store.ok()) << store.status();
  auto state = (*store)->Load();
  ASSERT_TRUE(state.ok()) << state.status();
  ASSERT_FALSE(state->jobs.empty());
  EXPECT_EQ(state->next_job, state->jobs.size() + 1);
  for (const StoredJob& job : state->jobs) {
    EXPECT_EQ(job.ranks.size(), static_cast<size_t>(kRanks))
        << job.status.job_id() << " was half-written";
  }
}

}  // namespace
}  // namespace ps
