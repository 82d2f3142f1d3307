// Loading protobuf text-format (.pbtxt) files with precise errors.
//
//   ps::PsdConfig config;
//   absl::Status s = ps::ParseTextProtoFile("configs/local/psd0.pbtxt",
//   &config);
//   // s: "configs/local/psd0.pbtxt:3:1: Message type "ps.PsdConfig" has no
//   //     field named "listen_adress"."
#ifndef COMMON_TEXT_PROTO_H_
#define COMMON_TEXT_PROTO_H_

#include <string>

#include "absl/status/status.h"
#include "google/protobuf/message.h"

namespace ps {

// Parses `text` into `message` (cleared first). Every syntax error, unknown
// field or wrong type is reported as "<name>:<line>:<col>: <reason>"
// (1-based), all of them, one per line, as InvalidArgument.
absl::Status ParseTextProto(const std::string& text, const std::string& name,
                            google::protobuf::Message* message);

// Reads `path` and parses it as above. A missing or unreadable file is
// NotFound / PermissionDenied naming the path; see ReadFile for the rest.
absl::Status ParseTextProtoFile(const std::string& path,
                                google::protobuf::Message* message);

// Largest file ReadFile accepts by default: configs, PEM files, tokens and
// job specs are a few KiB, and a path that names something else (a log, a
// disk image) must not make a daemon read it all.
inline constexpr size_t kMaxReadFileBytes = 16u << 20;

// Reads a whole regular file. Every error names the path: NotFound,
// PermissionDenied, or InvalidArgument for a directory, a device, a FIFO or
// socket (which could block or never end), and a file over `max_bytes`.
absl::Status ReadFile(const std::string& path, std::string* contents,
                      size_t max_bytes = kMaxReadFileBytes);

// Writes a file atomically: temporary file in the same folder, fsync,
// rename. Readers see the old contents or the new, never a part.
absl::Status WriteFileAtomically(const std::string& path,
                                 const std::string& contents);

// `path` if absolute or empty, else `path` resolved against the folder
// that holds `relative_to_file`.
std::string ResolvePath(const std::string& path,
                        const std::string& relative_to_file);

}  // namespace ps

#endif  // COMMON_TEXT_PROTO_H_
