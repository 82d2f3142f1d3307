// An .npz writer for arrays larger than memory: entries are written as
// their bytes arrive, and an array's leading dimension (its row count) need
// not be known until it ends. numpy.load reads the result; entries or an
// archive past 4 GiB use zip64, which numpy (Python's zipfile) reads.
//
//   PS_ASSIGN_OR_RETURN(std::unique_ptr<NpzStreamWriter> w,
//                       NpzStreamWriter::Create("/tmp/emb.npz"));
//   PS_RETURN_IF_ERROR(w->Begin("emb/values", "<f4", 4, {16}));
//   for (...) PS_RETURN_IF_ERROR(w->Append(rows_bytes));  // whole rows
//   PS_RETURN_IF_ERROR(w->End());                      // shape (rows, 16)
//   PS_RETURN_IF_ERROR(w->Add(NpyArray::Bytes("__job_spec__", json)));
//   PS_RETURN_IF_ERROR(w->Commit());
//
// Memory: a write buffer (kBufferBytes) and the central directory (about
// 100 bytes per entry), whatever the arrays' sizes. Each array's .npy
// header is written with room for any row count and rewritten at End, with
// the local header's sizes and CRC-32 (zlib's crc32_combine joins the
// header's CRC to the data's).
//
// The file appears complete or not at all: everything goes to
// "<path>.tmp.<pid>" in the same folder, and Commit fsyncs and renames it
// to `path`; a writer destroyed without a successful Commit removes it.
// Thread-compatible. Blocks on file I/O.
#ifndef CORE_NPZ_STREAM_WRITER_H_
#define CORE_NPZ_STREAM_WRITER_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/npz_writer.h"

namespace ps {

class NpzStreamWriter {
 public:
  static constexpr size_t kBufferBytes = 1 << 20;

  struct Options {
    // Sizes and offsets from this on are written as zip64 (0xFFFFFFFF, as
    // zip requires; lower only to test the zip64 records on small files).
    uint64_t zip64_at = 0xFFFFFFFFull;
  };

  // Creates the temporary file. kInvalidArgument naming it when it cannot.
  static absl::StatusOr<std::unique_ptr<NpzStreamWriter>> Create(
      std::string path, Options options);
  static absl::StatusOr<std::unique_ptr<NpzStreamWriter>> Create(
      std::string path) {
    return Create(std::move(path), Options());
  }
  ~NpzStreamWriter();
  NpzStreamWriter(const NpzStreamWriter&) = delete;
  NpzStreamWriter& operator=(const NpzStreamWriter&) = delete;

  // A whole array (outside Begin/End).
  absl::Status Add(const NpyArray& a);

  // Starts the array `name` ("<name>.npy"; unique and non-empty) of numpy
  // dtype `descr`, `item_bytes` per element, shape (rows, row_shape...).
  // kInvalidArgument for a bad or repeated name, or inside another array.
  absl::Status Begin(std::string name, std::string descr, size_t item_bytes,
                     std::vector<uint64_t> row_shape);
  // Appends elements (C order) of the array begun.
  absl::Status Append(absl::string_view bytes);
  // Ends it: rows = appended bytes / row bytes. kInvalidArgument when the
  // bytes are not a whole number of rows.
  absl::Status End();
  // Rows of the array begun so far.
  uint64_t rows() const;

  // Writes the central directory, fsyncs and renames onto `path`. Errors
  // name the file; after one (from any call) nothing is left behind once
  // the writer is destroyed. Call once, outside Begin/End.
  absl::Status Commit();

  // Bytes written to the file so far (buffered ones included).
  uint64_t bytes() const { return offset_; }
  const std::string& path() const { return path_; }

 private:
  struct Entry {
    std::string file;  // name + ".npy"
    uint32_t crc = 0;
    uint64_t size = 0;    // of the .npy (header + data)
    uint64_t offset = 0;  // of the local header
  };
  // The array being streamed.
  struct Open {
    Entry entry;
    std::string descr;
    std::vector<uint64_t> row_shape;
    uint64_t row_bytes = 0;  // 0 for a row of no elements
    uint64_t header_bytes = 0;
    uint64_t data_bytes = 0;
    uint32_t data_crc = 0;
  };

  NpzStreamWriter(std::string path, std::string tmp, int fd, Options options);
  absl::Status CheckName(const std::string& name);
  absl::Status Write(absl::string_view bytes);
  absl::Status WriteOut(absl::string_view bytes);  // unbuffered
  absl::Status Flush();
  absl::Status PatchAt(uint64_t offset, const std::string& bytes);
  absl::Status Fail(absl::Status st);

  const Options options_;
  const std::string path_;
  const std::string tmp_;
  int fd_;
  std::string buffer_;
  uint64_t offset_ = 0;  // file offset of the end of buffer_
  std::set<std::string> names_;
  std::vector<Entry> entries_;
  std::unique_ptr<Open> open_;
  absl::Status failed_;
  bool committed_ = false;
};

}  // namespace ps

#endif  // CORE_NPZ_STREAM_WRITER_H_
