#include "server/coordinator/job_store_rows.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "server/coordinator/sqlite_statement.h"

namespace ps {

namespace {

// The status blob: the JobStatus without spec and placement (stored once).
std::string StatusBytes(const JobStatus& status) {
  JobStatus light;
  light.set_job_id(status.job_id());
  light.set_name(status.name());
  light.set_state(status.state());
  light.set_reason(status.reason());
  *light.mutable_progress() = status.progress();
  *light.mutable_workers() = status.workers();
  light.set_submit_time_s(status.submit_time_s());
  light.set_start_time_s(status.start_time_s());
  light.set_end_time_s(status.end_time_s());
  if (status.has_scale()) *light.mutable_scale() = status.scale();
  if (status.has_data_plan()) *light.mutable_data_plan() = status.data_plan();
  if (status.has_reshard()) *light.mutable_reshard() = status.reshard();
  return light.SerializeAsString();
}

}  // namespace

// The first column of the first row of `sql` as text ("" for no row).
absl::StatusOr<std::string> FirstValue(sqlite3* db, const char* sql) {
  SqliteStatement st(db, sql);
  PS_ASSIGN_OR_RETURN(bool row, st.Step());
  return row ? st.Text(0) : std::string();
}

absl::StatusOr<int64_t> Meta(sqlite3* db, const char* key, int64_t absent) {
  SqliteStatement st(db, "SELECT value FROM meta WHERE key = ?1");
  st.Bind(1, absl::string_view(key));
  PS_ASSIGN_OR_RETURN(bool row, st.Step());
  return row ? st.Int(0) : absent;
}

absl::Status SetMeta(sqlite3* db, const char* key, uint64_t value) {
  SqliteStatement st(db,
                     "INSERT INTO meta (key, value) VALUES (?1, ?2) "
                     "ON CONFLICT (key) DO UPDATE SET value = excluded.value");
  st.Bind(1, absl::string_view(key));
  st.Bind(2, static_cast<int64_t>(value));
  return st.Run();
}

absl::Status WriteRanks(sqlite3* db, const StoredJob& job) {
  SqliteStatement del(db, "DELETE FROM job_ranks WHERE job_id = ?1");
  del.Bind(1, job.status.job_id());
  PS_RETURN_IF_ERROR(del.Run());
  for (size_t rank = 0; rank < job.ranks.size(); ++rank) {
    const StoredJob::Rank& r = job.ranks[rank];
    SqliteStatement st(db,
                       "INSERT INTO job_ranks (job_id, rank, worker_id, "
                       "worker_name, finished, active) "
                       "VALUES (?1, ?2, ?3, ?4, ?5, ?6)");
    st.Bind(1, job.status.job_id());
    st.Bind(2, static_cast<int64_t>(rank));
    st.Bind(3, r.worker_id);
    st.Bind(4, r.worker_name);
    st.Bind(5, int64_t{r.finished});
    st.Bind(6, int64_t{r.active});
    PS_RETURN_IF_ERROR(st.Run());
  }
  return absl::OkStatus();
}

absl::Status InsertJob(sqlite3* db, const StoredJob& job) {
  SqliteStatement st(db,
                     "INSERT INTO jobs (job_id, name, state, registering, "
                     "leader_samples_per_s, spec, placement, status) "
                     "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)");
  st.Bind(1, job.status.job_id());
  st.Bind(2, job.status.name());
  st.Bind(3, JobState_Name(job.status.state()));
  st.Bind(4, int64_t{job.registering});
  st.Bind(5, static_cast<double>(job.leader_samples_per_s));
  st.BindBlob(6, job.status.spec().SerializeAsString());
  st.BindBlob(7, job.status.placement().SerializeAsString());
  st.BindBlob(8, StatusBytes(job.status));
  PS_RETURN_IF_ERROR(st.Run());
  return WriteRanks(db, job);
}

absl::Status UpdateJob(sqlite3* db, const StoredJob& job) {
  SqliteStatement st(db,
                     "UPDATE jobs SET state = ?2, registering = ?3, "
                     "leader_samples_per_s = ?4, status = ?5 "
                     "WHERE job_id = ?1");
  st.Bind(1, job.status.job_id());
  st.Bind(2, JobState_Name(job.status.state()));
  st.Bind(3, int64_t{job.registering});
  st.Bind(4, static_cast<double>(job.leader_samples_per_s));
  st.BindBlob(5, StatusBytes(job.status));
  PS_RETURN_IF_ERROR(st.Run());
  if (st.Changes() != 1) {
    return absl::InternalError(
        absl::StrCat("job ", job.status.job_id(), " is not stored"));
  }
  if (job.status.placement().epoch() > 0) {
    // Re-placed (psctl scale --shards): spec.shards and the placement
    // changed since the insert.
    SqliteStatement placed(
        db, "UPDATE jobs SET spec = ?2, placement = ?3 WHERE job_id = ?1");
    placed.Bind(1, job.status.job_id());
    placed.BindBlob(2, job.status.spec().SerializeAsString());
    placed.BindBlob(3, job.status.placement().SerializeAsString());
    PS_RETURN_IF_ERROR(placed.Run());
  }
  return WriteRanks(db, job);
}

absl::Status WriteWorker(sqlite3* db, const StoredWorker& w) {
  SqliteStatement st(db,
                     "INSERT OR REPLACE INTO workers (worker_id, name, seq, "
                     "job_id, joined_job, rank, start_step, abort_reason) "
                     "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)");
  st.Bind(1, w.id);
  st.Bind(2, w.name);
  st.Bind(3, static_cast<int64_t>(w.seq));
  st.Bind(4, w.job_id);
  st.Bind(5, w.joined_job);
  st.Bind(6, static_cast<int64_t>(w.rank));
  st.Bind(7, static_cast<int64_t>(w.start_step));
  st.Bind(8, w.abort_reason);
  return st.Run();
}

absl::Status WriteProgress(sqlite3* db, const std::string& job_id,
                           const Progress& p) {
  SqliteStatement st(db,
                     "INSERT OR REPLACE INTO progress (job_id, step, epoch, "
                     "loss, train_accuracy, test_accuracy, samples_per_s, "
                     "data_s, compute_s, comm_s, elapsed_s) VALUES "
                     "(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)");
  st.Bind(1, job_id);
  st.Bind(2, static_cast<int64_t>(p.step()));
  st.Bind(3, static_cast<int64_t>(p.epoch()));
  st.BindOrNull(4, static_cast<double>(p.loss()));
  st.BindOrNull(5, static_cast<double>(p.train_accuracy()));
  st.BindOrNull(6, static_cast<double>(p.test_accuracy()));
  st.Bind(7, static_cast<double>(p.samples_per_s()));
  st.Bind(8, p.data_s());
  st.Bind(9, p.compute_s());
  st.Bind(10, p.comm_s());
  st.Bind(11, p.elapsed_s());
  return st.Run();
}

absl::StatusOr<std::vector<StoredJob::Rank>> LoadRanks(
    sqlite3* db, const std::string& job_id) {
  SqliteStatement st(db,
                     "SELECT rank, worker_id, worker_name, finished, active "
                     "FROM job_ranks WHERE job_id = ?1 ORDER BY rank");
  st.Bind(1, job_id);
  std::vector<StoredJob::Rank> ranks;
  while (true) {
    PS_ASSIGN_OR_RETURN(bool row, st.Step());
    if (!row) break;
    if (st.Int(0) != static_cast<int64_t>(ranks.size())) {
      return absl::DataLossError(
          absl::StrCat("job ", job_id, ": ranks are not 0..n-1"));
    }
    ranks.push_back({st.Text(1), st.Text(2), st.Int(3) != 0, st.Int(4) != 0});
  }
  return ranks;
}

absl::StatusOr<std::vector<StoredJob>> LoadJobs(sqlite3* db) {
  SqliteStatement st(db,
                     "SELECT job_id, registering, leader_samples_per_s, spec, "
                     "placement, status FROM jobs ORDER BY seq");
  std::vector<StoredJob> jobs;
  while (true) {
    PS_ASSIGN_OR_RETURN(bool row, st.Step());
    if (!row) break;
    StoredJob job;
    const std::string id = st.Text(0);
    job.registering = st.Int(1) != 0;
    job.leader_samples_per_s = static_cast<float>(st.Double(2));
    if (!job.status.ParseFromString(st.Text(5)) ||
        !job.status.mutable_spec()->ParseFromString(st.Text(3)) ||
        !job.status.mutable_placement()->ParseFromString(st.Text(4)) ||
        job.status.job_id() != id) {
      return absl::DataLossError(
          absl::StrCat("job ", id, ": stored status does not decode"));
    }
    PS_ASSIGN_OR_RETURN(job.ranks, LoadRanks(db, id));
    jobs.push_back(std::move(job));
  }
  return jobs;
}

absl::StatusOr<std::vector<StoredWorker>> LoadWorkers(sqlite3* db) {
  SqliteStatement st(db,
                     "SELECT worker_id, name, seq, job_id, joined_job, rank, "
                     "start_step, abort_reason FROM workers ORDER BY seq");
  std::vector<StoredWorker> workers;
  while (true) {
    PS_ASSIGN_OR_RETURN(bool row, st.Step());
    if (!row) break;
    StoredWorker w;
    w.id = st.Text(0);
    w.name = st.Text(1);
    w.seq = static_cast<uint64_t>(st.Int(2));
    w.job_id = st.Text(3);
    w.joined_job = st.Text(4);
    w.rank = static_cast<uint32_t>(st.Int(5));
    w.start_step = static_cast<uint64_t>(st.Int(6));
    w.abort_reason = st.Text(7);
    workers.push_back(std::move(w));
  }
  return workers;
}

}  // namespace ps
