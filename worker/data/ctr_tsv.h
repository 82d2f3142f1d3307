// CtrTsvReader: streams the Criteo TSV layout (the Display Advertising
// Challenge's train.txt, plain or gzipped) into CtrExamples, one row at a
// time; the file is never loaded whole.
//
//   absl::StatusOr<std::unique_ptr<CtrTsvReader>> reader =
//       CtrTsvReader::Open("/data/criteo/train.txt");
//   if (!reader.ok()) return reader.status();
//   CtrExample e;
//   for (;;) {
//     absl::StatusOr<bool> more = (*reader)->Next(&e);
//     if (!more.ok()) return more.status();  // or log it and go on
//     if (!*more) break;                     // end of file
//     ...
//   }
//
// A row is 40 tab-separated columns: the label (0 or 1), 13 integer columns
// I1..I13 and 26 categorical columns C1..C26 of 1 to 8 hex digits; any
// column but the label may be empty (missing). It becomes (the contract in
// worker/data/ctr_example.h):
//   dense[j] = log(1 + max(x, 0)) for integer x (Criteo's counts are >= -3;
//              the log tames their heavy tails), 0 when missing;
//   ids[f]   = CtrId(f, hex value), or CtrId(f, kCtrMissingValue) when
//              missing.
// A trailing '\r' (CRLF files) is ignored.
#ifndef WORKER_DATA_CTR_TSV_H_
#define WORKER_DATA_CTR_TSV_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "worker/data/ctr_example.h"

struct gzFile_s;  // zlib's file handle (gzFile)

namespace ps {

// Rows longer than this are rejected (a Criteo row is under 300 bytes).
inline constexpr size_t kCtrTsvMaxLineBytes = size_t{1} << 20;
inline constexpr int kCtrTsvColumns =
    1 + kCtrDenseFeatures + kCtrCategoricalFields;

// Parses one row without its newline into *out. kInvalidArgument whose
// message starts with the 1-based column ("column 5: ...") for a wrong
// column count, a label other than 0/1, a non-integer in I1..I13 or a
// categorical that is not 1 to 8 hex digits; *out is then unspecified.
absl::Status ParseCtrTsvRow(absl::string_view row, CtrExample* out);

// Not thread-safe: one reader per thread (open the file once per thread).
class CtrTsvReader {
 public:
  // Opens `path` (gzip is detected from its bytes). kNotFound or
  // kPermissionDenied naming the path when it cannot be opened.
  static absl::StatusOr<std::unique_ptr<CtrTsvReader>> Open(
      const std::string& path);

  ~CtrTsvReader();
  CtrTsvReader(const CtrTsvReader&) = delete;
  CtrTsvReader& operator=(const CtrTsvReader&) = delete;

  // Reads the next row into *out: true for a row, false at the end of the
  // file. A bad row is kInvalidArgument naming "path:line:column: ..."; the
  // reader has moved past it, so a caller may skip it and call Next again.
  // A read error or a corrupt gzip stream is kDataLoss naming the path and
  // line, and every later call returns it again.
  absl::StatusOr<bool> Next(CtrExample* out);

  // Moves past the next line without parsing it: true for a line (even one
  // Next would reject), false at the end of the file; read errors as Next.
  // For readers that take every W-th row.
  absl::StatusOr<bool> Skip();

  // Lines read so far (the line of the last row returned or rejected).
  uint64_t line() const { return line_; }
  const std::string& path() const { return path_; }

 private:
  CtrTsvReader(std::string path, gzFile_s* file);

  // Reads one line without its '\n' into line_buf_; false at the end.
  absl::StatusOr<bool> ReadLine();

  const std::string path_;
  gzFile_s* const file_;  // owned; closed by the destructor
  uint64_t line_ = 0;
  absl::Status failed_;  // sticky I/O error
  std::string line_buf_;
};

}  // namespace ps

#endif  // WORKER_DATA_CTR_TSV_H_
