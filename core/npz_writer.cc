#include "core/npz_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"

namespace ps {
namespace {

// Zip fields are little-endian.
void Put(std::string* out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i)
    out->push_back(static_cast<char>(v >> (8 * i)));
}

constexpr uint32_t kLocalHeader = 0x04034b50;
constexpr uint32_t kCentralHeader = 0x02014b50;
constexpr uint32_t kEndOfCentral = 0x06054b50;
constexpr uint64_t kZipLimit = 0xFFFFFFFFull;  // without zip64
constexpr size_t kMaxEntries = 0xFFFF;
constexpr uint16_t kVersion = 20;  // 2.0: stored entries, folders

// The fields local and central headers share, from "version needed" to the
// file name length.
void PutCommon(std::string* out, uint32_t crc, uint64_t size,
               size_t name_bytes) {
  Put(out, kVersion, 2);
  Put(out, 0, 2);     // flags
  Put(out, 0, 2);     // method: stored
  Put(out, 0, 2);     // time
  Put(out, 0x21, 2);  // date: 1980-01-01
  Put(out, crc, 4);
  Put(out, size, 4);  // compressed
  Put(out, size, 4);  // uncompressed
  Put(out, name_bytes, 2);
}

absl::Status ErrnoError(absl::string_view what, const std::string& path) {
  return absl::InvalidArgumentError(
      absl::StrCat(path, ": ", what, ": ", std::strerror(errno)));
}

}  // namespace

NpyArray NpyArray::Float32(std::string name, std::vector<uint64_t> shape,
                           absl::Span<const float> values) {
  NpyArray a{std::move(name), "<f4", std::move(shape), std::string()};
  a.data.resize(values.size() * sizeof(float));
  // Hosts are little-endian (as the wire codec assumes, core/float_bytes).
  if (!values.empty()) std::memcpy(&a.data[0], values.data(), a.data.size());
  return a;
}

NpyArray NpyArray::Bytes(std::string name, std::string text) {
  std::string descr = absl::StrCat("|S", std::max<size_t>(text.size(), 1));
  if (text.empty()) text.push_back('\0');
  return NpyArray{std::move(name), std::move(descr), {}, std::move(text)};
}

std::string EncodeNpy(const NpyArray& a) {
  std::string shape = "(";
  for (uint64_t d : a.shape) absl::StrAppend(&shape, d, ",");
  if (a.shape.size() > 1) shape.pop_back();  // "(3,)" but "(3,4)"
  shape += ")";
  std::string header =
      absl::StrCat("{'descr': '", a.descr,
                   "', 'fortran_order': False, 'shape': ", shape, ", }");
  // Magic (6) + version (2) + length (2) + header + '\n', a multiple of 64.
  const size_t unpadded = 10 + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header.push_back('\n');
  std::string out("\x93NUMPY\x01\x00", 8);
  Put(&out, header.size(), 2);
  out += header;
  out += a.data;
  return out;
}

uint32_t ZipCrc32(const std::string& data, uint32_t crc) {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  crc = ~crc;
  for (unsigned char b : data) crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8);
  return ~crc;
}

absl::StatusOr<std::string> EncodeNpz(const std::vector<NpyArray>& arrays) {
  if (arrays.size() > kMaxEntries) {
    return absl::InvalidArgumentError(absl::StrCat(
        arrays.size(), " arrays, an .npz without zip64 holds ", kMaxEntries));
  }
  std::set<std::string> names;
  std::string out, central;
  for (const NpyArray& a : arrays) {
    if (a.name.empty() || !names.insert(a.name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("array name \"", a.name, "\" is empty or repeated"));
    }
    const std::string file = a.name + ".npy";
    const std::string npy = EncodeNpy(a);
    const uint32_t crc = ZipCrc32(npy);
    const uint64_t offset = out.size();
    if (offset + 30 + file.size() + npy.size() > kZipLimit) {
      return absl::InvalidArgumentError(absl::StrCat(
          "array \"", a.name, "\": the archive would exceed 4 GiB (no zip64)"));
    }
    Put(&out, kLocalHeader, 4);
    PutCommon(&out, crc, npy.size(), file.size());
    Put(&out, 0, 2);  // extra field length
    out += file;
    out += npy;
    Put(&central, kCentralHeader, 4);
    Put(&central, kVersion, 2);  // made by
    PutCommon(&central, crc, npy.size(), file.size());
    Put(&central, 0, 2);  // extra
    Put(&central, 0, 2);  // comment
    Put(&central, 0, 2);  // disk
    Put(&central, 0, 2);  // internal attributes
    Put(&central, 0, 4);  // external attributes
    Put(&central, offset, 4);
    central += file;
  }
  const uint64_t central_at = out.size();
  if (central_at + central.size() + 22 > kZipLimit) {
    return absl::InvalidArgumentError("the archive would exceed 4 GiB");
  }
  out += central;
  Put(&out, kEndOfCentral, 4);
  Put(&out, 0, 2);  // this disk
  Put(&out, 0, 2);  // disk of the central directory
  Put(&out, arrays.size(), 2);
  Put(&out, arrays.size(), 2);
  Put(&out, central.size(), 4);
  Put(&out, central_at, 4);
  Put(&out, 0, 2);  // comment
  return out;
}

absl::Status WriteNpzFile(const std::string& path,
                          const std::vector<NpyArray>& arrays) {
  absl::StatusOr<std::string> bytes = EncodeNpz(arrays);
  if (!bytes.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": ", bytes.status().message()));
  }
  const std::string tmp = absl::StrCat(path, ".tmp.", ::getpid());
  const int fd =
      ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoError("cannot create", tmp);
  absl::Status st;
  for (size_t at = 0; at < bytes->size() && st.ok();) {
    const ssize_t n = ::write(fd, bytes->data() + at, bytes->size() - at);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      st = ErrnoError("write", tmp);
    else
      at += static_cast<size_t>(n);
  }
  if (st.ok() && ::fsync(fd) != 0) st = ErrnoError("fsync", tmp);
  if (::close(fd) != 0 && st.ok()) st = ErrnoError("close", tmp);
  if (st.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) {
    st = ErrnoError("rename", path);
  }
  if (!st.ok()) ::unlink(tmp.c_str());
  return st;
}

}  // namespace ps
