#include "core/npz_stream_writer.h"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"

namespace ps {
namespace {

// Zip fields are little-endian.
void Put(std::string* out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) {
    out->push_back(static_cast<char>(v >> (8 * i)));
  }
}

constexpr uint32_t kLocalHeader = 0x04034b50;
constexpr uint32_t kCentralHeader = 0x02014b50;
constexpr uint32_t kEndOfCentral = 0x06054b50;
constexpr uint32_t kZip64EndOfCentral = 0x06064b50;
constexpr uint32_t kZip64Locator = 0x07064b50;
constexpr uint64_t k32 = 0xFFFFFFFFull;
constexpr uint64_t k16 = 0xFFFF;
constexpr uint16_t kVersion = 20;       // 2.0: stored entries
constexpr uint16_t kVersionZip64 = 45;  // 4.5: zip64
constexpr uint16_t kZip64Tag = 0x0001;
// Every local header carries a 20-byte extra field, so that a streamed
// entry's header has room for the zip64 sizes it learns of at End; an entry
// that fits in 32 bits tags it as padding (readers skip unknown tags).
constexpr uint16_t kPaddingTag = 0x5350;

// The local header of a stored entry; zip64 sizes when `size` needs them.
std::string LocalHeader(const std::string& file, uint32_t crc, uint64_t size,
                        uint64_t zip64_at) {
  const bool zip64 = size >= zip64_at;
  std::string out;
  Put(&out, kLocalHeader, 4);
  Put(&out, zip64 ? kVersionZip64 : kVersion, 2);
  Put(&out, 0, 2);     // flags
  Put(&out, 0, 2);     // method: stored
  Put(&out, 0, 2);     // time
  Put(&out, 0x21, 2);  // date: 1980-01-01
  Put(&out, crc, 4);
  Put(&out, zip64 ? k32 : size, 4);  // compressed
  Put(&out, zip64 ? k32 : size, 4);  // uncompressed
  Put(&out, file.size(), 2);
  Put(&out, 20, 2);  // extra field length
  out += file;
  Put(&out, zip64 ? kZip64Tag : kPaddingTag, 2);
  Put(&out, 16, 2);
  Put(&out, zip64 ? size : 0, 8);
  Put(&out, zip64 ? size : 0, 8);
  return out;
}

// The central directory record of an entry; the zip64 extra field holds
// the fields that do not fit in 32 bits, in the order APPNOTE 4.5.3 gives.
std::string CentralRecord(const std::string& file, uint32_t crc, uint64_t size,
                          uint64_t offset, uint64_t zip64_at) {
  std::string extra;
  if (size >= zip64_at) {
    Put(&extra, size, 8);  // uncompressed
    Put(&extra, size, 8);  // compressed
  }
  if (offset >= zip64_at) Put(&extra, offset, 8);
  const bool zip64 = !extra.empty();
  std::string out;
  Put(&out, kCentralHeader, 4);
  Put(&out, kVersionZip64, 2);  // made by
  Put(&out, zip64 ? kVersionZip64 : kVersion, 2);
  Put(&out, 0, 2);  // flags
  Put(&out, 0, 2);  // method: stored
  Put(&out, 0, 2);  // time
  Put(&out, 0x21, 2);
  Put(&out, crc, 4);
  Put(&out, size >= zip64_at ? k32 : size, 4);
  Put(&out, size >= zip64_at ? k32 : size, 4);
  Put(&out, file.size(), 2);
  Put(&out, zip64 ? 4 + extra.size() : 0, 2);
  Put(&out, 0, 2);  // comment
  Put(&out, 0, 2);  // disk
  Put(&out, 0, 2);  // internal attributes
  Put(&out, 0, 4);  // external attributes
  Put(&out, offset >= zip64_at ? k32 : offset, 4);
  out += file;
  if (zip64) {
    Put(&out, kZip64Tag, 2);
    Put(&out, extra.size(), 2);
    out += extra;
  }
  return out;
}

// The end records: zip64 ones first when a count or offset needs them.
std::string EndRecords(uint64_t entries, uint64_t central_at,
                       uint64_t central_bytes, uint64_t zip64_from) {
  std::string out;
  const uint64_t zip64_at = central_at + central_bytes;
  const bool zip64 =
      entries >= k16 || central_at >= zip64_from || central_bytes >= zip64_from;
  if (zip64) {
    Put(&out, kZip64EndOfCentral, 4);
    Put(&out, 44, 8);  // bytes of the record after this field
    Put(&out, kVersionZip64, 2);
    Put(&out, kVersionZip64, 2);
    Put(&out, 0, 4);  // this disk
    Put(&out, 0, 4);  // disk of the central directory
    Put(&out, entries, 8);
    Put(&out, entries, 8);
    Put(&out, central_bytes, 8);
    Put(&out, central_at, 8);
    Put(&out, kZip64Locator, 4);
    Put(&out, 0, 4);  // disk of the zip64 end record
    Put(&out, zip64_at, 8);
    Put(&out, 1, 4);  // disks
  }
  Put(&out, kEndOfCentral, 4);
  Put(&out, 0, 2);
  Put(&out, 0, 2);
  Put(&out, zip64 ? k16 : entries, 2);
  Put(&out, zip64 ? k16 : entries, 2);
  Put(&out, zip64 ? k32 : central_bytes, 4);
  Put(&out, zip64 ? k32 : central_at, 4);
  Put(&out, 0, 2);  // comment
  return out;
}

// The .npy 1.0 header of an array of `rows` rows, padded to `width` bytes
// (0: to the next multiple of 64, as numpy pads).
std::string NpyHeader(const std::string& descr, uint64_t rows,
                      const std::vector<uint64_t>& row_shape, size_t width) {
  std::string shape = absl::StrCat("(", rows, ",");
  for (uint64_t d : row_shape) absl::StrAppend(&shape, " ", d, ",");
  if (!row_shape.empty()) shape.pop_back();  // "(3,)" but "(3, 4)"
  shape += ")";
  std::string dict =
      absl::StrCat("{'descr': '", descr,
                   "', 'fortran_order': False, 'shape': ", shape, ", }");
  // Magic (6) + version (2) + length (2) + dict + '\n'.
  const size_t unpadded = 10 + dict.size() + 1;
  const size_t total = width != 0 ? width : (unpadded + 63) / 64 * 64;
  if (total < unpadded) return std::string();
  dict.append(total - unpadded, ' ');
  dict.push_back('\n');
  std::string out("\x93NUMPY\x01\x00", 8);
  Put(&out, dict.size(), 2);
  return out + dict;
}

uint32_t Crc(uint32_t crc, absl::string_view bytes) {
  // zlib's crc32 takes a uInt length: feed it in pieces.
  while (!bytes.empty()) {
    const size_t n = std::min<size_t>(bytes.size(), 1u << 30);
    crc = static_cast<uint32_t>(
        ::crc32(crc, reinterpret_cast<const Bytef*>(bytes.data()), n));
    bytes.remove_prefix(n);
  }
  return crc;
}

absl::Status ErrnoError(absl::string_view what, const std::string& path) {
  return absl::InvalidArgumentError(
      absl::StrCat(path, ": ", what, ": ", std::strerror(errno)));
}

}  // namespace

absl::StatusOr<std::unique_ptr<NpzStreamWriter>> NpzStreamWriter::Create(
    std::string path, Options options) {
  std::string tmp = absl::StrCat(path, ".tmp.", ::getpid());
  const int fd =
      ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoError("cannot create", tmp);
  return std::unique_ptr<NpzStreamWriter>(
      new NpzStreamWriter(std::move(path), std::move(tmp), fd, options));
}

NpzStreamWriter::NpzStreamWriter(std::string path, std::string tmp, int fd,
                                 Options options)
    : options_(options), path_(std::move(path)), tmp_(std::move(tmp)), fd_(fd) {
  buffer_.reserve(kBufferBytes);
}

NpzStreamWriter::~NpzStreamWriter() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(tmp_.c_str());
}

absl::Status NpzStreamWriter::Fail(absl::Status st) {
  if (failed_.ok()) failed_ = st;
  return st;
}

absl::Status NpzStreamWriter::WriteOut(absl::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd_, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Fail(ErrnoError("write", tmp_));
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return absl::OkStatus();
}

absl::Status NpzStreamWriter::Flush() {
  absl::Status st = WriteOut(buffer_);
  buffer_.clear();
  return st;
}

absl::Status NpzStreamWriter::Write(absl::string_view bytes) {
  if (!failed_.ok()) return failed_;
  offset_ += bytes.size();
  if (buffer_.size() + bytes.size() > kBufferBytes) {
    if (absl::Status st = Flush(); !st.ok()) return st;
  }
  // Large pieces go straight to the file, not through the buffer.
  if (bytes.size() >= kBufferBytes) return WriteOut(bytes);
  buffer_.append(bytes.data(), bytes.size());
  return absl::OkStatus();
}

absl::Status NpzStreamWriter::PatchAt(uint64_t offset,
                                      const std::string& bytes) {
  if (absl::Status st = Flush(); !st.ok()) return st;
  for (size_t at = 0; at < bytes.size();) {
    const ssize_t n = ::pwrite(fd_, bytes.data() + at, bytes.size() - at,
                               static_cast<off_t>(offset + at));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Fail(ErrnoError("write", tmp_));
    at += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

absl::Status NpzStreamWriter::CheckName(const std::string& name) {
  if (!failed_.ok()) return failed_;
  if (committed_ || open_ != nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat(path_, ": array \"", name, "\" added while ",
                     committed_ ? "committed" : "another array is open"));
  }
  if (name.empty() || name.size() > 0xFF00 || !names_.insert(name).second) {
    return absl::InvalidArgumentError(absl::StrCat(
        path_, ": array name \"", name, "\" is empty, too long or repeated"));
  }
  return absl::OkStatus();
}

absl::Status NpzStreamWriter::Add(const NpyArray& a) {
  if (absl::Status st = CheckName(a.name); !st.ok()) return st;
  Entry e{a.name + ".npy", 0, 0, offset_};
  const std::string npy = EncodeNpy(a);
  e.crc = Crc(0, npy);
  e.size = npy.size();
  if (absl::Status st =
          Write(LocalHeader(e.file, e.crc, e.size, options_.zip64_at));
      !st.ok()) {
    return st;
  }
  if (absl::Status st = Write(npy); !st.ok()) return st;
  entries_.push_back(std::move(e));
  return absl::OkStatus();
}

absl::Status NpzStreamWriter::Begin(std::string name, std::string descr,
                                    size_t item_bytes,
                                    std::vector<uint64_t> row_shape) {
  if (absl::Status st = CheckName(name); !st.ok()) return st;
  auto open = std::make_unique<Open>();
  open->entry = Entry{name + ".npy", 0, 0, offset_};
  open->row_bytes = item_bytes;
  for (uint64_t d : row_shape) open->row_bytes *= d;
  // Room for any row count: the header as it would be with the most digits.
  const std::string widest = NpyHeader(
      descr, std::numeric_limits<uint64_t>::max(), row_shape, /*width=*/0);
  open->header_bytes = widest.size();
  open->descr = std::move(descr);
  open->row_shape = std::move(row_shape);
  const std::string header =
      NpyHeader(open->descr, 0, open->row_shape, open->header_bytes);
  if (absl::Status st =
          Write(LocalHeader(open->entry.file, 0, 0, options_.zip64_at));
      !st.ok()) {
    return st;
  }
  if (absl::Status st = Write(header); !st.ok()) return st;
  open_ = std::move(open);
  return absl::OkStatus();
}

absl::Status NpzStreamWriter::Append(absl::string_view bytes) {
  if (open_ == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat(path_, ": Append outside Begin/End"));
  }
  open_->data_crc = Crc(open_->data_crc, bytes);
  open_->data_bytes += bytes.size();
  return Write(bytes);
}

uint64_t NpzStreamWriter::rows() const {
  if (open_ == nullptr || open_->row_bytes == 0) return 0;
  return open_->data_bytes / open_->row_bytes;
}

absl::Status NpzStreamWriter::End() {
  if (open_ == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat(path_, ": End without Begin"));
  }
  std::unique_ptr<Open> open = std::move(open_);
  if (open->row_bytes == 0 ? open->data_bytes != 0
                           : open->data_bytes % open->row_bytes != 0) {
    return Fail(absl::InvalidArgumentError(absl::StrCat(
        path_, ": array \"", open->entry.file, "\": ", open->data_bytes,
        " bytes are not whole rows of ", open->row_bytes)));
  }
  const uint64_t rows =
      open->row_bytes == 0 ? 0 : open->data_bytes / open->row_bytes;
  const std::string header =
      NpyHeader(open->descr, rows, open->row_shape, open->header_bytes);
  Entry& e = open->entry;
  e.size = header.size() + open->data_bytes;
  e.crc = static_cast<uint32_t>(::crc32_combine(
      Crc(0, header), open->data_crc, static_cast<z_off_t>(open->data_bytes)));
  const std::string local =
      LocalHeader(e.file, e.crc, e.size, options_.zip64_at);
  if (absl::Status st = PatchAt(e.offset, local); !st.ok()) return st;
  if (absl::Status st = PatchAt(e.offset + local.size(), header); !st.ok()) {
    return st;
  }
  entries_.push_back(std::move(e));
  return absl::OkStatus();
}

absl::Status NpzStreamWriter::Commit() {
  if (!failed_.ok()) return failed_;
  if (open_ != nullptr || committed_) {
    return absl::FailedPreconditionError(absl::StrCat(
        path_, ": Commit ", committed_ ? "twice" : "with an array open"));
  }
  const uint64_t central_at = offset_;
  uint64_t central_bytes = 0;
  for (const Entry& e : entries_) {
    const std::string rec =
        CentralRecord(e.file, e.crc, e.size, e.offset, options_.zip64_at);
    central_bytes += rec.size();
    if (absl::Status st = Write(rec); !st.ok()) return st;
  }
  if (absl::Status st = Write(EndRecords(entries_.size(), central_at,
                                         central_bytes, options_.zip64_at));
      !st.ok()) {
    return st;
  }
  if (absl::Status st = Flush(); !st.ok()) return st;
  if (::fsync(fd_) != 0) return Fail(ErrnoError("fsync", tmp_));
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) return Fail(ErrnoError("close", tmp_));
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) {
    return Fail(ErrnoError("rename", path_));
  }
  committed_ = true;
  return absl::OkStatus();
}

}  // namespace ps
