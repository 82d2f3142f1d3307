// SqliteStatement: one prepared SQLite statement with typed binds and
// columns, finalized by its destructor; errors as absl::Status carrying
// SQLite's message. Used by the job store (job_store.h).
//
//   SqliteStatement st(db, "SELECT name FROM jobs WHERE job_id = ?1");
//   st.Bind(1, job_id);
//   while (true) {
//     PS_ASSIGN_OR_RETURN(bool row, st.Step());
//     if (!row) break;
//     names.push_back(st.Text(0));
//   }
//   PS_RETURN_IF_ERROR(st.status());
#ifndef SERVER_COORDINATOR_SQLITE_STATEMENT_H_
#define SERVER_COORDINATOR_SQLITE_STATEMENT_H_

#include <sqlite3.h>

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ps {

// `what` and SQLite's last error on `db`: "what: database disk image is
// malformed (SQLITE_CORRUPT)".
absl::Status SqliteError(sqlite3* db, absl::string_view what);

// Runs `sql` (one or more statements without results).
absl::Status SqliteExec(sqlite3* db, const char* sql);

// Not thread-safe. A failed prepare or bind is kept and returned by Step.
class SqliteStatement {
 public:
  SqliteStatement(sqlite3* db, const char* sql);
  ~SqliteStatement();
  SqliteStatement(const SqliteStatement&) = delete;
  SqliteStatement& operator=(const SqliteStatement&) = delete;

  // 1-based parameter index.
  void Bind(int index, int64_t value);
  void Bind(int index, double value);
  void Bind(int index, absl::string_view text);
  void BindBlob(int index, absl::string_view bytes);
  // A metric that may be unmeasured: NaN is bound as NULL (SQLite would
  // bind NaN as NULL anyway; this says so where a column allows it).
  void BindOrNull(int index, double value);

  // True: a row is ready; false: done. Errors name the statement's SQL.
  absl::StatusOr<bool> Step();
  // Runs a statement that returns no rows.
  absl::Status Run();
  // Rows changed by the last Run (INSERT, UPDATE, DELETE).
  int Changes() const;

  // 0-based column of the current row.
  int64_t Int(int column) const;
  double Double(int column) const;
  double DoubleOrNaN(int column) const;  // NULL reads as NaN (BindOrNull)
  std::string Text(int column) const;    // also reads blobs

  const absl::Status& status() const { return status_; }

 private:
  void Check(int rc, const char* what);

  sqlite3* db_;
  sqlite3_stmt* stmt_ = nullptr;
  absl::Status status_;
};

}  // namespace ps

#endif  // SERVER_COORDINATOR_SQLITE_STATEMENT_H_
