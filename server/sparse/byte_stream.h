// The byte-stream interfaces SparseTable::Save and Restore write to and read
// from, and in-memory implementations. The table's format is
// self-delimiting, so a caller may embed it in a larger file (the shard's
// checkpoint) and read on after it.
//
//   std::string bytes;
//   StringSink sink(&bytes);
//   PS_RETURN_IF_ERROR(table.Save(sink));
//   StringSource source(bytes);
//   PS_RETURN_IF_ERROR(other.Restore(source));
#ifndef SERVER_SPARSE_BYTE_STREAM_H_
#define SERVER_SPARSE_BYTE_STREAM_H_

#include <cstddef>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace ps {

class ByteSink {
 public:
  virtual ~ByteSink() = default;
  // Appends `bytes`; an error aborts the save (returned to its caller).
  virtual absl::Status Write(absl::string_view bytes) = 0;
};

class ByteSource {
 public:
  virtual ~ByteSource() = default;
  // Reads exactly `n` bytes into `out`; kDataLoss if fewer remain.
  virtual absl::Status Read(size_t n, char* out) = 0;
};

// Appends to a borrowed string (which must outlive the sink).
class StringSink : public ByteSink {
 public:
  explicit StringSink(std::string* out) : out_(out) {}
  absl::Status Write(absl::string_view bytes) override;

 private:
  std::string* out_;
};

// Reads a borrowed buffer (which must outlive the source) front to back.
class StringSource : public ByteSource {
 public:
  explicit StringSource(absl::string_view bytes) : bytes_(bytes) {}
  absl::Status Read(size_t n, char* out) override;
  size_t remaining() const { return bytes_.size(); }

 private:
  absl::string_view bytes_;
};

}  // namespace ps

#endif  // SERVER_SPARSE_BYTE_STREAM_H_
