// Issue 27: a job store psd cannot write. At start psd exits 2 naming the
// file (it used to open the file read-only and serve); a commit that fails
// later makes SubmitJob answer UNAVAILABLE naming the file, and psctl
// prints that answer at once (it used to retry for its whole connect
// timeout and then say the coordinator could not be reached).
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/text_proto.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/local_cluster.h"
#include "tests/subprocess.h"

namespace ps {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kJob[] = R"pb(
  name: "store-check"
  model { mlp { input_dim: 784 hidden: 8 num_classes: 10 } }
  data {
    dataset: "synthetic"
    batch_size: 32
    epochs: 1
    synthetic_train: 256
    synthetic_test: 64
  }
  optimizer { kind: SGD learning_rate: 0.05 }
  consistency { mode: BSP step_deadline_ms: 30000 }
  num_workers: 1
  seed: 11
)pb";

LocalClusterOptions WithStore() {
  LocalClusterOptions o;
  o.shards = 1;
  o.workers = 0;
  o.psd_extra = "state_dir: \"state\"";
  return o;
}

TEST(UnusableStoreTest, AStoreItCannotWriteStopsPsdWithExitCode2) {
  const std::string dir = TestDir("unwritable_store");
  {
    LocalCluster first(dir, WithStore());  // makes the store
    ASSERT_TRUE(first.Start().ok());
    ASSERT_TRUE(first.Stop().ok());
  }
  const std::string store = dir + "/state/jobs.sqlite";
  ASSERT_EQ(chmod(store.c_str(), 0444), 0);
  std::vector<std::string> argv = {"server/psd",
                                   "--config=" + dir + "/psd0.pbtxt"};
  if (geteuid() == 0) {
    // Root writes any file; run psd as any other user would be, without
    // the capability that overrides file modes.
    argv.insert(
        argv.begin(),
        {"/usr/bin/setpriv", "--inh-caps=-dac_override,-dac_read_search",
         "--bounding-set=-dac_override,-dac_read_search"});
  }
  absl::StatusOr<CommandResult> r = RunCommand(argv, absl::Seconds(30));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->exit_code, 2) << r->out << r->err;
  EXPECT_THAT(r->out + r->err, HasSubstr(store));
  EXPECT_THAT(r->out + r->err, HasSubstr("cannot be written"));
  ASSERT_EQ(chmod(store.c_str(), 0644), 0);
}

TEST(UnusableStoreTest, ACommitThatFailsIsAnsweredNamingTheStore) {
  LocalCluster cluster(TestDir("failing_store"), WithStore());
  ASSERT_TRUE(cluster.Start().ok());
  const std::string store = cluster.dir() + "/state/jobs.sqlite";
  const std::string job = cluster.dir() + "/job.pbtxt";
  ASSERT_TRUE(WriteFileAtomically(job, kJob).ok());
  // Another process holds the store's write lock, so psd's next commit
  // fails (SQLITE_BUSY) as a full disk or a broken file would make it.
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(store.c_str(), &db), SQLITE_OK);
  sqlite3_busy_timeout(db, 10000);  // psd may be committing right now
  ASSERT_EQ(sqlite3_exec(db, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr),
            SQLITE_OK)
      << sqlite3_errmsg(db);
  const absl::Time start = absl::Now();
  // A long connect timeout: a psctl that retried the answer would take it.
  absl::StatusOr<CommandResult> failed =
      cluster.Psctl({"submit", "--connect-timeout=30", job});
  const absl::Duration took = absl::Now() - start;
  sqlite3_exec(db, "ROLLBACK", nullptr, nullptr, nullptr);
  sqlite3_close(db);
  ASSERT_TRUE(failed.ok()) << failed.status();
  EXPECT_EQ(failed->exit_code, 3) << failed->out << failed->err;
  EXPECT_THAT(failed->err, HasSubstr("job not submitted: job store " + store));
  EXPECT_THAT(failed->err, Not(HasSubstr("cannot reach")));
  // Answered at once, not retried for the connect timeout.
  EXPECT_LT(took, absl::Seconds(10));
  // The store works again: the same submit goes through.
  absl::StatusOr<CommandResult> ok = cluster.Psctl({"submit", job});
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->exit_code, 0) << ok->out << ok->err;
  EXPECT_THAT(ok->out, HasSubstr("submitted job-000001"));
  EXPECT_TRUE(cluster.Stop().ok());
}

}  // namespace
}  // namespace ps
