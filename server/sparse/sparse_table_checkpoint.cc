// SparseTable::Save and Restore. Stream layout (integers little-endian,
// floats as their IEEE-754 bits, little-endian):
//
//   header   magic "PSSPARSE", version u32 (2), dim u32, state_floats u32,
//            sections u32, name_bytes u32, name, CRC32C u32 of the above
//   section  (one per stripe of the saving table)
//            rows u64, counters u64, CRC32C u32 of these 16 bytes
//            rows x   {id u64, last_step u64, pushes u64,
//                      (dim + state_floats) x f32}, least recently pushed
//                     first
//            counters x {id u64, count u32}, ascending id
//            CRC32C u32 of the rows and counters
//   trailer  magic "PSSPEND\n", rows u64, counters u64, CRC32C u32 of these
//
// Restore re-stripes rows by their id, so a stream restores into a table
// with another num_stripes (the LRU order is then kept per saving stripe).
// Version 1 (rows without pushes) is rejected: it predates the per-row push
// counts and was never deployed.
#include <algorithm>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "server/checkpoint.h"
#include "server/internal/le_bytes.h"
#include "server/sparse/internal/row_index.h"
#include "server/sparse/section_encoder.h"
#include "server/sparse/sparse_table.h"

namespace ps {
namespace {

using internal::GetLe;
using internal::PutLe;
using internal::SetLe;
using sparse_internal::CheckCrc;
using sparse_internal::DecodeRowFloats;
using sparse_internal::EncodeSection;
using sparse_internal::kCounterBytes;
using sparse_internal::kRowMetaBytes;
using sparse_internal::ReadCrc;
using sparse_internal::ReadRecords;
using sparse_internal::RowCapture;
using sparse_internal::SectionEncoder;
using sparse_internal::Stripe;
using sparse_internal::StripeImage;

constexpr char kMagic[8] = {'P', 'S', 'S', 'P', 'A', 'R', 'S', 'E'};
constexpr char kEndMagic[8] = {'P', 'S', 'S', 'P', 'E', 'N', 'D', '\n'};
constexpr uint32_t kVersion = 2;
constexpr uint32_t kMaxNameBytes = 4096;
constexpr uint32_t kMaxSections = 1u << 20;

std::string EncodeHeader(const SparseTable::Options& o) {
  return sparse_internal::EncodeStreamHeader(
      absl::string_view(kMagic, 8), kVersion, o.dim, o.state_floats_per_row,
      o.num_stripes, o.name);
}

std::string EncodeTrailer(uint64_t rows, uint64_t counters) {
  std::string out;
  out.append(kEndMagic, 8);
  PutLe(rows, 8, &out);
  PutLe(counters, 8, &out);
  PutLe(Crc32c(out), 4, &out);
  return out;
}

}  // namespace

absl::Status SparseTable::Save(ByteSink& sink) const {
  const uint32_t floats = options_.dim + options_.state_floats_per_row;
  PS_RETURN_IF_ERROR(sink.Write(EncodeHeader(options_)));
  uint64_t rows = 0, counters = 0;
  StripeImage image;
  for (const auto& stripe : stripes_) {
    {
      // The only pause Save causes: pushes to this one stripe wait for a
      // copy of its slabs (pulls share the reader lock).
      absl::ReaderMutexLock lock(&stripe->mu);
      stripe->data.Snapshot(&image);
    }
    rows += image.rows;
    counters += image.counters.size();
    PS_RETURN_IF_ERROR(EncodeSection(image, floats, sink));
  }
  return sink.Write(EncodeTrailer(rows, counters));
}

SparseTable::Snapshot::Snapshot(Snapshot&& o) noexcept
    : table_(o.table_),
      incremental_(o.incremental_),
      stripes_(std::move(o.stripes_)) {
  o.table_ = nullptr;
  o.stripes_.clear();
}

SparseTable::Snapshot& SparseTable::Snapshot::operator=(Snapshot&& o) noexcept {
  if (this != &o) {
    Release();
    table_ = o.table_;
    incremental_ = o.incremental_;
    stripes_ = std::move(o.stripes_);
    o.table_ = nullptr;
    o.stripes_.clear();
  }
  return *this;
}

SparseTable::Snapshot::~Snapshot() { Release(); }

void SparseTable::Snapshot::Release() {
  for (size_t s = 0; s < stripes_.size(); ++s) {
    if (stripes_[s].capture == nullptr) continue;
    LockedStripe& stripe = *table_->stripes_[s];
    absl::MutexLock lock(&stripe.mu);
    stripe.data.Release(stripes_[s].capture.get());
  }
  stripes_.clear();
}

bool SparseTable::Snapshot::copy_on_write() const {
  for (const StripeImage& image : stripes_) {
    if (image.capture == nullptr) return false;
  }
  return true;
}

uint64_t SparseTable::Snapshot::held_bytes() const {
  uint64_t bytes = 0;
  for (size_t s = 0; s < stripes_.size(); ++s) {
    const StripeImage& image = stripes_[s];
    bytes += image.records.size();
    if (image.capture == nullptr) continue;
    absl::ReaderMutexLock lock(&table_->stripes_[s]->mu);
    bytes += image.capture->bytes();
  }
  return bytes;
}

SparseTable::Snapshot SparseTable::TakeSnapshot(bool incremental) const {
  Snapshot snap;
  snap.table_ = this;
  // Whatever its kind, a snapshot of a tracking table starts a new
  // interval of changes, so the next may be an increment on it.
  const bool tracking = tracking_.load();
  snap.incremental_ = incremental && tracking && !needs_full_.load();
  if (tracking) needs_full_.store(false);
  snap.stripes_.resize(stripes_.size());
  for (size_t s = 0; s < stripes_.size(); ++s) {
    absl::MutexLock lock(&stripes_[s]->mu);
    stripes_[s]->data.Freeze(&snap.stripes_[s], snap.incremental_);
  }
  return snap;
}

absl::Status SparseTable::EncodeStripe(size_t s, StripeImage& image,
                                       ByteSink& sink) const {
  const uint32_t floats = options_.dim + options_.state_floats_per_row;
  if (image.capture == nullptr) return EncodeSection(image, floats, sink);
  const LockedStripe& stripe = *stripes_[s];
  const RowCapture& capture = *image.capture;
  SectionEncoder section(image, floats, sink);
  PS_RETURN_IF_ERROR(section.Begin());
  while (section.rows_left()) {
    {
      absl::ReaderMutexLock lock(&stripe.mu);
      section.Gather([&](uint32_t slot) {
        return stripe.data.FrozenRecord(capture, slot);
      });
    }
    PS_RETURN_IF_ERROR(section.Encode());
  }
  return section.Finish();
}

absl::Status SparseTable::WriteSnapshot(Snapshot snapshot,
                                        ByteSink& sink) const {
  const bool increment = snapshot.incremental_;
  PS_RETURN_IF_ERROR(
      sink.Write(increment ? IncrementHeader() : EncodeHeader(options_)));
  uint64_t removed = 0, rows = 0, counters = 0;
  for (size_t s = 0; s < snapshot.stripes_.size(); ++s) {
    StripeImage& image = snapshot.stripes_[s];
    removed += image.removed.size();
    rows += increment ? image.changed_rows : image.rows;
    counters += image.counters.size();
    PS_RETURN_IF_ERROR(EncodeStripe(s, image, sink));
    // Free each stripe's copy (or end its copy on write) once written.
    if (image.capture != nullptr) {
      absl::MutexLock lock(&stripes_[s]->mu);
      stripes_[s]->data.Release(image.capture.get());
    }
    image = StripeImage();
  }
  return sink.Write(increment ? IncrementTrailer(removed, rows, counters)
                              : EncodeTrailer(rows, counters));
}

absl::Status SparseTable::Restore(ByteSource& source) {
  auto fail = [&](absl::Status st) {
    return absl::Status(st.code(), absl::StrCat("sparse table '", options_.name,
                                                "': restore: ", st.message()));
  };
  char h[28];
  uint32_t crc = 0;
  if (absl::Status st = ReadCrc(source, sizeof(h), h, &crc); !st.ok()) {
    return fail(st);
  }
  if (std::memcmp(h, kMagic, 8) != 0) {
    return fail(absl::DataLossError("not a sparse table stream (bad magic)"));
  }
  const auto u32_at = [h](size_t at) {
    return static_cast<uint32_t>(GetLe(h + at, 4));
  };
  const uint32_t version = u32_at(8), dim = u32_at(12), state = u32_at(16),
                 sections = u32_at(20), name_bytes = u32_at(24);
  if (version != kVersion) {
    return fail(absl::DataLossError(
        absl::StrCat("format version ", version, ", want ", kVersion,
                     version < kVersion ? " (older streams lack per-row push "
                                          "counts and are not read)"
                                        : "")));
  }
  if (name_bytes > kMaxNameBytes || sections > kMaxSections) {
    return fail(absl::DataLossError("corrupt header"));
  }
  std::string name(name_bytes, '\0');
  if (absl::Status st = ReadCrc(source, name_bytes, name.data(), &crc);
      !st.ok()) {
    return fail(st);
  }
  if (absl::Status st = CheckCrc(source, crc, "header"); !st.ok()) {
    return fail(st);
  }
  if (name != options_.name || dim != options_.dim ||
      state != options_.state_floats_per_row) {
    return fail(absl::InvalidArgumentError(
        absl::StrCat("stream holds table '", name, "' (dim ", dim,
                     ", state_floats ", state, "), want dim ", options_.dim,
                     ", state_floats ", options_.state_floats_per_row)));
  }
  std::vector<std::unique_ptr<Stripe>> staged;
  const sparse_internal::StripeConfig config = StripeConfigFor();
  for (uint32_t s = 0; s < options_.num_stripes; ++s) {
    staged.push_back(std::make_unique<Stripe>(config));
  }
  if (absl::Status st = RestoreSections(source, sections, staged); !st.ok()) {
    return fail(st);
  }
  const uint64_t share = options_.memory_budget_bytes / options_.num_stripes;
  for (uint32_t s = 0; s < options_.num_stripes; ++s) {
    if (share > 0 && staged[s]->bytes() > share) {
      return fail(absl::ResourceExhaustedError(absl::StrCat(
          "stripe ", s, " would hold ", staged[s]->bytes(),
          " bytes, over its share ", share, " of memory_budget_bytes")));
    }
  }
  for (uint32_t s = 0; s < options_.num_stripes; ++s) {
    absl::MutexLock lock(&stripes_[s]->mu);
    stripes_[s]->data.SwapData(*staged[s]);
  }
  // Changes are tracked from the restored rows on: the next snapshot is
  // the base of any increment after it.
  needs_full_.store(true);
  return absl::OkStatus();
}

absl::Status SparseTable::RestoreSections(
    ByteSource& source, uint32_t sections,
    std::vector<std::unique_ptr<sparse_internal::Stripe>>& staged) const {
  const uint32_t floats = options_.dim + options_.state_floats_per_row;
  const size_t row_bytes = kRowMetaBytes + size_t{floats} * 4;
  std::vector<char> buf;
  std::vector<float> values(floats);
  uint64_t total_rows = 0, total_counters = 0;
  for (uint32_t sec = 0; sec < sections; ++sec) {
    const std::string where = absl::StrCat("section ", sec);
    char sh[16];
    uint32_t crc = 0;
    PS_RETURN_IF_ERROR(ReadCrc(source, sizeof(sh), sh, &crc));
    PS_RETURN_IF_ERROR(CheckCrc(source, crc, where + " header"));
    const uint64_t rows = GetLe(sh, 8), counters = GetLe(sh + 8, 8);
    crc = 0;
    PS_RETURN_IF_ERROR(
        ReadRecords(source, rows, row_bytes, &buf, &crc,
                    [&](uint64_t id, const char* p) -> absl::Status {
                      PS_RETURN_IF_ERROR(CheckStoredId(id, where));
                      DecodeRowFloats(p, floats, values.data());
                      const uint64_t hash = sparse_internal::RowHash(id);
                      return staged[StripeOf(hash)]->RestoreRow(
                          id, /*last_step=*/GetLe(p + 8, 8),
                          /*pushes=*/GetLe(p + 16, 8), values.data());
                    }));
    PS_RETURN_IF_ERROR(
        ReadRecords(source, counters, kCounterBytes, &buf, &crc,
                    [&](uint64_t id, const char* p) -> absl::Status {
                      PS_RETURN_IF_ERROR(CheckStoredId(id, where));
                      const uint64_t hash = sparse_internal::RowHash(id);
                      return staged[StripeOf(hash)]->RestoreCounter(
                          id, static_cast<uint32_t>(GetLe(p + 8, 4)));
                    }));
    PS_RETURN_IF_ERROR(CheckCrc(source, crc, where));
    total_rows += rows;
    total_counters += counters;
  }
  char t[24];
  uint32_t crc = 0;
  PS_RETURN_IF_ERROR(ReadCrc(source, sizeof(t), t, &crc));
  PS_RETURN_IF_ERROR(CheckCrc(source, crc, "trailer"));
  if (std::memcmp(t, kEndMagic, 8) != 0 || GetLe(t + 8, 8) != total_rows ||
      GetLe(t + 16, 8) != total_counters) {
    return absl::DataLossError("trailer does not match the sections");
  }
  return absl::OkStatus();
}

absl::Status SparseTable::CheckStoredId(uint64_t id,
                                        absl::string_view where) const {
  if (options_.id_bound == 0 || id < options_.id_bound) return absl::OkStatus();
  return absl::DataLossError(absl::StrCat(where, ": id ", id,
                                          " is out of range (id_bound ",
                                          options_.id_bound, ")"));
}

}  // namespace ps
