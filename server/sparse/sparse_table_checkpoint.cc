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
#include "server/sparse/sparse_table.h"

namespace ps {
namespace {

using internal::GetLe;
using internal::PutLe;
using internal::SetLe;
using sparse_internal::RowMeta;
using sparse_internal::RowStore;
using sparse_internal::Stripe;
using sparse_internal::StripeImage;

constexpr char kMagic[8] = {'P', 'S', 'S', 'P', 'A', 'R', 'S', 'E'};
constexpr char kEndMagic[8] = {'P', 'S', 'S', 'P', 'E', 'N', 'D', '\n'};
constexpr uint32_t kVersion = 2;
constexpr uint32_t kMaxNameBytes = 4096;
constexpr uint32_t kMaxSections = 1u << 20;
// Rows decoded per read while restoring (bounds the staging buffer).
constexpr size_t kRowsPerRead = 4096;
constexpr size_t kCounterBytes = 12;
// A row's bytes in the stream besides its floats: id, last_step, pushes.
constexpr size_t kRowMetaBytes = 24;

// Appends one stripe's section, encoded from its snapshot. Counters are
// written in id order, so equal tables give equal streams whatever their
// hash tables' history.
void EncodeSection(StripeImage& image, uint32_t floats_per_row,
                   std::string* out) {
  std::sort(image.counters.begin(), image.counters.end());
  const size_t record_bytes = RowStore::RecordBytes(floats_per_row);
  const size_t row_bytes = kRowMetaBytes + size_t{floats_per_row} * 4;
  const size_t start = out->size();
  const size_t body_bytes =
      image.rows * row_bytes + image.counters.size() * kCounterBytes;
  out->resize(start + 20 + body_bytes + 4);
  char* p = out->data() + start;
  p = SetLe(image.rows, 8, p);
  p = SetLe(image.counters.size(), 8, p);
  p = SetLe(Crc32c(absl::string_view(p - 16, 16)), 4, p);
  char* const body = p;
  for (uint32_t slot = image.oldest; slot != RowStore::kNil;) {
    const RowMeta m =
        RowStore::MetaAt(image.records.data(), record_bytes, slot);
    p = SetLe(m.id, 8, p);
    p = SetLe(m.last_step, 8, p);
    p = SetLe(m.pushes, 8, p);
    const char* rec = image.records.data() + size_t{slot} * record_bytes;
    for (uint32_t e = 0; e < floats_per_row; ++e) {
      uint32_t bits;
      std::memcpy(&bits, rec + 4 * size_t{e}, 4);
      p = SetLe(bits, 4, p);
    }
    slot = m.newer;
  }
  for (const auto& [id, count] : image.counters) {
    p = SetLe(id, 8, p);
    p = SetLe(count, 4, p);
  }
  SetLe(Crc32c(absl::string_view(body, body_bytes)), 4, p);
}

// Reads n bytes, extending a running CRC.
absl::Status ReadCrc(ByteSource& src, size_t n, char* out, uint32_t* crc) {
  PS_RETURN_IF_ERROR(src.Read(n, out));
  *crc = Crc32c(absl::string_view(out, n), *crc);
  return absl::OkStatus();
}

absl::Status CheckCrc(ByteSource& src, uint32_t crc, absl::string_view what) {
  char b[4];
  PS_RETURN_IF_ERROR(src.Read(4, b));
  if (static_cast<uint32_t>(GetLe(b, 4)) != crc) {
    return absl::DataLossError(absl::StrCat("checksum mismatch in ", what));
  }
  return absl::OkStatus();
}

}  // namespace

namespace {

std::string EncodeHeader(const SparseTable::Options& o) {
  std::string out;
  out.append(kMagic, 8);
  PutLe(kVersion, 4, &out);
  PutLe(o.dim, 4, &out);
  PutLe(o.state_floats_per_row, 4, &out);
  PutLe(o.num_stripes, 4, &out);
  PutLe(static_cast<uint32_t>(o.name.size()), 4, &out);
  out.append(o.name);
  PutLe(Crc32c(out), 4, &out);
  return out;
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
  std::string out;
  StripeImage image;
  for (const auto& stripe : stripes_) {
    {
      // The only pause Save causes: pushes to this one stripe wait for a
      // copy of its slabs (pulls share the reader lock).
      absl::ReaderMutexLock lock(&stripe->mu);
      stripe->data.Snapshot(&image);
    }
    out.clear();
    EncodeSection(image, floats, &out);
    rows += image.rows;
    counters += image.counters.size();
    PS_RETURN_IF_ERROR(sink.Write(out));
  }
  return sink.Write(EncodeTrailer(rows, counters));
}

SparseTable::Snapshot SparseTable::TakeSnapshot() const {
  Snapshot snap;
  snap.stripes.resize(stripes_.size());
  for (size_t s = 0; s < stripes_.size(); ++s) {
    absl::ReaderMutexLock lock(&stripes_[s]->mu);
    stripes_[s]->data.Snapshot(&snap.stripes[s]);
  }
  return snap;
}

absl::Status SparseTable::WriteSnapshot(Snapshot snapshot,
                                        ByteSink& sink) const {
  const uint32_t floats = options_.dim + options_.state_floats_per_row;
  PS_RETURN_IF_ERROR(sink.Write(EncodeHeader(options_)));
  uint64_t rows = 0, counters = 0;
  std::string out;
  for (StripeImage& image : snapshot.stripes) {
    out.clear();
    EncodeSection(image, floats, &out);
    rows += image.rows;
    counters += image.counters.size();
    // Free each stripe's copy as soon as it is written.
    image = StripeImage();
    PS_RETURN_IF_ERROR(sink.Write(out));
  }
  return sink.Write(EncodeTrailer(rows, counters));
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
    for (uint64_t done = 0; done < rows;) {
      const size_t n =
          static_cast<size_t>(std::min<uint64_t>(rows - done, kRowsPerRead));
      buf.resize(n * row_bytes);
      PS_RETURN_IF_ERROR(ReadCrc(source, buf.size(), buf.data(), &crc));
      for (size_t r = 0; r < n; ++r) {
        const char* p = buf.data() + r * row_bytes;
        const uint64_t id = GetLe(p, 8);
        PS_RETURN_IF_ERROR(CheckStoredId(id, where));
        for (uint32_t e = 0; e < floats; ++e) {
          const uint32_t bits = static_cast<uint32_t>(
              GetLe(p + kRowMetaBytes + 4 * size_t{e}, 4));
          std::memcpy(&values[e], &bits, 4);
        }
        const uint64_t hash = sparse_internal::RowHash(id);
        PS_RETURN_IF_ERROR(staged[StripeOf(hash)]->RestoreRow(
            id, /*last_step=*/GetLe(p + 8, 8), /*pushes=*/GetLe(p + 16, 8),
            values.data()));
      }
      done += n;
    }
    for (uint64_t done = 0; done < counters;) {
      const size_t n = static_cast<size_t>(
          std::min<uint64_t>(counters - done, kRowsPerRead));
      buf.resize(n * kCounterBytes);
      PS_RETURN_IF_ERROR(ReadCrc(source, buf.size(), buf.data(), &crc));
      for (size_t r = 0; r < n; ++r) {
        const char* p = buf.data() + r * kCounterBytes;
        const uint64_t id = GetLe(p, 8);
        PS_RETURN_IF_ERROR(CheckStoredId(id, where));
        const uint64_t hash = sparse_internal::RowHash(id);
        PS_RETURN_IF_ERROR(staged[StripeOf(hash)]->RestoreCounter(
            id, static_cast<uint32_t>(GetLe(p + 8, 4))));
      }
      done += n;
    }
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
