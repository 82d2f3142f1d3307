#include "server/coordinator/sqlite_statement.h"

#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"

namespace ps {

absl::Status SqliteError(sqlite3* db, absl::string_view what) {
  const int code = sqlite3_extended_errcode(db);
  return absl::UnavailableError(absl::StrCat(what, ": ", sqlite3_errmsg(db),
                                             " (", sqlite3_errstr(code), ")"));
}

absl::Status SqliteExec(sqlite3* db, const char* sql) {
  if (sqlite3_exec(db, sql, nullptr, nullptr, nullptr) != SQLITE_OK) {
    return SqliteError(db, sql);
  }
  return absl::OkStatus();
}

SqliteStatement::SqliteStatement(sqlite3* db, const char* sql) : db_(db) {
  Check(sqlite3_prepare_v2(db, sql, -1, &stmt_, nullptr), sql);
}

SqliteStatement::~SqliteStatement() { sqlite3_finalize(stmt_); }

void SqliteStatement::Check(int rc, const char* what) {
  if (rc != SQLITE_OK && status_.ok()) status_ = SqliteError(db_, what);
}

void SqliteStatement::Bind(int index, int64_t value) {
  if (stmt_ != nullptr) Check(sqlite3_bind_int64(stmt_, index, value), "bind");
}

void SqliteStatement::Bind(int index, double value) {
  if (stmt_ != nullptr) Check(sqlite3_bind_double(stmt_, index, value), "bind");
}

void SqliteStatement::Bind(int index, absl::string_view text) {
  if (stmt_ == nullptr) return;
  Check(sqlite3_bind_text(stmt_, index, text.data(),
                          static_cast<int>(text.size()), SQLITE_TRANSIENT),
        "bind");
}

void SqliteStatement::BindBlob(int index, absl::string_view bytes) {
  if (stmt_ == nullptr) return;
  Check(sqlite3_bind_blob(stmt_, index, bytes.data(),
                          static_cast<int>(bytes.size()), SQLITE_TRANSIENT),
        "bind");
}

void SqliteStatement::BindOrNull(int index, double value) {
  if (stmt_ == nullptr) return;
  if (std::isnan(value)) {
    Check(sqlite3_bind_null(stmt_, index), "bind");
  } else {
    Bind(index, value);
  }
}

absl::StatusOr<bool> SqliteStatement::Step() {
  if (!status_.ok()) return status_;
  const int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  status_ = SqliteError(db_, sqlite3_sql(stmt_));
  return status_;
}

absl::Status SqliteStatement::Run() {
  absl::StatusOr<bool> row = Step();
  if (!row.ok()) return row.status();
  return absl::OkStatus();
}

int SqliteStatement::Changes() const { return sqlite3_changes(db_); }

int64_t SqliteStatement::Int(int column) const {
  return sqlite3_column_int64(stmt_, column);
}

double SqliteStatement::Double(int column) const {
  return sqlite3_column_double(stmt_, column);
}

double SqliteStatement::DoubleOrNaN(int column) const {
  if (sqlite3_column_type(stmt_, column) == SQLITE_NULL) {
    return std::numeric_limits<double>::quiet_NaN();
  }
  return Double(column);
}

std::string SqliteStatement::Text(int column) const {
  const void* data = sqlite3_column_blob(stmt_, column);
  const int size = sqlite3_column_bytes(stmt_, column);
  if (data == nullptr) return std::string();
  return std::string(static_cast<const char*>(data), size);
}

}  // namespace ps
