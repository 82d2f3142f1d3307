#include "server/sparse/table_rows.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "server/checkpoint.h"
#include "server/internal/le_bytes.h"

namespace ps {
namespace {

using internal::GetLe;

// SparseTable's stream, version 2 (sparse_table_checkpoint.cc).
constexpr char kMagic[8] = {'P', 'S', 'S', 'P', 'A', 'R', 'S', 'E'};
constexpr char kEndMagic[8] = {'P', 'S', 'S', 'P', 'E', 'N', 'D', '\n'};
constexpr uint32_t kVersion = 2;
constexpr size_t kHeaderBytes = 28;   // magic .. name_bytes
constexpr size_t kSectionBytes = 20;  // rows, counters, CRC
constexpr size_t kRowMetaBytes = 24;  // id, last_step, pushes
constexpr size_t kCounterBytes = 12;  // id, count
constexpr size_t kTrailerBytes = 28;  // magic, rows, counters, CRC
constexpr uint32_t kMaxNameBytes = 4096;

absl::Status Corrupt(absl::string_view what) {
  return absl::DataLossError(
      absl::StrCat("sparse table stream (format ", kVersion, "): ", what));
}

}  // namespace

TableRowsSink::TableRowsSink(size_t batch_rows, EmitFn emit)
    : batch_rows_(std::max<size_t>(batch_rows, 1)), emit_(std::move(emit)) {}

size_t TableRowsSink::UnitBytes() const {
  switch (part_) {
    case Part::kHeader:
      return kHeaderBytes;
    case Part::kName:
      return name_bytes_ + 4;
    case Part::kSection:
      return kSectionBytes;
    case Part::kRows:
      return kRowMetaBytes + 4 * size_t{floats_};
    case Part::kCounters:
      return kCounterBytes;
    case Part::kSectionCrc:
      return 4;
    case Part::kTrailer:
      return kTrailerBytes;
    case Part::kDone:
      break;
  }
  return 0;
}

absl::Status TableRowsSink::Write(absl::string_view bytes) {
  while (!bytes.empty()) {
    if (part_ == Part::kDone) return Corrupt("bytes after its trailer");
    const size_t unit = UnitBytes();
    if (!partial_.empty() || bytes.size() < unit) {
      const size_t take = std::min(unit - partial_.size(), bytes.size());
      partial_.append(bytes.data(), take);
      bytes.remove_prefix(take);
      if (partial_.size() < unit) return absl::OkStatus();
      const std::string item = std::move(partial_);
      partial_.clear();
      PS_RETURN_IF_ERROR(Consume(item, 1));
      continue;
    }
    // Whole items straight from `bytes`: a run of rows or counters at once.
    size_t n = 1;
    if (part_ == Part::kRows || part_ == Part::kCounters) {
      n = static_cast<size_t>(std::min<uint64_t>(bytes.size() / unit, left_));
    }
    PS_RETURN_IF_ERROR(Consume(bytes.substr(0, n * unit), n));
    bytes.remove_prefix(n * unit);
  }
  return absl::OkStatus();
}

absl::Status TableRowsSink::Consume(absl::string_view b, size_t n) {
  const char* p = b.data();
  switch (part_) {
    case Part::kHeader: {
      if (std::memcmp(p, kMagic, 8) != 0) return Corrupt("bad magic");
      const uint32_t version = static_cast<uint32_t>(GetLe(p + 8, 4));
      if (version != kVersion) {
        return Corrupt(absl::StrCat("version ", version,
                                    ", which this export does not read"));
      }
      dim_ = static_cast<uint32_t>(GetLe(p + 12, 4));
      floats_ = dim_ + static_cast<uint32_t>(GetLe(p + 16, 4));
      sections_ = static_cast<uint32_t>(GetLe(p + 20, 4));
      name_bytes_ = static_cast<uint32_t>(GetLe(p + 24, 4));
      if (dim_ == 0 || floats_ < dim_ || name_bytes_ > kMaxNameBytes) {
        return Corrupt("bad header");
      }
      header_crc_ = Crc32c(b);
      part_ = Part::kName;
      return absl::OkStatus();
    }
    case Part::kName:
      name_.assign(p, name_bytes_);
      if (Crc32c(name_, header_crc_) !=
          static_cast<uint32_t>(GetLe(p + name_bytes_, 4))) {
        return Corrupt("header checksum mismatch");
      }
      part_ = sections_ == 0 ? Part::kTrailer : Part::kSection;
      return absl::OkStatus();
    case Part::kSection:
      left_ = GetLe(p, 8);
      counters_ = GetLe(p + 8, 8);
      total_counters_ += counters_;
      part_ = Part::kRows;
      if (left_ == 0) {
        left_ = counters_;
        part_ = counters_ == 0 ? Part::kSectionCrc : Part::kCounters;
      }
      return absl::OkStatus();
    case Part::kRows:
      PS_RETURN_IF_ERROR(TakeRows(b, n));
      left_ -= n;
      if (left_ == 0) {
        left_ = counters_;
        part_ = counters_ == 0 ? Part::kSectionCrc : Part::kCounters;
      }
      return absl::OkStatus();
    case Part::kCounters:
      left_ -= n;  // admission counters are not rows: skipped
      if (left_ == 0) part_ = Part::kSectionCrc;
      return absl::OkStatus();
    case Part::kSectionCrc:
      part_ = ++section_ == sections_ ? Part::kTrailer : Part::kSection;
      return absl::OkStatus();
    case Part::kTrailer:
      if (std::memcmp(p, kEndMagic, 8) != 0 || GetLe(p + 8, 8) != rows_ ||
          GetLe(p + 16, 8) != total_counters_) {
        return Corrupt("trailer does not match the sections");
      }
      part_ = Part::kDone;
      return absl::OkStatus();
    case Part::kDone:
      break;
  }
  return Corrupt("bytes after its trailer");
}

absl::Status TableRowsSink::TakeRows(absl::string_view b, size_t n) {
  const size_t row_bytes = UnitBytes();
  for (size_t r = 0; r < n; ++r) {
    const char* p = b.data() + r * row_bytes;
    ids_.push_back(GetLe(p, 8));
    // Little-endian floats on a little-endian host (core/float_bytes.h).
    const size_t at = values_.size();
    values_.resize(at + dim_);
    std::memcpy(&values_[at], p + kRowMetaBytes, 4 * size_t{dim_});
    ++rows_;
    if (ids_.size() == batch_rows_) PS_RETURN_IF_ERROR(EmitBatch());
  }
  return absl::OkStatus();
}

absl::Status TableRowsSink::EmitBatch() {
  absl::Status st = emit_(ids_, values_);
  ids_.clear();
  values_.clear();
  return st;
}

absl::Status TableRowsSink::Finish() {
  if (part_ != Part::kDone) return Corrupt("ended before its trailer");
  if (ids_.empty()) return absl::OkStatus();
  return EmitBatch();
}

}  // namespace ps
