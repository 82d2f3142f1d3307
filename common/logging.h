// spdlog set-up shared by the daemons and tools.
//
//   PS_RETURN_IF_ERROR(InitLogging("psd", absl::GetFlag(FLAGS_log_level)));
//   spdlog::info("listening on {}", address);
#ifndef COMMON_LOGGING_H_
#define COMMON_LOGGING_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "fmt/format.h"

namespace ps {

// Sets the default logger's level ("trace", "debug", "info", "warn",
// "error", "off"; "" = info) and a pattern that names the process. Logs go
// to stderr. InvalidArgument names the bad level.
absl::Status InitLogging(const std::string& process_name,
                         const std::string& level);

}  // namespace ps

// Debian's Abseil has its own string_view type (not std::string_view); this
// lets spdlog/fmt print it, e.g. spdlog::warn("{}", status.message()).
template <>
struct fmt::formatter<absl::string_view> : fmt::formatter<fmt::string_view> {
  template <typename FormatContext>
  auto format(absl::string_view s, FormatContext& ctx) const {
    return fmt::formatter<fmt::string_view>::format(
        fmt::string_view(s.data(), s.size()), ctx);
  }
};

#endif  // COMMON_LOGGING_H_
