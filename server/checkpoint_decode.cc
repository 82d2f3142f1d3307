// Checkpoint decoding: every field of a file is checked before it is used,
// so a truncated or corrupt file is an error naming what is wrong, never a
// crash (encoding is checkpoint.cc).
#include <cstring>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "core/float_bytes.h"
#include "server/checkpoint.h"
#include "server/internal/checkpoint_format.h"
#include "server/internal/le_bytes.h"

namespace ps {
namespace {

using internal::GetLe;
using internal::Reader;

absl::Status Invalid(absl::string_view why) {
  return absl::InvalidArgumentError(why);
}

// The Reader's first failure: the payload ends inside a field.
absl::Status Truncated(const Reader& r) {
  return absl::InvalidArgumentError(r.error());
}

// Length, magic, format version, payload size and CRC of a whole file.
absl::Status CheckHeader(absl::string_view bytes) {
  if (bytes.size() < kCheckpointHeaderBytes) {
    return absl::DataLossError(
        absl::StrCat("truncated: ", bytes.size(), " bytes, shorter than the ",
                     kCheckpointHeaderBytes, "-byte header"));
  }
  if (std::memcmp(bytes.data(), internal::kCheckpointMagic,
                  sizeof(internal::kCheckpointMagic)) != 0) {
    return Invalid("bad magic (not a psd checkpoint)");
  }
  const uint64_t format = GetLe(bytes.data() + internal::kFormatAt, 4);
  if (format != internal::kCheckpointFormat &&
      format != internal::kCheckpointFormatWithTables) {
    return Invalid(absl::StrCat("format version ", format, ", this psd reads ",
                                internal::kCheckpointFormat, " and ",
                                internal::kCheckpointFormatWithTables));
  }
  const uint64_t payload_bytes =
      GetLe(bytes.data() + internal::kPayloadBytesAt, 8);
  const uint64_t have = bytes.size() - kCheckpointHeaderBytes;
  if (payload_bytes != have) {
    return absl::DataLossError(
        absl::StrCat(have < payload_bytes ? "truncated" : "trailing bytes",
                     ": the header promises ", payload_bytes,
                     " payload bytes, the file has ", have));
  }
  const uint32_t stored =
      static_cast<uint32_t>(GetLe(bytes.data() + internal::kCrcAt, 4));
  const uint32_t computed = Crc32c(bytes.substr(kCheckpointHeaderBytes),
                                   Crc32c(bytes.substr(0, internal::kCrcAt)));
  if (stored != computed) {
    return absl::DataLossError(absl::StrFormat(
        "checksum mismatch (stored CRC32C %08x, computed %08x): the file is "
        "corrupt",
        stored, computed));
  }
  return absl::OkStatus();
}

absl::Status ReadRegistration(Reader& r, JobCheckpoint* ck) {
  uint32_t reg_len = 0;
  absl::string_view reg;
  if (!r.U32("the registration's length", &reg_len) ||
      !r.Bytes("the registration", reg_len, &reg)) {
    return Truncated(r);
  }
  if (!ck->registration.ParseFromArray(reg.data(),
                                       static_cast<int>(reg.size()))) {
    return Invalid("registration: not a RegisterJobRequest");
  }
  if (ck->registration.job_id().empty()) {
    return Invalid("registration.job_id: empty");
  }
  return absl::OkStatus();
}

absl::Status ReadMembership(Reader& r, JobCheckpoint* ck) {
  const uint32_t num_workers = ck->registration.num_workers();
  uint32_t workers_field = 0;
  if (!r.U32("the worker count", &workers_field)) return Truncated(r);
  if (num_workers == 0 || workers_field != num_workers) {
    return Invalid(absl::StrCat("membership: ", workers_field,
                                " workers, registration.num_workers is ",
                                num_workers));
  }
  if (workers_field > r.remaining()) {
    return Invalid(absl::StrCat("membership: ", workers_field,
                                " workers, more than the payload holds"));
  }
  ck->active.resize(num_workers);
  for (uint32_t w = 0; w < num_workers; ++w) {
    if (!r.U8("the membership", &ck->active[w])) return Truncated(r);
    if (ck->active[w] > 1) {
      return Invalid(absl::StrCat("membership[", w, "]: ", ck->active[w],
                                  " is not 0 or 1"));
    }
  }
  return absl::OkStatus();
}

// The chunk count, which must match the placement's chunks of the shard.
absl::StatusOr<uint32_t> ReadChunkCount(Reader& r, const JobCheckpoint& ck) {
  uint32_t local = 0;
  for (const ChunkPlacement& c : ck.registration.placement().chunks()) {
    if (c.shard() == ck.shard_id) ++local;
  }
  uint32_t num_chunks = 0;
  if (!r.U32("the chunk count", &num_chunks)) return Truncated(r);
  if (num_chunks != local) {
    return Invalid(absl::StrCat(num_chunks, " chunks, the placement puts ",
                                local, " on shard ", ck.shard_id));
  }
  return num_chunks;
}

// Reads chunk `where`'s id, version and length and checks them against the
// placement: the next chunk of the shard after `*last_id`, of its length.
absl::StatusOr<const ChunkPlacement*> ReadChunkHeader(Reader& r,
                                                      const JobCheckpoint& ck,
                                                      const std::string& where,
                                                      int64_t* last_id,
                                                      uint64_t* version) {
  const Placement& placement = ck.registration.placement();
  uint32_t id = 0;
  uint64_t length = 0;
  if (!r.U32(where + ".chunk_id", &id) || !r.U64(where + ".version", version) ||
      !r.U64(where + ".length", &length)) {
    return Truncated(r);
  }
  if (id >= static_cast<uint32_t>(placement.chunks_size()) ||
      placement.chunks(id).shard() != ck.shard_id ||
      static_cast<int64_t>(id) <= *last_id) {
    return Invalid(absl::StrCat(where, ".chunk_id: ", id,
                                " is not the next chunk of shard ", ck.shard_id,
                                " in the placement"));
  }
  *last_id = id;
  const ChunkPlacement& p = placement.chunks(id);
  if (length != p.length()) {
    return Invalid(absl::StrCat(where, ".length: ", length,
                                ", the placement says ", p.length()));
  }
  if (length > r.remaining() / sizeof(float)) {
    return Invalid(absl::StrCat(where, ".length: ", length,
                                " floats, more than the payload holds"));
  }
  return &p;
}

absl::Status ReadOptimizerState(Reader& r, const Optimizer& opt,
                                const std::string& where, ChunkState* s) {
  uint64_t opt_len = 0;
  absl::string_view opt_bytes;
  if (!r.U64(where + ".optimizer length", &opt_len) ||
      !r.Bytes(where + ".optimizer", opt_len, &opt_bytes)) {
    return Truncated(r);
  }
  if (absl::Status st =
          opt.ImportState(opt_bytes, s->values.size(), &s->optimizer);
      !st.ok()) {
    return Invalid(absl::StrCat(where, ".", st.message()));
  }
  return absl::OkStatus();
}

// BSP: which workers pushed and their gradients; ASP/SSP: next steps.
absl::Status ReadDedupState(Reader& r, uint32_t num_workers,
                            const std::string& where, ChunkState* s) {
  for (uint32_t w = 0; w < num_workers; ++w) {
    if (!r.U8(where + ".pushed", &s->pushed[w])) return Truncated(r);
    if (s->pushed[w] > 1) {
      return Invalid(absl::StrCat(where, ".pushed[", w, "]: ", s->pushed[w],
                                  " is not 0 or 1"));
    }
  }
  for (uint32_t w = 0; w < num_workers; ++w) {
    if (!s->pushed[w]) continue;
    std::string& floats = s->gradients[w].floats;
    floats.resize(s->values.size() * sizeof(float));
    if (!r.Floats(absl::StrCat(where, ".gradients[", w, "]"),
                  AsFloats(floats))) {
      return Truncated(r);
    }
  }
  for (uint32_t w = 0; w < num_workers; ++w) {
    if (!r.U64(where + ".next_step", &s->next_step[w])) return Truncated(r);
  }
  return absl::OkStatus();
}

// Chunk `i`; `last_id` is the previous chunk's id (-1 before the first).
absl::StatusOr<ChunkState> ReadChunk(Reader& r, const JobCheckpoint& ck,
                                     const Optimizer& opt, uint32_t i,
                                     int64_t* last_id) {
  const std::string where = absl::StrCat("chunks[", i, "]");
  uint64_t version = 0;
  PS_ASSIGN_OR_RETURN(const ChunkPlacement* p,
                      ReadChunkHeader(r, ck, where, last_id, &version));
  const uint32_t num_workers = ck.registration.num_workers();
  ChunkState s = NewChunkState(*p, opt, num_workers);
  s.version = version;
  if (!r.Floats(where + ".values", absl::MakeSpan(s.values))) {
    return Truncated(r);
  }
  PS_RETURN_IF_ERROR(ReadOptimizerState(r, opt, where, &s));
  PS_RETURN_IF_ERROR(ReadDedupState(r, num_workers, where, &s));
  return s;
}

}  // namespace

absl::StatusOr<JobCheckpoint> DecodeCheckpoint(absl::string_view bytes) {
  PS_RETURN_IF_ERROR(CheckHeader(bytes));
  JobCheckpoint ck;
  ck.shard_id =
      static_cast<uint32_t>(GetLe(bytes.data() + internal::kShardAt, 4));
  ck.sequence = GetLe(bytes.data() + internal::kSequenceAt, 8);
  ck.step = GetLe(bytes.data() + internal::kStepAt, 8);
  Reader r(bytes.substr(kCheckpointHeaderBytes));
  PS_RETURN_IF_ERROR(ReadRegistration(r, &ck));
  PS_RETURN_IF_ERROR(ReadMembership(r, &ck));
  absl::StatusOr<std::unique_ptr<Optimizer>> opt =
      Optimizer::Create(ck.registration.spec().optimizer());
  if (!opt.ok()) {
    return Invalid(absl::StrCat("registration.spec.", opt.status().message()));
  }
  PS_ASSIGN_OR_RETURN(const uint32_t num_chunks, ReadChunkCount(r, ck));
  int64_t last_id = -1;
  ck.chunks.reserve(num_chunks);
  for (uint32_t i = 0; i < num_chunks; ++i) {
    PS_ASSIGN_OR_RETURN(ChunkState s, ReadChunk(r, ck, **opt, i, &last_id));
    ck.chunks.push_back(std::move(s));
  }
  if (GetLe(bytes.data() + internal::kFormatAt, 4) ==
      internal::kCheckpointFormatWithTables) {
    TablesRef ref;
    if (!r.U64("the tables file's size", &ref.bytes) ||
        !r.U32("the tables file's CRC", &ref.crc)) {
      return Truncated(r);
    }
    if (ref.bytes < internal::kTablesHeaderBytes) {
      return Invalid(absl::StrCat("tables file size ", ref.bytes,
                                  ", shorter than its header"));
    }
    ck.tables = ref;
  }
  if (r.remaining() != 0) {
    return Invalid(absl::StrCat(r.remaining(), " bytes after the last chunk"));
  }
  return ck;
}

}  // namespace ps
