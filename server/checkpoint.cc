// Checkpoint encoding and the CRC32C that guards every file (decoding is
// checkpoint_decode.cc, the directory checkpoint_store.cc).
#include "server/checkpoint.h"

#include <array>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/float_bytes.h"
#include "server/internal/checkpoint_format.h"
#include "server/internal/le_bytes.h"

namespace ps {

using internal::AppendFloats;
using internal::kCrcAt;
using internal::PutLe;
using internal::SetLe;

namespace {

// ---------------------------------------------------------------------------
// CRC32C, slice-by-8 over the reflected Castagnoli polynomial.

using CrcTables = std::array<std::array<uint32_t, 256>, 8>;

const CrcTables& Tables() {
  static const CrcTables tables = [] {
    CrcTables t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1)));
      t[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; ++i) {
      for (int s = 1; s < 8; ++s) {
        t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xff];
      }
    }
    return t;
  }();
  return tables;
}

}  // namespace

uint32_t Crc32c(absl::string_view data, uint32_t crc) {
  const CrcTables& t = Tables();
  uint32_t c = ~crc;
  const unsigned char* p = reinterpret_cast<const unsigned char*>(data.data());
  size_t n = data.size();
  while (n >= 8) {
    const uint32_t lo =
        c ^
        (static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 |
         static_cast<uint32_t>(p[2]) << 16 | static_cast<uint32_t>(p[3]) << 24);
    c = t[7][lo & 0xff] ^ t[6][(lo >> 8) & 0xff] ^ t[5][(lo >> 16) & 0xff] ^
        t[4][lo >> 24] ^ t[3][p[4]] ^ t[2][p[5]] ^ t[1][p[6]] ^ t[0][p[7]];
    p += 8;
    n -= 8;
  }
  while (n-- > 0) c = (c >> 8) ^ t[0][(c ^ *p++) & 0xff];
  return ~c;
}

// Encoding.

CheckpointEncoder::CheckpointEncoder(uint32_t shard_id,
                                     const RegisterJobRequest& registration,
                                     absl::Span<const uint8_t> active,
                                     const Optimizer& optimizer)
    : shard_id_(shard_id),
      num_workers_(registration.num_workers()),
      optimizer_(optimizer) {
  out_.assign(kCheckpointHeaderBytes, '\0');
  const std::string reg = registration.SerializeAsString();
  PutLe(reg.size(), 4, &out_);
  out_ += reg;
  PutLe(num_workers_, 4, &out_);
  for (uint32_t r = 0; r < num_workers_; ++r) {
    out_.push_back(r < active.size() && active[r] ? 1 : 0);
  }
  num_chunks_at_ = out_.size();
  PutLe(0, 4, &out_);  // patched by Finish
}

void CheckpointEncoder::AddChunk(const ChunkState& s) {
  ++num_chunks_;
  PutLe(s.placement.chunk_id(), 4, &out_);
  PutLe(s.version, 8, &out_);
  PutLe(s.values.size(), 8, &out_);
  AppendFloats(s.values, &out_);
  const std::string opt = optimizer_.ExportState(s.optimizer);
  PutLe(opt.size(), 8, &out_);
  out_ += opt;
  for (uint32_t r = 0; r < num_workers_; ++r) {
    out_.push_back(r < s.pushed.size() && s.pushed[r] ? 1 : 0);
  }
  for (uint32_t r = 0; r < num_workers_; ++r) {
    if (r < s.pushed.size() && s.pushed[r]) {
      // A pushed gradient holds the chunk's length (a shard invariant);
      // anything else is padded or cut so the file stays parseable.
      const PendingGradient& pending = s.gradients[r];
      std::vector<float> received;
      if (!pending.received.pieces.empty()) {
        received.resize(pending.received.size() / sizeof(float));
        DecodeFloats(pending.received, absl::MakeSpan(received));
      }
      const absl::Span<const float> g = pending.received.pieces.empty()
                                            ? AsFloats(pending.floats)
                                            : absl::MakeConstSpan(received);
      const size_t n = std::min(g.size(), s.values.size());
      AppendFloats(g.subspan(0, n), &out_);
      out_.append((s.values.size() - n) * sizeof(float), '\0');
    }
  }
  for (uint32_t r = 0; r < num_workers_; ++r) {
    PutLe(r < s.next_step.size() ? s.next_step[r] : 0, 8, &out_);
  }
}

std::string CheckpointEncoder::Finish(uint64_t sequence, uint64_t step,
                                      std::optional<TablesRef> tables) && {
  SetLe(num_chunks_, 4, &out_[num_chunks_at_]);
  if (tables.has_value()) {
    PutLe(tables->bytes, 8, &out_);
    PutLe(tables->crc, 4, &out_);
  }
  std::memcpy(&out_[0], internal::kCheckpointMagic,
              sizeof(internal::kCheckpointMagic));
  SetLe(tables.has_value() ? internal::kCheckpointFormatWithTables
                           : internal::kCheckpointFormat,
        4, &out_[internal::kFormatAt]);
  SetLe(shard_id_, 4, &out_[internal::kShardAt]);
  SetLe(sequence, 8, &out_[internal::kSequenceAt]);
  SetLe(step, 8, &out_[internal::kStepAt]);
  SetLe(out_.size() - kCheckpointHeaderBytes, 8,
        &out_[internal::kPayloadBytesAt]);
  const absl::string_view all(out_);
  const uint32_t crc =
      Crc32c(all.substr(kCheckpointHeaderBytes), Crc32c(all.substr(0, kCrcAt)));
  SetLe(crc, 4, &out_[kCrcAt]);
  return std::move(out_);
}

absl::StatusOr<std::string> EncodeCheckpoint(const JobCheckpoint& checkpoint) {
  absl::StatusOr<std::unique_ptr<Optimizer>> opt =
      Optimizer::Create(checkpoint.registration.spec().optimizer());
  if (!opt.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("registration.spec.", opt.status().message()));
  }
  CheckpointEncoder enc(checkpoint.shard_id, checkpoint.registration,
                        checkpoint.active, **opt);
  for (const ChunkState& c : checkpoint.chunks) enc.AddChunk(c);
  return std::move(enc).Finish(checkpoint.sequence, checkpoint.step,
                               checkpoint.tables);
}

}  // namespace ps
