// Early-return helpers for absl::Status and absl::StatusOr.
//
//   absl::Status Load(const std::string& path) {
//     PS_RETURN_IF_ERROR(CheckReadable(path));
//     PS_ASSIGN_OR_RETURN(Config config, ParseConfig(path));
//     ...
//   }
#ifndef COMMON_STATUS_MACROS_H_
#define COMMON_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define PS_RETURN_IF_ERROR(expr)             \
  do {                                       \
    ::absl::Status ps_status_ = (expr);      \
    if (!ps_status_.ok()) return ps_status_; \
  } while (0)

#define PS_STATUS_CONCAT_INNER_(a, b) a##b
#define PS_STATUS_CONCAT_(a, b) PS_STATUS_CONCAT_INNER_(a, b)

#define PS_ASSIGN_OR_RETURN(lhs, expr)                                      \
  PS_ASSIGN_OR_RETURN_IMPL_(PS_STATUS_CONCAT_(ps_statusor_, __LINE__), lhs, \
                            expr)

#define PS_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, expr) \
  auto statusor = (expr);                              \
  if (!statusor.ok()) return statusor.status();        \
  lhs = std::move(statusor).value()

#endif  // COMMON_STATUS_MACROS_H_
