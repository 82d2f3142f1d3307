// The job store's rows (server/coordinator/job_store.h): each table's
// reads and writes as SQL over an open database, inside the store's
// transactions. Private to //server/coordinator:job_store.
#ifndef SERVER_COORDINATOR_JOB_STORE_ROWS_H_
#define SERVER_COORDINATOR_JOB_STORE_ROWS_H_

#include <sqlite3.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/coordinator.pb.h"
#include "server/coordinator/job_store.h"

namespace ps {

// The first column of the first row of `sql` as text ("" for no row).
absl::StatusOr<std::string> FirstValue(sqlite3* db, const char* sql);

// The meta table's integer under `key`; `absent` when it has none.
absl::StatusOr<int64_t> Meta(sqlite3* db, const char* key, int64_t absent);
absl::Status SetMeta(sqlite3* db, const char* key, uint64_t value);

// A job's ranks replace its stored ones.
absl::Status WriteRanks(sqlite3* db, const StoredJob& job);
absl::Status InsertJob(sqlite3* db, const StoredJob& job);
// INTERNAL when the job is not stored.
absl::Status UpdateJob(sqlite3* db, const StoredJob& job);
absl::Status WriteWorker(sqlite3* db, const StoredWorker& w);
absl::Status WriteProgress(sqlite3* db, const std::string& job_id,
                           const Progress& p);

// DATA_LOSS naming the job when its rows do not decode.
absl::StatusOr<std::vector<StoredJob::Rank>> LoadRanks(
    sqlite3* db, const std::string& job_id);
absl::StatusOr<std::vector<StoredJob>> LoadJobs(sqlite3* db);
absl::StatusOr<std::vector<StoredWorker>> LoadWorkers(sqlite3* db);

}  // namespace ps

#endif  // SERVER_COORDINATOR_JOB_STORE_ROWS_H_
