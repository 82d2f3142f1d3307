// The byte-level pieces of the checkpoint file format (the layout is drawn
// in server/checkpoint.h): header constants and a bounds-checked reader
// over little-endian integers and floats (le_bytes.h). Internal to
// server/checkpoint*.cc.
//
// Not synchronized: each Reader belongs to one decode.
#ifndef SERVER_INTERNAL_CHECKPOINT_FORMAT_H_
#define SERVER_INTERNAL_CHECKPOINT_FORMAT_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "server/internal/le_bytes.h"

namespace ps {
namespace internal {

inline constexpr char kCheckpointMagic[8] = {'P', 'S', 'C',  'K',
                                             'P', 'T', '\r', '\n'};
// Format 1: no sparse tables. Format 2: the same payload followed by the
// reference to the companion tables file (checkpoint.h).
inline constexpr uint32_t kCheckpointFormat = 1;
inline constexpr uint32_t kCheckpointFormatWithTables = 2;
// The companion tables file's header: magic, format, shard, sequence.
inline constexpr char kTablesMagic[8] = {'P', 'S', 'T', 'A',
                                         'B', 'L', 'E', '\n'};
inline constexpr uint32_t kTablesFormat = 1;
inline constexpr size_t kTablesHeaderBytes = 24;
// An increment's: the same, then its base's sequence, bytes and CRC32C.
inline constexpr uint32_t kTablesIncrementFormat = 2;
inline constexpr size_t kTablesIncrementHeaderBytes = 44;
// The longest chain of tables files a restore follows.
inline constexpr size_t kMaxTablesChain = 1000;
// Header offsets (see the table in server/checkpoint.h).
inline constexpr size_t kFormatAt = 8;
inline constexpr size_t kShardAt = 12;
inline constexpr size_t kSequenceAt = 16;
inline constexpr size_t kStepAt = 24;
inline constexpr size_t kPayloadBytesAt = 32;
inline constexpr size_t kCrcAt = 40;

// Bounds-checked reads over the payload; the first failure sticks and
// names what was being read.
class Reader {
 public:
  explicit Reader(absl::string_view bytes) : bytes_(bytes) {}

  bool U8(const std::string& what, uint8_t* v) { return Int(what, 1, v); }
  bool U32(const std::string& what, uint32_t* v) { return Int(what, 4, v); }
  bool U64(const std::string& what, uint64_t* v) { return Int(what, 8, v); }
  bool Bytes(const std::string& what, uint64_t n, absl::string_view* out);
  bool Floats(const std::string& what, absl::Span<float> out);

  size_t remaining() const { return bytes_.size() - at_; }
  const std::string& error() const { return error_; }

 private:
  template <typename T>
  bool Int(const std::string& what, int n, T* v) {
    if (!Need(what, n)) return false;
    *v = static_cast<T>(GetLe(bytes_.data() + at_, n));
    at_ += n;
    return true;
  }
  bool Need(const std::string& what, uint64_t n);
  bool Fail(const std::string& what, uint64_t n);

  absl::string_view bytes_;
  size_t at_ = 0;
  std::string error_;
};

}  // namespace internal
}  // namespace ps

#endif  // SERVER_INTERNAL_CHECKPOINT_FORMAT_H_
