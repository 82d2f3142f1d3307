// spdlog set-up shared by the daemons and tools.
//
//   PS_RETURN_IF_ERROR(InitLogging("psd", absl::GetFlag(FLAGS_log_level)));
//   spdlog::info("listening on {}", address);
#ifndef COMMON_LOGGING_H_
#define COMMON_LOGGING_H_

#include <string>

#include "absl/status/status.h"

namespace ps {

// Sets the default logger's level ("trace", "debug", "info", "warn",
// "error", "off"; "" = info) and a pattern that names the process. Logs go
// to stderr. InvalidArgument names the bad level.
absl::Status InitLogging(const std::string& process_name,
                         const std::string& level);

}  // namespace ps

#endif  // COMMON_LOGGING_H_
