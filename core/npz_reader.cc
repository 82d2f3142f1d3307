#include "core/npz_reader.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/status_macros.h"

namespace ps {
namespace {

constexpr uint32_t kLocalHeader = 0x04034b50;
constexpr uint32_t kCentralHeader = 0x02014b50;
constexpr uint32_t kEndOfCentral = 0x06054b50;
constexpr size_t kEndOfCentralBytes = 22;
constexpr size_t kCentralHeaderBytes = 46;
constexpr size_t kLocalHeaderBytes = 30;
constexpr size_t kMaxComment = 0xFFFF;
constexpr char kNpyMagic[] = "\x93NUMPY";
constexpr size_t kNpyMagicBytes = 6;

uint64_t Le(absl::string_view b, size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) {
    v = (v << 8) | static_cast<unsigned char>(b[at + i]);
  }
  return v;
}

absl::Status Bad(absl::string_view what) {
  return absl::InvalidArgumentError(std::string(what));
}

// The value after "'key':" in a .npy header dict, up to the next top-level
// comma or the closing brace.
absl::StatusOr<absl::string_view> DictValue(absl::string_view dict,
                                            absl::string_view key) {
  const std::string quoted = absl::StrCat("'", key, "'");
  size_t at = dict.find(quoted);
  if (at == absl::string_view::npos) {
    return Bad(absl::StrCat("its header has no ", quoted));
  }
  at = dict.find(':', at + quoted.size());
  if (at == absl::string_view::npos) return Bad("its header is not a dict");
  absl::string_view rest = dict.substr(at + 1);
  int depth = 0;
  size_t end = 0;
  for (; end < rest.size(); ++end) {
    const char c = rest[end];
    if (c == '(') ++depth;
    if (c == ')') --depth;
    if (depth == 0 && (c == ',' || c == '}')) break;
  }
  return absl::StripAsciiWhitespace(rest.substr(0, end));
}

absl::StatusOr<std::vector<uint64_t>> ParseShape(absl::string_view v) {
  if (v.size() < 2 || v.front() != '(' || v.back() != ')') {
    return Bad("its shape is not a tuple");
  }
  std::vector<uint64_t> shape;
  uint64_t elements = 1;
  for (absl::string_view d :
       absl::StrSplit(v.substr(1, v.size() - 2), ',', absl::SkipWhitespace())) {
    uint64_t n = 0;
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(d), &n)) {
      return Bad(absl::StrCat("its shape has \"", d, "\""));
    }
    if (n != 0 && elements > kMaxNpzBytes / n) return Bad("its shape is huge");
    elements *= n;
    shape.push_back(n);
  }
  return shape;
}

size_t ItemBytes(absl::string_view descr) {
  size_t n = 0;
  if (descr.size() < 3 || !absl::SimpleAtoi(descr.substr(2), &n)) return 0;
  return n;
}

// One .npy file (the bytes of an entry) into `a` (name already set).
absl::Status DecodeNpy(absl::string_view b, NpyArray* a) {
  if (b.size() < kNpyMagicBytes + 4 ||
      b.substr(0, kNpyMagicBytes) != absl::string_view(kNpyMagic, 6)) {
    return Bad("not a .npy file");
  }
  const int major = static_cast<unsigned char>(b[6]);
  const size_t len_bytes = major == 1 ? 2 : 4;
  if (major < 1 || major > 3 || b.size() < 8 + len_bytes) {
    return Bad(absl::StrCat(".npy format ", major, " is not 1, 2 or 3"));
  }
  const uint64_t header_len = Le(b, 8, len_bytes);
  const size_t data_at = 8 + len_bytes;
  if (header_len > b.size() - data_at) return Bad("its header is truncated");
  const absl::string_view dict = b.substr(data_at, header_len);
  PS_ASSIGN_OR_RETURN(absl::string_view descr, DictValue(dict, "descr"));
  PS_ASSIGN_OR_RETURN(absl::string_view fortran,
                      DictValue(dict, "fortran_order"));
  PS_ASSIGN_OR_RETURN(absl::string_view shape, DictValue(dict, "shape"));
  if (descr.size() < 2 || descr.front() != '\'' || descr.back() != '\'') {
    return Bad("its descr is not a string");
  }
  a->descr = std::string(descr.substr(1, descr.size() - 2));
  if (fortran != "False") {
    return Bad(
        "it is in Fortran order (write it with numpy.ascontiguousarray)");
  }
  PS_ASSIGN_OR_RETURN(a->shape, ParseShape(shape));
  a->data = std::string(b.substr(data_at + header_len));
  uint64_t elements = 1;
  for (uint64_t d : a->shape) elements *= d;
  const size_t item = ItemBytes(a->descr);
  if (item != 0 && a->data.size() != elements * item) {
    return Bad(absl::StrCat("holds ", a->data.size(), " data bytes, its shape ",
                            "and dtype need ", elements * item));
  }
  return absl::OkStatus();
}

// One central directory entry at `at` (moved past it) into `out`.
absl::Status DecodeEntry(absl::string_view bytes, size_t* at,
                         std::set<std::string>* names, NpyArray* out) {
  if (bytes.size() - *at < kCentralHeaderBytes ||
      Le(bytes, *at, 4) != kCentralHeader) {
    return Bad("its central directory is corrupt");
  }
  const size_t c = *at;
  const uint64_t flags = Le(bytes, c + 8, 2);
  const uint64_t method = Le(bytes, c + 10, 2);
  const uint32_t crc = static_cast<uint32_t>(Le(bytes, c + 16, 4));
  const uint64_t size = Le(bytes, c + 20, 4);
  const uint64_t raw_size = Le(bytes, c + 24, 4);
  const size_t name_len = Le(bytes, c + 28, 2);
  const size_t skip = name_len + Le(bytes, c + 30, 2) + Le(bytes, c + 32, 2);
  const uint64_t local = Le(bytes, c + 42, 4);
  if (bytes.size() - c - kCentralHeaderBytes < skip) {
    return Bad("its central directory is truncated");
  }
  const std::string name(bytes.substr(c + kCentralHeaderBytes, name_len));
  *at = c + kCentralHeaderBytes + skip;
  const std::string where = absl::StrCat("entry \"", name, "\": ");
  if (name.size() <= 4 || name.substr(name.size() - 4) != ".npy") {
    return Bad(absl::StrCat(where, "not a .npy file"));
  }
  if (method != 0) {
    return Bad(absl::StrCat(where,
                            "compressed (numpy.savez_compressed); write it "
                            "with numpy.savez or psctl export"));
  }
  if ((flags & 1) != 0) return Bad(absl::StrCat(where, "encrypted"));
  if (size == 0xFFFFFFFF || local == 0xFFFFFFFF || size != raw_size) {
    return Bad(absl::StrCat(where, "zip64 or inconsistent sizes"));
  }
  if (local > bytes.size() || bytes.size() - local < kLocalHeaderBytes ||
      Le(bytes, local, 4) != kLocalHeader) {
    return Bad(absl::StrCat(where, "its local header is missing"));
  }
  const uint64_t data_at = local + kLocalHeaderBytes +
                           Le(bytes, local + 26, 2) + Le(bytes, local + 28, 2);
  if (data_at > bytes.size() || bytes.size() - data_at < size) {
    return Bad(absl::StrCat(where, "truncated"));
  }
  const absl::string_view data = bytes.substr(data_at, size);
  if (ZipCrc32(std::string(data)) != crc) {
    return Bad(absl::StrCat(where, "CRC-32 mismatch: the file is corrupt"));
  }
  out->name = name.substr(0, name.size() - 4);
  if (!names->insert(out->name).second) {
    return Bad(absl::StrCat(where, "appears twice"));
  }
  absl::Status st = DecodeNpy(data, out);
  if (!st.ok()) return Bad(absl::StrCat(where, st.message()));
  return absl::OkStatus();
}

std::string ShapeText(absl::Span<const uint64_t> shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

}  // namespace

absl::StatusOr<std::vector<NpyArray>> DecodeNpz(absl::string_view bytes) {
  // The end of central directory record: the last signature within the
  // comment's reach.
  if (bytes.size() < kEndOfCentralBytes) {
    return Bad("not a zip file (too short; truncated?)");
  }
  size_t eocd = bytes.size() - kEndOfCentralBytes;
  const size_t lowest =
      eocd > kMaxComment ? eocd - kMaxComment : static_cast<size_t>(0);
  while (Le(bytes, eocd, 4) != kEndOfCentral) {
    if (eocd == lowest) return Bad("not a zip file (truncated?)");
    --eocd;
  }
  const uint64_t entries = Le(bytes, eocd + 10, 2);
  const uint64_t dir_size = Le(bytes, eocd + 12, 4);
  const uint64_t dir_at = Le(bytes, eocd + 16, 4);
  if (dir_at > eocd || eocd - dir_at < dir_size) {
    return Bad("its central directory lies outside the file (truncated?)");
  }
  std::vector<NpyArray> arrays(entries);
  std::set<std::string> names;
  size_t at = dir_at;
  for (NpyArray& a : arrays) {
    PS_RETURN_IF_ERROR(DecodeEntry(bytes.substr(0, eocd), &at, &names, &a));
  }
  return arrays;
}

absl::StatusOr<std::vector<NpyArray>> ReadNpzFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": cannot open: ", std::strerror(errno)));
  }
  const std::streamoff size = in.tellg();
  if (size < 0 || static_cast<uint64_t>(size) > kMaxNpzBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": not a readable file under 4 GiB"));
  }
  std::string bytes(static_cast<size_t>(size), '\0');
  in.seekg(0);
  if (!in.read(bytes.data(), size)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": read error"));
  }
  absl::StatusOr<std::vector<NpyArray>> arrays = DecodeNpz(bytes);
  if (!arrays.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": ", arrays.status().message()));
  }
  return arrays;
}

absl::StatusOr<NpzTensors> MatchTensors(
    const std::vector<NpyArray>& arrays,
    const google::protobuf::RepeatedPtrField<TensorSpec>& tensors,
    absl::string_view source) {
  absl::flat_hash_map<std::string, const NpyArray*> by_name;
  for (const NpyArray& a : arrays) by_name[a.name] = &a;
  NpzTensors out;
  for (const TensorSpec& t : tensors) {
    auto it = by_name.find(t.name());
    const std::string shape = ShapeText(t.shape());
    if (it == by_name.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor \"", t.name(), "\" (shape ", shape, ") is not in ", source));
    }
    const NpyArray& a = *it->second;
    if (a.descr != "<f4") {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor \"", t.name(), "\": dtype '", a.descr, "' in ",
                       source, ", expected float32 ('<f4')"));
    }
    if (ShapeText(a.shape) != shape) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor \"", t.name(), "\": shape ", shape,
                       " in the job, ", ShapeText(a.shape), " in ", source));
    }
    out[t.name()] = absl::Span<const float>(
        reinterpret_cast<const float*>(a.data.data()), a.data.size() / 4);
  }
  return out;
}

}  // namespace ps
