#include "common/text_proto.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
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
    // The column itself may be the colon ("field: specified twice").
    size_t colon = text.rfind(':', std::min<size_t>(column, text.size()));
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

// Protobuf's text parser rejects a singular field given twice only when the
// first value is not the default (proto3 scalars have no presence), so
// "shard_id: 0 shard_id: 1" would silently mean 1. This scan, run after a
// successful parse, reports every repeat of a singular field. It follows the
// structure the parser already accepted; on anything it does not model
// (extensions, Any, lists of messages) it stops and reports nothing more.
class DuplicateFieldScan {
 public:
  DuplicateFieldScan(const std::string& text, const std::string& name,
                     const google::protobuf::Descriptor* root)
      : input_(text.data(), static_cast<int>(text.size())),
        tokenizer_(&input_, &ignore_),
        name_(name) {
    tokenizer_.set_allow_f_after_float(true);
    tokenizer_.set_comment_style(
        google::protobuf::io::Tokenizer::SH_COMMENT_STYLE);
    scopes_.push_back({root, {}});
  }

  std::vector<std::string> Run() {
    tokenizer_.Next();
    while (Scan()) {
    }
    return errors_;
  }

 private:
  using Tokenizer = google::protobuf::io::Tokenizer;
  using Token = Tokenizer::Token;
  struct Scope {
    const google::protobuf::Descriptor* type;
    absl::flat_hash_map<std::string, std::pair<int, int>> seen;  // line, col
  };

  const Token& At() { return tokenizer_.current(); }
  bool Is(const char* symbol) { return At().text == symbol; }
  bool Next() { return tokenizer_.Next(); }

  // One field (or a closing brace); false when done or lost.
  bool Scan() {
    if (At().type == Tokenizer::TYPE_END) return false;
    if (Is("}") || Is(">")) {
      if (scopes_.size() <= 1) return false;
      scopes_.pop_back();
      Next();
      SkipSeparator();
      return true;
    }
    if (At().type != Tokenizer::TYPE_IDENTIFIER) return false;
    const Token field_token = At();
    Scope& scope = scopes_.back();
    const google::protobuf::FieldDescriptor* field =
        scope.type->FindFieldByName(field_token.text);
    if (field == nullptr) return false;
    if (!field->is_repeated()) {
      auto [it, inserted] = scope.seen.emplace(
          field_token.text,
          std::make_pair(field_token.line, field_token.column));
      if (!inserted) {
        errors_.push_back(absl::StrCat(
            name_, ":", field_token.line + 1, ":", field_token.column + 1,
            ": Non-repeated field \"", field_token.text,
            "\" is specified multiple times (first at ", it->second.first + 1,
            ":", it->second.second + 1, ")."));
      }
    }
    Next();
    if (Is(":")) Next();
    if (Is("{") || Is("<")) {
      if (field->message_type() == nullptr) return false;
      scopes_.push_back({field->message_type(), {}});
      Next();
      return true;
    }
    if (Is("[")) {
      // A list of scalars: its elements are values, not fields.
      while (Next() && !Is("]")) {
        if (Is("{") || Is("<")) return false;
      }
      if (!Is("]")) return false;
      Next();
    } else {
      if (Is("-")) Next();
      if (At().type == Tokenizer::TYPE_END) return false;
      const bool string = At().type == Tokenizer::TYPE_STRING;
      Next();
      while (string && At().type == Tokenizer::TYPE_STRING) Next();  // "a" "b"
    }
    SkipSeparator();
    return true;
  }

  void SkipSeparator() {
    if (Is(",") || Is(";")) Next();
  }

  class Ignore : public google::protobuf::io::ErrorCollector {
   public:
    void AddError(int, google::protobuf::io::ColumnNumber,
                  const std::string&) override {}
  };

  Ignore ignore_;
  google::protobuf::io::ArrayInputStream input_;
  google::protobuf::io::Tokenizer tokenizer_;
  const std::string name_;
  std::vector<Scope> scopes_;
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
  std::vector<std::string> duplicates =
      DuplicateFieldScan(text, name, message->GetDescriptor()).Run();
  if (!duplicates.empty()) {
    message->Clear();
    return absl::InvalidArgumentError(absl::StrJoin(duplicates, "\n"));
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
  PS_RETURN_IF_ERROR(ReadFile(path, &text));
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
