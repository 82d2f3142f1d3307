#include "worker/data/idx.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"

namespace ps {
namespace {

constexpr uint8_t kGzipMagic0 = 0x1f;
constexpr uint8_t kGzipMagic1 = 0x8b;
constexpr uint8_t kIdxTypeUint8 = 0x08;
// Far above any IDX file this project reads (Fashion-MNIST train is 47 MB
// inflated); a bound stops a hostile gzip bomb from exhausting memory.
constexpr size_t kMaxInflatedBytes = size_t{4} << 30;
constexpr size_t kMaxDeflateRatio = 1032;  // zlib's documented worst case
constexpr size_t kMinInflateBuffer = size_t{64} << 10;
constexpr size_t kMaxFirstInflateBuffer = size_t{256} << 20;

struct FileCloser {
  void operator()(FILE* f) const { std::fclose(f); }
};

absl::StatusOr<std::vector<uint8_t>> ReadRaw(const std::string& path) {
  std::unique_ptr<FILE, FileCloser> file(std::fopen(path.c_str(), "rb"));
  if (file == nullptr) {
    const int err = errno;
    const std::string msg =
        absl::StrCat(path, ": cannot open: ", std::strerror(err));
    return err == ENOENT ? absl::NotFoundError(msg)
                         : absl::PermissionDeniedError(msg);
  }
  std::vector<uint8_t> bytes;
  uint8_t buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), file.get())) > 0) {
    bytes.insert(bytes.end(), buf, buf + n);
  }
  if (std::ferror(file.get())) {
    return absl::DataLossError(absl::StrCat(path, ": read error"));
  }
  return bytes;
}

// The first output buffer for inflating `in`. The trailer's ISIZE (size mod
// 2^32) is only a hint: a truncated or corrupt file carries garbage there,
// so trust it only within deflate's maximum ratio and a modest first
// allocation, and grow from there.
size_t FirstInflateBuffer(const std::vector<uint8_t>& in) {
  size_t hint = 0;
  if (in.size() >= 4) {
    const uint8_t* t = in.data() + in.size() - 4;
    hint = size_t{t[0]} | size_t{t[1]} << 8 | size_t{t[2]} << 16 |
           size_t{t[3]} << 24;
  }
  if (hint > in.size() * kMaxDeflateRatio) hint = 0;
  return std::clamp(hint, kMinInflateBuffer, kMaxFirstInflateBuffer);
}

// Inflates one or more concatenated gzip members.
absl::StatusOr<std::vector<uint8_t>> Gunzip(const std::string& path,
                                            const std::vector<uint8_t>& in) {
  std::vector<uint8_t> out(FirstInflateBuffer(in));
  z_stream zs;
  std::memset(&zs, 0, sizeof(zs));
  // 16 + MAX_WBITS: gzip wrapper only, so a zlib or raw stream is an error.
  if (inflateInit2(&zs, 16 + MAX_WBITS) != Z_OK) {
    return absl::InternalError(absl::StrCat(path, ": inflateInit2 failed"));
  }
  size_t in_pos = 0;
  size_t out_pos = 0;
  int rc = Z_OK;
  for (;;) {
    if (out_pos == out.size()) {
      if (out.size() >= kMaxInflatedBytes) {
        inflateEnd(&zs);
        return absl::DataLossError(absl::StrFormat(
            "%s: inflates to more than %d bytes", path, kMaxInflatedBytes));
      }
      out.resize(std::min(out.size() * 2, kMaxInflatedBytes));
    }
    // zlib counts in uInt; feed at most 1 GiB at a time.
    const size_t in_chunk = std::min<size_t>(in.size() - in_pos, 1u << 30);
    const size_t out_chunk = std::min<size_t>(out.size() - out_pos, 1u << 30);
    zs.next_in = const_cast<Bytef*>(in.data() + in_pos);
    zs.avail_in = static_cast<uInt>(in_chunk);
    zs.next_out = out.data() + out_pos;
    zs.avail_out = static_cast<uInt>(out_chunk);
    rc = inflate(&zs, Z_NO_FLUSH);
    in_pos += in_chunk - zs.avail_in;
    out_pos += out_chunk - zs.avail_out;
    if (rc == Z_STREAM_END) {
      // Another member follows only if more gzip-magic bytes remain.
      if (in.size() - in_pos >= 2 && in[in_pos] == kGzipMagic0 &&
          in[in_pos + 1] == kGzipMagic1) {
        inflateReset(&zs);
        continue;
      }
      break;
    }
    if (rc == Z_OK) continue;
    if (rc == Z_BUF_ERROR && zs.avail_out == 0) continue;  // grow and retry
    inflateEnd(&zs);
    if (rc == Z_BUF_ERROR) {
      // No progress possible with output space left: the input ran out.
      return absl::DataLossError(absl::StrCat(
          path, ": truncated gzip stream (ends after ", in.size(), " bytes)"));
    }
    const char* why = zs.msg != nullptr ? zs.msg : "inflate failed";
    return absl::DataLossError(
        absl::StrCat(path, ": corrupt gzip data: ", why));
  }
  inflateEnd(&zs);
  if (in_pos != in.size()) {
    return absl::DataLossError(
        absl::StrFormat("%s: %d bytes of garbage after the gzip stream", path,
                        in.size() - in_pos));
  }
  out.resize(out_pos);
  return out;
}

uint32_t BigEndian32(const uint8_t* p) {
  return uint32_t{p[0]} << 24 | uint32_t{p[1]} << 16 | uint32_t{p[2]} << 8 |
         uint32_t{p[3]};
}

// Validates the header of an IDX uint8 file with `ndims` dimensions and the
// data length; returns the dimensions.
absl::StatusOr<std::vector<size_t>> ParseHeader(const std::string& path,
                                                const std::vector<uint8_t>& b,
                                                int ndims) {
  const size_t header = 4 + 4 * static_cast<size_t>(ndims);
  if (b.size() < header) {
    return absl::DataLossError(
        absl::StrFormat("%s: %d bytes, shorter than the %d-byte idx%d header",
                        path, b.size(), header, ndims));
  }
  const uint32_t want =
      uint32_t{kIdxTypeUint8} << 8 | static_cast<uint32_t>(ndims);
  const uint32_t magic = BigEndian32(b.data());
  if (magic != want) {
    return absl::DataLossError(
        absl::StrFormat("%s: bad magic 0x%08x, want 0x%08x (idx%d, uint8)",
                        path, magic, want, ndims));
  }
  std::vector<size_t> dims(ndims);
  size_t elements = 1;
  for (int i = 0; i < ndims; ++i) {
    dims[i] = BigEndian32(b.data() + 4 + 4 * i);
    // A corrupt header can claim 2^96 bytes; refuse before multiplying.
    if (dims[i] != 0 &&
        elements > std::numeric_limits<size_t>::max() / dims[i]) {
      return absl::DataLossError(absl::StrCat(path, ": dimensions overflow"));
    }
    elements *= dims[i];
  }
  for (int i = 1; i < ndims; ++i) {
    if (dims[i] == 0) {
      return absl::DataLossError(
          absl::StrFormat("%s: dimension %d is zero", path, i));
    }
  }
  const size_t data = b.size() - header;
  if (data != elements) {
    std::string shape = absl::StrCat(dims[0]);
    for (int i = 1; i < ndims; ++i) absl::StrAppend(&shape, "x", dims[i]);
    return absl::DataLossError(absl::StrFormat(
        "%s: header says %s = %d bytes of data, file has %d (%s)", path, shape,
        elements, data, data < elements ? "truncated" : "trailing bytes"));
  }
  return dims;
}

}  // namespace

absl::StatusOr<std::vector<uint8_t>> ReadMaybeGzipped(const std::string& path) {
  PS_ASSIGN_OR_RETURN(std::vector<uint8_t> raw, ReadRaw(path));
  if (raw.size() >= 2 && raw[0] == kGzipMagic0 && raw[1] == kGzipMagic1) {
    return Gunzip(path, raw);
  }
  return raw;
}

absl::StatusOr<IdxImages> ReadIdxImages(const std::string& path) {
  PS_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, ReadMaybeGzipped(path));
  PS_ASSIGN_OR_RETURN(std::vector<size_t> dims, ParseHeader(path, bytes, 3));
  IdxImages images;
  images.count = dims[0];
  images.rows = dims[1];
  images.cols = dims[2];
  bytes.erase(bytes.begin(), bytes.begin() + 16);
  images.pixels = std::move(bytes);
  return images;
}

absl::StatusOr<std::vector<uint8_t>> ReadIdxLabels(const std::string& path) {
  PS_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, ReadMaybeGzipped(path));
  PS_RETURN_IF_ERROR(ParseHeader(path, bytes, 1).status());
  bytes.erase(bytes.begin(), bytes.begin() + 8);
  return bytes;
}

}  // namespace ps
