// Private to SparseTable (sparse_table_checkpoint.cc and
// sparse_table_increment.cc): one stripe's section of a table stream,
// encoded from a StripeImage and written as it goes, and the helpers both
// stream kinds read with. Layouts: the files that include it.
#ifndef SERVER_SPARSE_SECTION_ENCODER_H_
#define SERVER_SPARSE_SECTION_ENCODER_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "server/checkpoint.h"
#include "server/internal/le_bytes.h"
#include "server/sparse/byte_stream.h"
#include "server/sparse/internal/row_store.h"
#include "server/sparse/internal/stripe.h"

namespace ps {
namespace sparse_internal {

// Rows decoded per read while restoring (bounds the staging buffer).
inline constexpr size_t kRowsPerRead = 4096;
inline constexpr size_t kCounterBytes = 12;
// A row's bytes in the stream besides its floats: id, last_step, pushes.
inline constexpr size_t kRowMetaBytes = 24;
// Rows per batch: visited in a copy-on-write capture under one hold of
// the stripe's reader lock (a push to the stripe waits for one batch's
// memcpy at most), then encoded and written with no lock held.
inline constexpr size_t kRowsPerBatch = 1024;

// One stripe's section: Begin (the head; an increment's removed ids), the
// rows in LRU order a batch at a time (Gather copies a batch's records,
// Encode encodes them), then Finish (counters, the body's CRC). An image
// with `changes` writes only its changed rows (an increment's section).
// Counters are written in id order, so equal tables give equal streams
// whatever their hash tables' history.
class SectionEncoder {
 public:
  SectionEncoder(StripeImage& image, uint32_t floats_per_row, ByteSink& sink)
      : image_(image),
        floats_(floats_per_row),
        record_bytes_(RowStore::RecordBytes(floats_per_row)),
        row_bytes_(kRowMetaBytes + size_t{floats_per_row} * 4),
        next_(image.oldest),
        sink_(sink) {
    std::sort(image.counters.begin(), image.counters.end());
  }

  // The rows this section holds.
  uint64_t rows() const {
    return image_.changes ? image_.changed_rows : image_.rows;
  }

  absl::Status Begin() {
    using internal::PutLe;
    buf_.clear();
    if (image_.changes) PutLe(image_.removed.size(), 8, &buf_);
    PutLe(rows(), 8, &buf_);
    PutLe(image_.counters.size(), 8, &buf_);
    PutLe(Crc32c(buf_), 4, &buf_);
    if (image_.changes) {
      std::string ids;
      for (uint64_t id : image_.removed) PutLe(id, 8, &ids);
      crc_ = Crc32c(ids, crc_);
      buf_.append(ids);
    }
    return sink_.Write(buf_);
  }

  bool rows_left() const { return next_ != RowStore::kNil; }

  // Visits up to kRowsPerBatch more rows in LRU order and copies the
  // records of those the section holds into the batch; record(slot) gives
  // each record.
  template <typename RecordAt>
  void Gather(RecordAt record) {
    raw_.resize(kRowsPerBatch * record_bytes_);
    size_t n = 0;
    for (size_t seen = 0; seen < kRowsPerBatch && next_ != RowStore::kNil;
         ++seen) {
      const uint32_t slot = next_;
      const char* rec = record(slot);
      next_ = RowStore::MetaAt(rec, record_bytes_, 0).newer;
      if (image_.changes && !RowStore::Changed(image_.changed, slot)) continue;
      std::memcpy(raw_.data() + n * record_bytes_, rec, record_bytes_);
      ++n;
    }
    raw_.resize(n * record_bytes_);
  }

  // Encodes the gathered rows and writes them.
  absl::Status Encode() {
    using internal::SetLe;
    const size_t n = raw_.size() / record_bytes_;
    if (n == 0) return absl::OkStatus();
    buf_.resize(n * row_bytes_);
    char* p = buf_.data();
    for (size_t k = 0; k < n; ++k) {
      const char* rec = raw_.data() + k * record_bytes_;
      const RowMeta m = RowStore::MetaAt(rec, record_bytes_, 0);
      p = SetLe(m.id, 8, p);
      p = SetLe(m.last_step, 8, p);
      p = SetLe(m.pushes, 8, p);
      for (uint32_t e = 0; e < floats_; ++e) {
        uint32_t bits;
        std::memcpy(&bits, rec + 4 * size_t{e}, 4);
        p = SetLe(bits, 4, p);
      }
    }
    crc_ = Crc32c(buf_, crc_);
    rows_written_ += n;
    return sink_.Write(buf_);
  }

  absl::Status Finish() {
    using internal::PutLe;
    if (rows_written_ != rows()) {
      return absl::InternalError("a snapshot's rows do not match its count");
    }
    buf_.clear();
    for (const auto& [id, count] : image_.counters) {
      PutLe(id, 8, &buf_);
      PutLe(count, 4, &buf_);
    }
    crc_ = Crc32c(buf_, crc_);
    PutLe(crc_, 4, &buf_);
    return sink_.Write(buf_);
  }

 private:
  StripeImage& image_;
  const uint32_t floats_;
  const size_t record_bytes_;
  const size_t row_bytes_;
  uint32_t next_;
  ByteSink& sink_;
  std::string raw_;  // a batch's records
  std::string buf_;  // their encoding
  uint32_t crc_ = 0;
  uint64_t rows_written_ = 0;
};

// A section of a copied image (no lock needed).
inline absl::Status EncodeSection(StripeImage& image, uint32_t floats_per_row,
                                  ByteSink& sink) {
  SectionEncoder section(image, floats_per_row, sink);
  PS_RETURN_IF_ERROR(section.Begin());
  const size_t record_bytes = RowStore::RecordBytes(floats_per_row);
  while (section.rows_left()) {
    section.Gather([&](uint32_t slot) {
      return image.records.data() + size_t{slot} * record_bytes;
    });
    PS_RETURN_IF_ERROR(section.Encode());
  }
  return section.Finish();
}

// A table stream's header (a full checkpoint's or an increment's: `magic`
// tells them apart): magic, version, dim, state floats per row, stripes,
// the name's length and bytes, and their CRC.
inline std::string EncodeStreamHeader(absl::string_view magic, uint32_t version,
                                      uint32_t dim, uint32_t state_floats,
                                      uint32_t stripes,
                                      const std::string& name) {
  using internal::PutLe;
  std::string out(magic);
  PutLe(version, 4, &out);
  PutLe(dim, 4, &out);
  PutLe(state_floats, 4, &out);
  PutLe(stripes, 4, &out);
  PutLe(static_cast<uint32_t>(name.size()), 4, &out);
  out.append(name);
  PutLe(Crc32c(out), 4, &out);
  return out;
}

// Reads n bytes, extending a running CRC.
inline absl::Status ReadCrc(ByteSource& src, size_t n, char* out,
                            uint32_t* crc) {
  PS_RETURN_IF_ERROR(src.Read(n, out));
  *crc = Crc32c(absl::string_view(out, n), *crc);
  return absl::OkStatus();
}

// Reads `count` records of `bytes` each (an 8-byte id first) in batches of
// kRowsPerRead, staged in `*buf` and folded into `*crc`, and calls
// apply(id, record) on each in order; stops at the first error.
template <typename Apply>
absl::Status ReadRecords(ByteSource& src, uint64_t count, size_t bytes,
                         std::vector<char>* buf, uint32_t* crc, Apply apply) {
  for (uint64_t done = 0; done < count;) {
    const size_t n =
        static_cast<size_t>(std::min<uint64_t>(count - done, kRowsPerRead));
    buf->resize(n * bytes);
    PS_RETURN_IF_ERROR(ReadCrc(src, buf->size(), buf->data(), crc));
    for (size_t r = 0; r < n; ++r) {
      const char* p = buf->data() + r * bytes;
      PS_RETURN_IF_ERROR(apply(internal::GetLe(p, 8), p));
    }
    done += n;
  }
  return absl::OkStatus();
}

// A row record's `floats` values (after its kRowMetaBytes) into `out`.
inline void DecodeRowFloats(const char* record, uint32_t floats, float* out) {
  for (uint32_t e = 0; e < floats; ++e) {
    const uint32_t bits = static_cast<uint32_t>(
        internal::GetLe(record + kRowMetaBytes + 4 * size_t{e}, 4));
    std::memcpy(&out[e], &bits, 4);
  }
}

inline absl::Status CheckCrc(ByteSource& src, uint32_t crc,
                             absl::string_view what) {
  char b[4];
  PS_RETURN_IF_ERROR(src.Read(4, b));
  if (static_cast<uint32_t>(internal::GetLe(b, 4)) != crc) {
    return absl::DataLossError(absl::StrCat("checksum mismatch in ", what));
  }
  return absl::OkStatus();
}

}  // namespace sparse_internal
}  // namespace ps

#endif  // SERVER_SPARSE_SECTION_ENCODER_H_
