#include "common/text_proto.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/text_format.h"

namespace ps {
namespace {

// Collects every parser complaint as "name:line:col: message".
// Protobuf's type errors ("Expected integer, got: \"zero\"") do not say
// which field; the field name is read back from the offending line.
class Collector : public google::protobuf::io::ErrorCollector {
 public:
  Collector(std::string name, const std::string& text)
      : name_(std::move(name)), lines_(absl::StrSplit(text, '\n')) {}
  void AddError(int line, google::protobuf::io::ColumnNumber column,
                const std::string& message) override {
    std::string field = FieldOnLine(line, column);
    std::string where =
        field.empty() || absl::StrContains(message, "\"" + field + "\"")
            ? ""
            : absl::StrCat(" (field \"", field, "\")");
    errors_.push_back(absl::StrCat(name_, ":", line + 1, ":", column + 1, ": ",
                                   message, where));
  }
  void AddWarning(int line, google::protobuf::io::ColumnNumber column,
                  const std::string& message) override {
    AddError(line, column, message);  // warnings are errors in config files
  }
  const std::vector<std::string>& errors() const { return errors_; }

 private:
  // The last "identifier:" before `column` on `line`, or "".
  std::string FieldOnLine(int line, int column) const {
    if (line < 0 || line >= static_cast<int>(lines_.size())) return "";
    const std::string& text = lines_[line];
    size_t end = std::min<size_t>(column, text.size());
    size_t colon = text.rfind(':', end == 0 ? 0 : end - 1);
    if (colon == std::string::npos) return "";
    size_t stop = colon;
    while (stop > 0 && text[stop - 1] == ' ') --stop;
    size_t start = stop;
    while (start > 0 &&
           (absl::ascii_isalnum(text[start - 1]) || text[start - 1] == '_')) {
      --start;
    }
    return text.substr(start, stop - start);
  }

  std::string name_;
  std::vector<std::string> lines_;
  std::vector<std::string> errors_;
};

absl::Status ErrnoStatus(const std::string& what, const std::string& path) {
  int err = errno;
  std::string msg = absl::StrCat(path, ": ", what, ": ", std::strerror(err));
  if (err == ENOENT) return absl::NotFoundError(msg);
  if (err == EACCES) return absl::PermissionDeniedError(msg);
  return absl::InternalError(msg);
}

}  // namespace

absl::Status ParseTextProto(const std::string& text, const std::string& name,
                            google::protobuf::Message* message) {
  Collector collector(name, text);
  google::protobuf::TextFormat::Parser parser;
  parser.RecordErrorsTo(&collector);
  message->Clear();
  bool ok = parser.ParseFromString(text, message);
  if (!collector.errors().empty()) {
    message->Clear();
    return absl::InvalidArgumentError(absl::StrJoin(collector.errors(), "\n"));
  }
  if (!ok) {
    message->Clear();
    return absl::InvalidArgumentError(absl::StrCat(name, ": cannot parse"));
  }
  return absl::OkStatus();
}

absl::Status ReadFile(const std::string& path, std::string* contents,
                      size_t max_bytes) {
  if (path.empty()) return absl::InvalidArgumentError("empty file name");
  // O_NONBLOCK: opening a FIFO must not wait for a writer; the fstat below
  // then refuses it.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return ErrnoStatus("cannot open", path);
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    absl::Status s = ErrnoStatus("cannot stat", path);
    ::close(fd);
    return s;
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": ",
        S_ISDIR(st.st_mode) ? "is a directory" : "is not a regular file"));
  }
  if (static_cast<uint64_t>(st.st_size) > max_bytes) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", st.st_size,
                                                   " bytes, more than the ",
                                                   max_bytes, " allowed"));
  }
  std::string out;
  char buffer[64 << 10];
  while (true) {
    ssize_t n = ::read(fd, buffer, sizeof(buffer));
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n < 0) {
      absl::Status s = ErrnoStatus("cannot read", path);
      ::close(fd);
      return s;
    }
    if (n == 0) break;
    // The size can change under us (a file still being written, /proc).
    if (out.size() + static_cast<size_t>(n) > max_bytes) {
      ::close(fd);
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": more than the ", max_bytes, " bytes allowed"));
    }
    out.append(buffer, static_cast<size_t>(n));
  }
  ::close(fd);
  *contents = std::move(out);
  return absl::OkStatus();
}

absl::Status ParseTextProtoFile(const std::string& path,
                                google::protobuf::Message* message) {
  std::string text;
  absl::Status read = ReadFile(path, &text);
  if (!read.ok()) return read;
  return ParseTextProto(text, path, message);
}

absl::Status WriteFileAtomically(const std::string& path,
                                 const std::string& contents) {
  std::string tmp = absl::StrCat(path, ".tmp.", getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoStatus("cannot create", tmp);
  size_t written = 0;
  while (written < contents.size()) {
    ssize_t n =
        ::write(fd, contents.data() + written, contents.size() - written);
    if (n < 0) {
      if (errno == EINTR) continue;
      absl::Status s = ErrnoStatus("cannot write", tmp);
      ::close(fd);
      ::unlink(tmp.c_str());
      return s;
    }
    written += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) {
    absl::Status s = ErrnoStatus("cannot fsync", tmp);
    ::close(fd);
    ::unlink(tmp.c_str());
    return s;
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    absl::Status s = ErrnoStatus("cannot rename to " + path, tmp);
    ::unlink(tmp.c_str());
    return s;
  }
  return absl::OkStatus();
}

std::string ResolvePath(const std::string& path,
                        const std::string& relative_to_file) {
  if (path.empty() || path[0] == '/') return path;
  std::filesystem::path base =
      std::filesystem::path(relative_to_file).parent_path();
  return (base / path).lexically_normal().string();
}

}  // namespace ps
