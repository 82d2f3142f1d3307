#include "server/coordinator/job_store.h"

#include <fcntl.h>
#include <sqlite3.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "server/coordinator/job_store_rows.h"
#include "server/coordinator/sqlite_statement.h"

namespace ps {
namespace {

// kMigrations[i] brings a database from user_version i to i + 1.
constexpr const char* kMigrations[] = {
    // 1: jobs, their ranks, the worker registry and the id counters.
    R"sql(
      CREATE TABLE meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);
      CREATE TABLE jobs (
        seq INTEGER PRIMARY KEY,          -- submit order
        job_id TEXT NOT NULL UNIQUE,
        name TEXT NOT NULL,
        state TEXT NOT NULL,              -- JobState name, for humans
        registering INTEGER NOT NULL,
        leader_samples_per_s REAL NOT NULL,
        spec BLOB NOT NULL,               -- JobSpec
        placement BLOB NOT NULL,          -- Placement
        status BLOB NOT NULL);            -- JobStatus less spec, placement
      CREATE TABLE job_ranks (
        job_id TEXT NOT NULL,
        rank INTEGER NOT NULL,
        worker_id TEXT NOT NULL,          -- '' once lost
        worker_name TEXT NOT NULL,
        finished INTEGER NOT NULL,
        active INTEGER NOT NULL,
        PRIMARY KEY (job_id, rank)) WITHOUT ROWID;
      CREATE TABLE workers (
        worker_id TEXT PRIMARY KEY,
        name TEXT NOT NULL,
        seq INTEGER NOT NULL,
        job_id TEXT NOT NULL,
        joined_job TEXT NOT NULL,
        rank INTEGER NOT NULL,
        start_step INTEGER NOT NULL,
        abort_reason TEXT NOT NULL) WITHOUT ROWID;
    )sql",
    // 2: each job's progress history, as its leader reported it.
    R"sql(
      CREATE TABLE progress (
        job_id TEXT NOT NULL,
        step INTEGER NOT NULL,
        epoch INTEGER NOT NULL,
        loss REAL NOT NULL,
        train_accuracy REAL NOT NULL,
        test_accuracy REAL NOT NULL,
        samples_per_s REAL NOT NULL,
        data_s REAL NOT NULL,
        compute_s REAL NOT NULL,
        comm_s REAL NOT NULL,
        elapsed_s REAL NOT NULL,
        PRIMARY KEY (job_id, step)) WITHOUT ROWID;
    )sql",
    // 3: a metric the worker did not measure (NaN: a Python worker's
    // train accuracy, a loss it did not pass) is NULL, not a failed write.
    R"sql(
      CREATE TABLE progress_v3 (
        job_id TEXT NOT NULL,
        step INTEGER NOT NULL,
        epoch INTEGER NOT NULL,
        loss REAL,                        -- NULL: not measured
        train_accuracy REAL,              -- NULL: not measured
        test_accuracy REAL,               -- NULL: not measured
        samples_per_s REAL NOT NULL,
        data_s REAL NOT NULL,
        compute_s REAL NOT NULL,
        comm_s REAL NOT NULL,
        elapsed_s REAL NOT NULL,
        PRIMARY KEY (job_id, step)) WITHOUT ROWID;
      INSERT INTO progress_v3 SELECT job_id, step, epoch, loss,
        train_accuracy, test_accuracy, samples_per_s, data_s, compute_s,
        comm_s, elapsed_s FROM progress;
      DROP TABLE progress;
      ALTER TABLE progress_v3 RENAME TO progress;
    )sql",
};
static_assert(sizeof(kMigrations) / sizeof(kMigrations[0]) ==
              JobStore::kSchemaVersion);

absl::Status Refused(const std::string& path, absl::string_view why) {
  return absl::FailedPreconditionError(absl::StrCat(
      "job store ", path, ": ", why,
      "; psd does not start empty by itself: fix or restore the file, or "
      "move it aside with psd --reset_state"));
}

// `status` (from SQLite) with the file named in front.
absl::Status Named(const std::string& path, const absl::Status& status) {
  if (status.ok()) return status;
  return absl::Status(status.code(),
                      absl::StrCat("job store ", path, ": ", status.message()));
}

// Takes the store's lock file: FAILED_PRECONDITION when another process
// holds it.
absl::StatusOr<int> Lock(const std::string& path) {
  const std::string lock_path = path + ".lock";
  const int fd = open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("job store ", path, ": cannot open ", lock_path, ": ",
                     strerror(errno)));
  }
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    close(fd);
    return absl::FailedPreconditionError(absl::StrCat(
        "job store ", path, ": locked by another process (",
        err == EWOULDBLOCK ? "is another psd running with this state_dir?"
                           : strerror(err),
        ")"));
  }
  return fd;
}

// Whether the store file exists. FAILED_PRECONDITION when it does but is no
// SQLite database: SQLite would take an empty file for a new database (and
// psd would start empty), and its own error for other files does not say
// which test failed.
absl::StatusOr<bool> CheckHeader(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0 && errno == ENOENT) return false;
  if (fd < 0)
    return Refused(path, absl::StrCat("cannot open: ", strerror(errno)));
  static constexpr char kHeader[] = "SQLite format 3";  // and its '\0'
  char header[sizeof(kHeader)] = {};
  const ssize_t n = pread(fd, header, sizeof(header), 0);
  const int err = errno;
  close(fd);
  if (n < 0) return Refused(path, absl::StrCat("cannot read: ", strerror(err)));
  if (n == 0) {
    return Refused(path,
                   "the file is empty (0 bytes), which is no job store (a "
                   "store psd made always has its header)");
  }
  if (static_cast<size_t>(n) < sizeof(header) ||
      memcmp(header, kHeader, sizeof(header)) != 0) {
    return Refused(path, "file is not a database (no SQLite header)");
  }
  return true;
}

absl::Status MakeParentDir(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos || slash == 0) return absl::OkStatus();
  const std::string dir = path.substr(0, slash);
  if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job store ", path, ": cannot create ", dir, ": ", strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<StoredReplicaView> JobStore::LoadReplicaView() {
  StoredReplicaView v;
  for (auto [key, out] : {std::pair{"replica_epoch", &v.epoch},
                          {"replica_failed_mask", &v.failed_mask},
                          {"replica_joining_mask", &v.joining_mask},
                          {"replica_rejoined_mask", &v.rejoined_mask}}) {
    PS_ASSIGN_OR_RETURN(int64_t stored, Meta(db_, key, 0));
    *out = static_cast<uint64_t>(stored);
  }
  return v;
}

bool StoreChanges::empty() const {
  return new_jobs.empty() && changed_jobs.empty() && workers.empty() &&
         removed_workers.empty() && progress.empty() && !next_job.has_value() &&
         !next_worker_seq.has_value() && !replica_view.has_value();
}

absl::StatusOr<std::unique_ptr<JobStore>> JobStore::Open(Options options) {
  const std::string& path = options.path;
  if (path.empty()) {
    return absl::InvalidArgumentError("job store: path must be set");
  }
  PS_RETURN_IF_ERROR(MakeParentDir(path));
  PS_ASSIGN_OR_RETURN(const int lock_fd, Lock(path));
  absl::StatusOr<bool> exists = CheckHeader(path);
  if (!exists.ok()) {
    close(lock_fd);
    return exists.status();
  }
  // Read-write or not at all: SQLite opens a file it cannot write
  // read-only without a word, and every commit would fail later.
  sqlite3* db = nullptr;
  const int rc = sqlite3_open_v2(
      path.c_str(), &db,
      SQLITE_OPEN_READWRITE | (*exists ? 0 : SQLITE_OPEN_CREATE), nullptr);
  std::string why;
  if (rc != SQLITE_OK) {
    why = absl::StrCat("cannot open: ",
                       db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
  } else if (sqlite3_db_readonly(db, "main") != 0) {
    why = absl::StrCat("cannot be written (", strerror(EACCES),
                       "); psd needs it, its folder and its -wal and -shm "
                       "files read-write");
  }
  if (!why.empty()) {
    sqlite3_close(db);
    close(lock_fd);
    return Refused(path, why);
  }
  std::unique_ptr<JobStore> store(
      new JobStore(std::move(options), db, lock_fd));
  PS_RETURN_IF_ERROR(store->Migrate());
  return store;
}

JobStore::JobStore(Options options, sqlite3* db, int lock_fd)
    : options_(std::move(options)), db_(db), lock_fd_(lock_fd) {}

JobStore::~JobStore() {
  sqlite3_close(db_);
  close(lock_fd_);  // releases the flock
}

absl::Status JobStore::Migrate() {
  const std::string& path = options_.path;
  // The first read finds a file that is no database (SQLITE_NOTADB).
  absl::StatusOr<std::string> version_text =
      FirstValue(db_, "PRAGMA user_version");
  if (!version_text.ok()) return Refused(path, version_text.status().message());
  const int64_t version = std::strtoll(version_text->c_str(), nullptr, 10);
  if (version > kSchemaVersion) {
    return Refused(path, absl::StrFormat("schema version %d is newer than this "
                                         "psd's (%d); run the newer psd",
                                         version, kSchemaVersion));
  }
  if (version > 0) {
    absl::StatusOr<std::string> check = FirstValue(db_, "PRAGMA quick_check");
    if (!check.ok()) return Refused(path, check.status().message());
    if (*check != "ok") {
      return Refused(
          path, absl::StrCat("corrupt: quick_check says \"", *check, "\""));
    }
  }
  absl::StatusOr<std::string> mode =
      FirstValue(db_, "PRAGMA journal_mode = WAL");
  if (!mode.ok()) return Refused(path, mode.status().message());
  if (*mode != "wal") {
    return Refused(path, absl::StrCat("cannot use the WAL journal mode (got ",
                                      *mode, ")"));
  }
  if (absl::Status s = SqliteExec(db_, "PRAGMA synchronous = FULL"); !s.ok()) {
    return Refused(path, s.message());
  }
  for (int64_t v = version; v < kSchemaVersion; ++v) {
    absl::Status s = SqliteExec(db_, "BEGIN IMMEDIATE");
    if (s.ok()) s = SqliteExec(db_, kMigrations[v]);
    if (s.ok()) {
      s = SqliteExec(db_,
                     absl::StrCat("PRAGMA user_version = ", v + 1).c_str());
    }
    if (s.ok()) s = SqliteExec(db_, "COMMIT");
    if (!s.ok()) {
      sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
      return Refused(path, absl::StrCat("migrating from schema version ", v,
                                        ": ", s.message()));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<StoredState> JobStore::Load() {
  StoredState state;
  absl::Status s = [&]() -> absl::Status {
    PS_ASSIGN_OR_RETURN(state.jobs, LoadJobs(db_));
    PS_ASSIGN_OR_RETURN(state.workers, LoadWorkers(db_));
    PS_ASSIGN_OR_RETURN(int64_t next_job, Meta(db_, "next_job", 1));
    PS_ASSIGN_OR_RETURN(int64_t next_seq, Meta(db_, "next_worker_seq", 1));
    state.next_job = static_cast<uint64_t>(next_job);
    state.next_worker_seq = static_cast<uint64_t>(next_seq);
    return absl::OkStatus();
  }();
  if (!s.ok()) return Refused(options_.path, s.message());
  return state;
}

absl::Status JobStore::WriteChanges(const StoreChanges& changes) {
  for (const StoredJob& job : changes.new_jobs) {
    PS_RETURN_IF_ERROR(InsertJob(db_, job));
  }
  for (const StoredJob& job : changes.changed_jobs) {
    PS_RETURN_IF_ERROR(UpdateJob(db_, job));
  }
  for (const StoredWorker& worker : changes.workers) {
    PS_RETURN_IF_ERROR(WriteWorker(db_, worker));
  }
  for (const std::string& id : changes.removed_workers) {
    SqliteStatement st(db_, "DELETE FROM workers WHERE worker_id = ?1");
    st.Bind(1, id);
    PS_RETURN_IF_ERROR(st.Run());
  }
  std::vector<std::string> thin;
  for (const auto& [job_id, progress] : changes.progress) {
    PS_RETURN_IF_ERROR(WriteProgress(db_, job_id, progress));
    if (thin.empty() || thin.back() != job_id) thin.push_back(job_id);
  }
  for (const std::string& job_id : thin)
    PS_RETURN_IF_ERROR(ThinHistory(job_id));
  if (changes.next_job.has_value()) {
    PS_RETURN_IF_ERROR(SetMeta(db_, "next_job", *changes.next_job));
  }
  if (changes.next_worker_seq.has_value()) {
    PS_RETURN_IF_ERROR(
        SetMeta(db_, "next_worker_seq", *changes.next_worker_seq));
  }
  if (const auto& v = changes.replica_view; v.has_value()) {
    for (auto [key, value] : {std::pair{"replica_epoch", v->epoch},
                              {"replica_failed_mask", v->failed_mask},
                              {"replica_joining_mask", v->joining_mask},
                              {"replica_rejoined_mask", v->rejoined_mask}}) {
      PS_RETURN_IF_ERROR(SetMeta(db_, key, value));
    }
  }
  return absl::OkStatus();
}

absl::Status JobStore::Commit(const StoreChanges& changes) {
  if (changes.empty()) return absl::OkStatus();
  absl::Status s = SqliteExec(db_, "BEGIN IMMEDIATE");
  if (s.ok()) s = WriteChanges(changes);
  if (s.ok()) s = SqliteExec(db_, "COMMIT");
  if (!s.ok()) {
    // Also after a failed COMMIT: SQLite may have kept the transaction open.
    if (!sqlite3_get_autocommit(db_)) {
      sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    }
    return Named(options_.path, s);
  }
  return absl::OkStatus();
}

absl::Status JobStore::ThinHistory(const std::string& job_id) {
  int64_t rows = 0;
  {
    SqliteStatement count(db_,
                          "SELECT count(*) FROM progress WHERE job_id = ?1");
    count.Bind(1, job_id);
    PS_RETURN_IF_ERROR(count.Run());
    rows = count.Int(0);
  }
  if (rows <= options_.max_history_rows) return absl::OkStatus();
  // Row numbers 2, 4, 6, ... of the older half (the first row stays).
  SqliteStatement thin(
      db_,
      "DELETE FROM progress WHERE job_id = ?1 AND step IN ("
      "  SELECT step FROM (SELECT step, row_number() OVER (ORDER BY step) AS n"
      "                    FROM progress WHERE job_id = ?1)"
      "  WHERE n % 2 = 0 AND n <= ?2)");
  thin.Bind(1, job_id);
  thin.Bind(2, rows / 2);
  return thin.Run();
}

absl::StatusOr<std::vector<Progress>> JobStore::History(
    const std::string& job_id) {
  SqliteStatement st(db_,
                     "SELECT step, epoch, loss, train_accuracy, test_accuracy, "
                     "samples_per_s, data_s, compute_s, comm_s, elapsed_s "
                     "FROM progress WHERE job_id = ?1 ORDER BY step");
  st.Bind(1, job_id);
  std::vector<Progress> history;
  while (true) {
    absl::StatusOr<bool> row = st.Step();
    if (!row.ok()) return Named(options_.path, row.status());
    if (!*row) break;
    Progress& p = history.emplace_back();
    p.set_step(static_cast<uint64_t>(st.Int(0)));
    p.set_epoch(static_cast<uint32_t>(st.Int(1)));
    p.set_loss(static_cast<float>(st.DoubleOrNaN(2)));
    p.set_train_accuracy(static_cast<float>(st.DoubleOrNaN(3)));
    p.set_test_accuracy(static_cast<float>(st.DoubleOrNaN(4)));
    p.set_samples_per_s(static_cast<float>(st.Double(5)));
    p.set_data_s(st.Double(6));
    p.set_compute_s(st.Double(7));
    p.set_comm_s(st.Double(8));
    p.set_elapsed_s(st.Double(9));
  }
  return history;
}

absl::StatusOr<std::string> JobStore::MoveAside(const std::string& path,
                                                absl::Time now) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    return absl::NotFoundError(
        absl::StrCat("job store ", path, ": no such file"));
  }
  PS_ASSIGN_OR_RETURN(const int lock_fd, Lock(path));
  const std::string bad =
      absl::StrCat(path, ".bad-",
                   absl::FormatTime("%Y%m%d-%H%M%S", now, absl::UTCTimeZone()));
  absl::Status result = absl::OkStatus();
  for (const char* suffix : {"", "-wal", "-shm"}) {
    const std::string from = path + suffix;
    if (rename(from.c_str(), (bad + suffix).c_str()) != 0 && errno != ENOENT) {
      result = absl::FailedPreconditionError(
          absl::StrCat("job store ", path, ": cannot move ", from, " to ", bad,
                       suffix, ": ", strerror(errno)));
      break;
    }
  }
  close(lock_fd);
  if (!result.ok()) return result;
  return bad;
}

}  // namespace ps
