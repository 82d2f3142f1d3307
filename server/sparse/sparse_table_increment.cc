// SparseTable's incremental checkpoints: TrackChanges, the increment's
// stream and ApplyIncrement. Stream layout (integers little-endian, floats
// as their IEEE-754 bits, little-endian; rows as in a full stream,
// sparse_table_checkpoint.cc):
//
//   header   magic "PSSPDELT", version u32 (1), dim u32, state_floats u32,
//            sections u32, name_bytes u32, name, CRC32C u32 of the above
//   section  (one per stripe of the saving table)
//            removed u64, rows u64, counters u64, CRC32C u32 of these 24
//            bytes
//            removed x id u64: ids removed since the previous snapshot, in
//                     order (an id may be back among the rows)
//            rows x   {id u64, last_step u64, pushes u64,
//                      (dim + state_floats) x f32}: the rows created or
//                     pushed since the previous snapshot, least recently
//                     pushed first
//            counters x {id u64, count u32}: the admission counters that
//                     changed, ascending id, count 0 = gone
//            CRC32C u32 of the removed ids, rows and counters
//   trailer  magic "PSSPDEND", removed u64, rows u64, counters u64, CRC32C
//            u32 of these
//
// Applied in stream order: each section's removed ids are removed, then
// each row is written (with lru it becomes the newest, as its pushes made
// it; without, an existing row keeps its place, which is its creation
// order), then the counters. So base + increments restores the rows, their
// optimizer state, push counts, last steps, LRU order and the admission
// counters exactly, for a table of the saving table's num_stripes.
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
using sparse_internal::CheckCrc;
using sparse_internal::DecodeRowFloats;
using sparse_internal::kCounterBytes;
using sparse_internal::kRowMetaBytes;
using sparse_internal::ReadCrc;
using sparse_internal::ReadRecords;

constexpr char kFullMagic[8] = {'P', 'S', 'S', 'P', 'A', 'R', 'S', 'E'};
constexpr char kDeltaMagic[8] = {'P', 'S', 'S', 'P', 'D', 'E', 'L', 'T'};
constexpr char kDeltaEndMagic[8] = {'P', 'S', 'S', 'P', 'D', 'E', 'N', 'D'};
constexpr uint32_t kDeltaVersion = 1;
constexpr uint32_t kMaxNameBytes = 4096;
constexpr uint32_t kMaxSections = 1u << 20;

// Serves `prefix` (already read from `rest`), then `rest`.
class PrefixSource : public ByteSource {
 public:
  PrefixSource(absl::string_view prefix, ByteSource& rest)
      : prefix_(prefix), rest_(rest) {}
  absl::Status Read(size_t n, char* out) override {
    const size_t k = n < prefix_.size() ? n : prefix_.size();
    std::memcpy(out, prefix_.data(), k);
    prefix_.remove_prefix(k);
    return k == n ? absl::OkStatus() : rest_.Read(n - k, out + k);
  }

 private:
  absl::string_view prefix_;
  ByteSource& rest_;
};

}  // namespace

void SparseTable::TrackChanges() {
  for (const auto& stripe : stripes_) {
    absl::MutexLock lock(&stripe->mu);
    if (!stripe->data.tracking()) stripe->data.TrackChanges();
  }
  tracking_.store(true);
  needs_full_.store(true);
}

std::string SparseTable::IncrementHeader() const {
  return sparse_internal::EncodeStreamHeader(
      absl::string_view(kDeltaMagic, 8), kDeltaVersion, options_.dim,
      options_.state_floats_per_row, options_.num_stripes, options_.name);
}

std::string SparseTable::IncrementTrailer(uint64_t removed, uint64_t rows,
                                          uint64_t counters) {
  std::string out(kDeltaEndMagic, 8);
  PutLe(removed, 8, &out);
  PutLe(rows, 8, &out);
  PutLe(counters, 8, &out);
  PutLe(Crc32c(out), 4, &out);
  return out;
}

absl::Status SparseTable::ApplyIncrement(ByteSource& source,
                                         const IdFilter& accept) {
  char magic[8];
  absl::Status st = source.Read(sizeof(magic), magic);
  PrefixSource whole(absl::string_view(magic, sizeof(magic)), source);
  if (st.ok() && std::memcmp(magic, kFullMagic, 8) == 0 && !accept) {
    return Restore(whole);
  }
  if (st.ok() && std::memcmp(magic, kDeltaMagic, 8) != 0) {
    st = absl::DataLossError(accept ? "not a sparse table increment"
                                    : "not a sparse table stream (bad magic)");
  }
  if (st.ok()) st = ApplyIncrementBody(whole, accept);
  if (st.ok()) st = CheckBudget();
  // Its rows no longer follow the previous snapshot's.
  needs_full_.store(true);
  if (st.ok()) return st;
  return absl::Status(st.code(), absl::StrCat("sparse table '", options_.name,
                                              "': increment: ", st.message()));
}

absl::Status SparseTable::ApplyIncrementBody(ByteSource& source,
                                             const IdFilter& accept) {
  char h[28];
  uint32_t crc = 0;
  PS_RETURN_IF_ERROR(ReadCrc(source, sizeof(h), h, &crc));
  const auto u32_at = [&h](size_t at) {
    return static_cast<uint32_t>(GetLe(h + at, 4));
  };
  const uint32_t version = u32_at(8), dim = u32_at(12), state = u32_at(16),
                 sections = u32_at(20), name_bytes = u32_at(24);
  if (version != kDeltaVersion) {
    return absl::DataLossError(absl::StrCat("increment format version ",
                                            version, ", want ", kDeltaVersion));
  }
  if (name_bytes > kMaxNameBytes || sections > kMaxSections) {
    return absl::DataLossError("corrupt header");
  }
  std::string name(name_bytes, '\0');
  PS_RETURN_IF_ERROR(ReadCrc(source, name_bytes, name.data(), &crc));
  PS_RETURN_IF_ERROR(CheckCrc(source, crc, "header"));
  if (name != options_.name || dim != options_.dim ||
      state != options_.state_floats_per_row) {
    return absl::InvalidArgumentError(
        absl::StrCat("stream holds table '", name, "' (dim ", dim,
                     ", state_floats ", state, "), want dim ", options_.dim,
                     ", state_floats ", options_.state_floats_per_row));
  }
  uint64_t totals[3] = {0, 0, 0};  // removed, rows, counters
  for (uint32_t sec = 0; sec < sections; ++sec) {
    PS_RETURN_IF_ERROR(ApplyIncrementSection(source, sec, accept, totals));
  }
  char t[32];
  crc = 0;
  PS_RETURN_IF_ERROR(ReadCrc(source, sizeof(t), t, &crc));
  PS_RETURN_IF_ERROR(CheckCrc(source, crc, "trailer"));
  if (std::memcmp(t, kDeltaEndMagic, 8) != 0 || GetLe(t + 8, 8) != totals[0] ||
      GetLe(t + 16, 8) != totals[1] || GetLe(t + 24, 8) != totals[2]) {
    return absl::DataLossError("trailer does not match the sections");
  }
  return absl::OkStatus();
}

absl::Status SparseTable::ApplyIncrementSection(ByteSource& source,
                                                uint32_t section,
                                                const IdFilter& accept,
                                                uint64_t* totals) {
  const std::string where = absl::StrCat("section ", section);
  char sh[24];
  uint32_t crc = 0;
  PS_RETURN_IF_ERROR(ReadCrc(source, sizeof(sh), sh, &crc));
  PS_RETURN_IF_ERROR(CheckCrc(source, crc, where + " header"));
  const uint64_t removed = GetLe(sh, 8), rows = GetLe(sh + 8, 8),
                 counters = GetLe(sh + 16, 8);
  const uint32_t floats = options_.dim + options_.state_floats_per_row;
  const size_t row_bytes = kRowMetaBytes + size_t{floats} * 4;
  // Reads `count` records of `bytes` each, then calls apply(record) on each
  // under its stripe's lock.
  std::vector<char> buf;
  crc = 0;
  auto each = [&](uint64_t count, size_t bytes, auto apply) -> absl::Status {
    return ReadRecords(source, count, bytes, &buf, &crc,
                       [&](uint64_t id, const char* p) -> absl::Status {
                         PS_RETURN_IF_ERROR(CheckStoredId(id, where));
                         if (accept && !accept(id)) {
                           return absl::InvalidArgumentError(absl::StrCat(
                               where, ": id ", id, " does not belong here"));
                         }
                         LockedStripe& stripe =
                             *stripes_[StripeOf(sparse_internal::RowHash(id))];
                         absl::MutexLock lock(&stripe.mu);
                         return apply(stripe.data, id, p);
                       });
  };
  PS_RETURN_IF_ERROR(each(
      removed, 8, [](sparse_internal::Stripe& s, uint64_t id, const char*) {
        s.RemoveId(id);
        return absl::OkStatus();
      }));
  std::vector<float> values(floats);
  PS_RETURN_IF_ERROR(each(
      rows, row_bytes,
      [&](sparse_internal::Stripe& s, uint64_t id, const char* p) {
        const uint64_t pushes = GetLe(p + 16, 8);
        if (pushes == 0) {
          return absl::DataLossError(absl::StrCat(
              where, ": row id ", id, " has 0 pushes (a stored row has >= 1)"));
        }
        DecodeRowFloats(p, floats, values.data());
        s.UpsertRow(id, /*last_step=*/GetLe(p + 8, 8), pushes, values.data());
        return absl::OkStatus();
      }));
  PS_RETURN_IF_ERROR(
      each(counters, kCounterBytes,
           [](sparse_internal::Stripe& s, uint64_t id, const char* p) {
             s.SetCounter(id, static_cast<uint32_t>(GetLe(p + 8, 4)));
             return absl::OkStatus();
           }));
  PS_RETURN_IF_ERROR(CheckCrc(source, crc, where));
  totals[0] += removed;
  totals[1] += rows;
  totals[2] += counters;
  return absl::OkStatus();
}

absl::Status SparseTable::SaveRowsWhere(const IdFilter& keep,
                                        ByteSink& sink) const {
  using sparse_internal::RowStore;
  using sparse_internal::StripeImage;
  PS_RETURN_IF_ERROR(sink.Write(IncrementHeader()));
  const uint32_t floats = options_.dim + options_.state_floats_per_row;
  const size_t record_bytes = RowStore::RecordBytes(floats);
  uint64_t rows = 0, counters = 0;
  for (const auto& stripe : stripes_) {
    StripeImage image;
    {
      absl::ReaderMutexLock lock(&stripe->mu);
      stripe->data.Snapshot(&image);
    }
    // The kept rows as an increment's changed rows (their LRU order kept).
    image.changes = true;
    for (uint32_t slot = image.oldest; slot != RowStore::kNil;) {
      const sparse_internal::RowMeta m =
          RowStore::MetaAt(image.records.data(), record_bytes, slot);
      if (keep(m.id)) {
        if ((slot >> 6) >= image.changed.size()) {
          image.changed.resize((slot >> 6) + 1, 0);
        }
        image.changed[slot >> 6] |= uint64_t{1} << (slot & 63);
        ++image.changed_rows;
      }
      slot = m.newer;
    }
    image.counters.erase(
        std::remove_if(image.counters.begin(), image.counters.end(),
                       [&](const auto& c) { return !keep(c.first); }),
        image.counters.end());
    rows += image.changed_rows;
    counters += image.counters.size();
    PS_RETURN_IF_ERROR(sparse_internal::EncodeSection(image, floats, sink));
  }
  return sink.Write(IncrementTrailer(0, rows, counters));
}

absl::Status SparseTable::CheckBudget() const {
  const uint64_t share = options_.memory_budget_bytes / options_.num_stripes;
  if (share == 0) return absl::OkStatus();
  for (uint32_t s = 0; s < options_.num_stripes; ++s) {
    absl::ReaderMutexLock lock(&stripes_[s]->mu);
    const uint64_t bytes = stripes_[s]->data.bytes();
    if (bytes > share) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "stripe ", s, " would hold ", bytes, " bytes, over its share ", share,
          " of memory_budget_bytes"));
    }
  }
  return absl::OkStatus();
}

}  // namespace ps
