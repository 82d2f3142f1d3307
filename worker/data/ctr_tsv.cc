#include "worker/data/ctr_tsv.h"

#include <zlib.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"

namespace ps {
namespace {

constexpr int kMaxHexDigits = 8;
constexpr size_t kReadChunk = 64 << 10;

absl::Status ColumnError(int column, absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat("column ", column, ": ", what));
}

// 1 to 8 hex digits, either case.
bool ParseHex32(absl::string_view s, uint64_t* out) {
  if (s.empty() || s.size() > kMaxHexDigits) return false;
  uint64_t v = 0;
  for (char c : s) {
    int d;
    if (c >= '0' && c <= '9') {
      d = c - '0';
    } else if (c >= 'a' && c <= 'f') {
      d = c - 'a' + 10;
    } else if (c >= 'A' && c <= 'F') {
      d = c - 'A' + 10;
    } else {
      return false;
    }
    v = v << 4 | static_cast<uint64_t>(d);
  }
  *out = v;
  return true;
}

// Strict decimal integer: optional '-', digits, nothing else.
bool ParseInt(absl::string_view s, int64_t* out) {
  if (s.empty()) return false;
  const size_t start = s[0] == '-' ? 1 : 0;
  if (start == s.size()) return false;
  for (size_t i = start; i < s.size(); ++i) {
    if (s[i] < '0' || s[i] > '9') return false;
  }
  return absl::SimpleAtoi(s, out);  // false on overflow
}

// At most 40 characters of `s`, for messages.
std::string Quote(absl::string_view s) {
  constexpr size_t kMax = 40;
  if (s.size() <= kMax) return absl::StrCat("'", s, "'");
  return absl::StrCat("'", s.substr(0, kMax), "...'");
}

}  // namespace

absl::Status ParseCtrTsvRow(absl::string_view row, CtrExample* out) {
  if (!row.empty() && row.back() == '\r') row.remove_suffix(1);
  if (row.empty()) {
    return ColumnError(
        1, absl::StrFormat("empty line, want %d columns", kCtrTsvColumns));
  }
  int column = 0;  // 0-based index of the column being parsed
  size_t pos = 0;
  for (;;) {
    const size_t tab = row.find('\t', pos);
    const absl::string_view cell =
        row.substr(pos, tab == absl::string_view::npos ? absl::string_view::npos
                                                       : tab - pos);
    if (column >= kCtrTsvColumns) {
      return ColumnError(
          column + 1, absl::StrFormat("more than %d columns", kCtrTsvColumns));
    }
    if (column == 0) {
      if (cell != "0" && cell != "1") {
        return ColumnError(
            1, absl::StrCat("label ", Quote(cell), " is not 0 or 1"));
      }
      out->label = cell == "1" ? 1.0f : 0.0f;
    } else if (column <= kCtrDenseFeatures) {
      const int j = column - 1;
      int64_t x = 0;
      if (!cell.empty() && !ParseInt(cell, &x)) {
        return ColumnError(
            column + 1,
            absl::StrCat("I", j + 1, " = ", Quote(cell), " is not an integer"));
      }
      out->dense[j] =
          static_cast<float>(std::log1p(static_cast<double>(x > 0 ? x : 0)));
    } else {
      const int f = column - 1 - kCtrDenseFeatures;
      uint64_t v = kCtrMissingValue;
      if (!cell.empty() && !ParseHex32(cell, &v)) {
        return ColumnError(column + 1,
                           absl::StrCat("C", f + 1, " = ", Quote(cell),
                                        " is not 1 to 8 hex digits"));
      }
      out->ids[f] = CtrId(f, v);
    }
    ++column;
    if (tab == absl::string_view::npos) break;
    pos = tab + 1;
  }
  if (column != kCtrTsvColumns) {
    return ColumnError(
        column, absl::StrFormat("%d columns, want %d", column, kCtrTsvColumns));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<CtrTsvReader>> CtrTsvReader::Open(
    const std::string& path) {
  gzFile file = gzopen(path.c_str(), "rb");
  if (file == nullptr) {
    const int err = errno;
    const std::string msg =
        absl::StrCat(path, ": cannot open: ", std::strerror(err));
    return err == ENOENT ? absl::NotFoundError(msg)
                         : absl::PermissionDeniedError(msg);
  }
  gzbuffer(file, kReadChunk);
  return std::unique_ptr<CtrTsvReader>(new CtrTsvReader(path, file));
}

CtrTsvReader::CtrTsvReader(std::string path, gzFile_s* file)
    : path_(std::move(path)), file_(file) {}

CtrTsvReader::~CtrTsvReader() { gzclose(file_); }

absl::StatusOr<bool> CtrTsvReader::ReadLine() {
  line_buf_.clear();
  bool too_long = false;
  char buf[4096];
  for (;;) {
    if (gzgets(file_, buf, sizeof(buf)) == nullptr) {
      int err = Z_OK;
      const char* msg = gzerror(file_, &err);
      if (err != Z_OK) {
        failed_ = absl::DataLossError(
            absl::StrFormat("%s:%d: read error: %s", path_, line_ + 1,
                            err == Z_ERRNO ? std::strerror(errno) : msg));
        return failed_;
      }
      if (line_buf_.empty() && !too_long) return false;  // clean end
      break;  // a last line without '\n'
    }
    const size_t n = std::strlen(buf);
    const bool ends = n > 0 && buf[n - 1] == '\n';
    if (!too_long) line_buf_.append(buf, ends ? n - 1 : n);
    if (line_buf_.size() > kCtrTsvMaxLineBytes) {
      too_long = true;  // keep reading to the newline, keep nothing
      line_buf_.clear();
    }
    if (ends) break;
  }
  ++line_;
  if (too_long) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s:%d:1: line longer than %d bytes", path_, line_,
                        kCtrTsvMaxLineBytes));
  }
  return true;
}

absl::StatusOr<bool> CtrTsvReader::Next(CtrExample* out) {
  if (!failed_.ok()) return failed_;
  absl::StatusOr<bool> got = ReadLine();
  if (!got.ok() || !*got) return got;
  if (absl::Status s = ParseCtrTsvRow(line_buf_, out); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s:%d:%s", path_, line_, absl::StripPrefix(s.message(), "column ")));
  }
  return true;
}

absl::StatusOr<bool> CtrTsvReader::Skip() {
  if (!failed_.ok()) return failed_;
  absl::StatusOr<bool> got = ReadLine();
  if (!got.ok() && absl::IsInvalidArgument(got.status())) return true;
  return got;  // a line, the end, or a read error
}

}  // namespace ps
