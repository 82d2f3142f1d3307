#include "server/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <system_error>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/float_bytes.h"

namespace ps {
namespace {

constexpr char kMagic[8] = {'P', 'S', 'C', 'K', 'P', 'T', '\r', '\n'};
constexpr uint32_t kFormat = 1;
// Header offsets (see the table in checkpoint.h).
constexpr size_t kFormatAt = 8;
constexpr size_t kShardAt = 12;
constexpr size_t kSequenceAt = 16;
constexpr size_t kStepAt = 24;
constexpr size_t kPayloadBytesAt = 32;
constexpr size_t kCrcAt = 40;
static_assert(kCrcAt + 4 == kCheckpointHeaderBytes, "header layout");

constexpr char kSuffix[] = ".ckpt";
constexpr char kTempSuffix[] = ".tmp";

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

// ---------------------------------------------------------------------------
// Little-endian encoding.

constexpr bool kLittleEndian = __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__;

void PutLe(uint64_t v, int bytes, std::string* out) {
  for (int i = 0; i < bytes; ++i) {
    out->push_back(static_cast<char>(v >> (8 * i)));
  }
}

void SetLe(uint64_t v, int bytes, char* at) {
  for (int i = 0; i < bytes; ++i) at[i] = static_cast<char>(v >> (8 * i));
}

uint64_t GetLe(const char* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) {
    v |= static_cast<uint64_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  }
  return v;
}

void AppendFloats(absl::Span<const float> v, std::string* out) {
  const size_t at = out->size();
  out->resize(at + v.size() * sizeof(float));
  char* dst = &(*out)[at];
  if (kLittleEndian) {
    if (!v.empty()) std::memcpy(dst, v.data(), v.size() * sizeof(float));
    return;
  }
  for (size_t i = 0; i < v.size(); ++i) {
    uint32_t bits;
    std::memcpy(&bits, &v[i], 4);
    SetLe(bits, 4, dst + 4 * i);
  }
}

void ReadFloats(const char* p, absl::Span<float> out) {
  if (kLittleEndian) {
    if (!out.empty()) std::memcpy(out.data(), p, out.size() * sizeof(float));
    return;
  }
  for (size_t i = 0; i < out.size(); ++i) {
    const uint32_t bits = static_cast<uint32_t>(GetLe(p + 4 * i, 4));
    std::memcpy(&out[i], &bits, 4);
  }
}

// Bounds-checked reads over the payload; the first failure sticks and
// names what was being read.
class Reader {
 public:
  explicit Reader(absl::string_view bytes) : bytes_(bytes) {}

  bool U8(const char* what, uint8_t* v) { return Int(what, 1, v); }
  bool U32(const char* what, uint32_t* v) { return Int(what, 4, v); }
  bool U64(const char* what, uint64_t* v) { return Int(what, 8, v); }

  bool Bytes(const std::string& what, uint64_t n, absl::string_view* out) {
    if (!Need(what, n)) return false;
    *out = bytes_.substr(at_, n);
    at_ += n;
    return true;
  }

  bool Floats(const std::string& what, absl::Span<float> out) {
    if (out.size() > (bytes_.size() - at_) / sizeof(float)) {
      return Fail(what, out.size() * sizeof(float));
    }
    ReadFloats(bytes_.data() + at_, out);
    at_ += out.size() * sizeof(float);
    return true;
  }

  size_t remaining() const { return bytes_.size() - at_; }
  const std::string& error() const { return error_; }

 private:
  template <typename T>
  bool Int(const char* what, int n, T* v) {
    if (!Need(what, n)) return false;
    *v = static_cast<T>(GetLe(bytes_.data() + at_, n));
    at_ += n;
    return true;
  }
  bool Need(const std::string& what, uint64_t n) {
    if (n <= bytes_.size() - at_) return true;
    return Fail(what, n);
  }
  bool Fail(const std::string& what, uint64_t n) {
    error_ = absl::StrCat("payload ends inside ", what, " (", n,
                          " bytes needed at payload offset ", at_, ", ",
                          bytes_.size() - at_, " left)");
    return false;
  }

  absl::string_view bytes_;
  size_t at_ = 0;
  std::string error_;
};

absl::Status ErrnoError(absl::string_view what, const std::string& path) {
  return absl::InternalError(
      absl::StrCat(what, " ", path, ": ", std::strerror(errno)));
}

// Job ids may hold any byte; file names get [A-Za-z0-9_-] and %XX.
std::string EscapeJobId(absl::string_view id) {
  std::string out;
  for (unsigned char c : id) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
        (c >= '0' && c <= '9') || c == '_' || c == '-') {
      out.push_back(static_cast<char>(c));
    } else {
      absl::StrAppendFormat(&out, "%%%02X", c);
    }
  }
  return out;
}

bool UnescapeJobId(absl::string_view s, std::string* out) {
  out->clear();
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      out->push_back(s[i]);
      continue;
    }
    if (i + 2 >= s.size()) return false;
    int v = 0;
    for (int k = 1; k <= 2; ++k) {
      const char h = s[i + k];
      v <<= 4;
      if (h >= '0' && h <= '9') {
        v |= h - '0';
      } else if (h >= 'A' && h <= 'F') {
        v |= h - 'A' + 10;
      } else {
        return false;
      }
    }
    out->push_back(static_cast<char>(v));
    i += 2;
  }
  return true;
}

// Splits "<job>.shard<N>.<seq>.ckpt" (with `suffix` instead of ".ckpt").
struct FileName {
  std::string job_id;
  uint32_t shard = 0;
  uint64_t sequence = 0;
};
bool ParseFileName(absl::string_view name, absl::string_view suffix,
                   FileName* out) {
  if (name.size() <= suffix.size() ||
      name.substr(name.size() - suffix.size()) != suffix) {
    return false;
  }
  name.remove_suffix(suffix.size());
  std::vector<absl::string_view> parts = absl::StrSplit(name, '.');
  if (parts.size() != 3 || parts[1].substr(0, 5) != "shard") return false;
  if (!absl::SimpleAtoi(parts[1].substr(5), &out->shard)) return false;
  if (parts[2].empty() ||
      !std::all_of(parts[2].begin(), parts[2].end(),
                   [](char c) { return c >= '0' && c <= '9'; }) ||
      !absl::SimpleAtoi(parts[2], &out->sequence)) {
    return false;
  }
  return UnescapeJobId(parts[0], &out->job_id);
}

absl::Status SyncDirectory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoError("cannot open directory", dir);
  absl::Status s;
  if (::fsync(fd) != 0) s = ErrnoError("cannot fsync directory", dir);
  ::close(fd);
  return s;
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

// ---------------------------------------------------------------------------
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
      const absl::Span<const float> g = AsFloats(s.gradients[r]);
      const size_t n = std::min(g.size(), s.values.size());
      AppendFloats(g.subspan(0, n), &out_);
      out_.append((s.values.size() - n) * sizeof(float), '\0');
    }
  }
  for (uint32_t r = 0; r < num_workers_; ++r) {
    PutLe(r < s.next_step.size() ? s.next_step[r] : 0, 8, &out_);
  }
}

std::string CheckpointEncoder::Finish(uint64_t sequence, uint64_t step) && {
  SetLe(num_chunks_, 4, &out_[num_chunks_at_]);
  std::memcpy(&out_[0], kMagic, sizeof(kMagic));
  SetLe(kFormat, 4, &out_[kFormatAt]);
  SetLe(shard_id_, 4, &out_[kShardAt]);
  SetLe(sequence, 8, &out_[kSequenceAt]);
  SetLe(step, 8, &out_[kStepAt]);
  SetLe(out_.size() - kCheckpointHeaderBytes, 8, &out_[kPayloadBytesAt]);
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
  return std::move(enc).Finish(checkpoint.sequence, checkpoint.step);
}

// ---------------------------------------------------------------------------
// Decoding.

absl::StatusOr<JobCheckpoint> DecodeCheckpoint(absl::string_view bytes) {
  auto invalid = [](absl::string_view why) {
    return absl::InvalidArgumentError(why);
  };
  if (bytes.size() < kCheckpointHeaderBytes) {
    return absl::DataLossError(
        absl::StrCat("truncated: ", bytes.size(), " bytes, shorter than the ",
                     kCheckpointHeaderBytes, "-byte header"));
  }
  if (std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0) {
    return invalid("bad magic (not a psd checkpoint)");
  }
  const uint64_t format = GetLe(bytes.data() + kFormatAt, 4);
  if (format != kFormat) {
    return invalid(
        absl::StrCat("format version ", format, ", this psd reads ", kFormat));
  }
  const uint64_t payload_bytes = GetLe(bytes.data() + kPayloadBytesAt, 8);
  const uint64_t have = bytes.size() - kCheckpointHeaderBytes;
  if (payload_bytes != have) {
    return absl::DataLossError(
        absl::StrCat(have < payload_bytes ? "truncated" : "trailing bytes",
                     ": the header promises ", payload_bytes,
                     " payload bytes, the file has ", have));
  }
  const uint32_t stored =
      static_cast<uint32_t>(GetLe(bytes.data() + kCrcAt, 4));
  const uint32_t computed = Crc32c(bytes.substr(kCheckpointHeaderBytes),
                                   Crc32c(bytes.substr(0, kCrcAt)));
  if (stored != computed) {
    return absl::DataLossError(absl::StrFormat(
        "checksum mismatch (stored CRC32C %08x, computed %08x): the file is "
        "corrupt",
        stored, computed));
  }

  JobCheckpoint ck;
  ck.shard_id = static_cast<uint32_t>(GetLe(bytes.data() + kShardAt, 4));
  ck.sequence = GetLe(bytes.data() + kSequenceAt, 8);
  ck.step = GetLe(bytes.data() + kStepAt, 8);
  Reader r(bytes.substr(kCheckpointHeaderBytes));
  auto truncated = [&r]() { return absl::InvalidArgumentError(r.error()); };

  uint32_t reg_len;
  absl::string_view reg;
  if (!r.U32("the registration's length", &reg_len) ||
      !r.Bytes("the registration", reg_len, &reg)) {
    return truncated();
  }
  if (!ck.registration.ParseFromArray(reg.data(),
                                      static_cast<int>(reg.size()))) {
    return invalid("registration: not a RegisterJobRequest");
  }
  const RegisterJobRequest& registration = ck.registration;
  if (registration.job_id().empty()) {
    return invalid("registration.job_id: empty");
  }
  const uint32_t num_workers = registration.num_workers();
  uint32_t workers_field;
  if (!r.U32("the worker count", &workers_field)) return truncated();
  if (num_workers == 0 || workers_field != num_workers) {
    return invalid(absl::StrCat("membership: ", workers_field,
                                " workers, registration.num_workers is ",
                                num_workers));
  }
  if (workers_field > r.remaining()) {
    return invalid(absl::StrCat("membership: ", workers_field,
                                " workers, more than the payload holds"));
  }
  ck.active.resize(num_workers);
  for (uint32_t w = 0; w < num_workers; ++w) {
    if (!r.U8("the membership", &ck.active[w])) return truncated();
    if (ck.active[w] > 1) {
      return invalid(absl::StrCat("membership[", w, "]: ", ck.active[w],
                                  " is not 0 or 1"));
    }
  }

  absl::StatusOr<std::unique_ptr<Optimizer>> opt =
      Optimizer::Create(registration.spec().optimizer());
  if (!opt.ok()) {
    return invalid(absl::StrCat("registration.spec.", opt.status().message()));
  }
  const Placement& placement = registration.placement();
  uint32_t local = 0;
  for (const ChunkPlacement& c : placement.chunks()) {
    if (c.shard() == ck.shard_id) ++local;
  }
  uint32_t num_chunks;
  if (!r.U32("the chunk count", &num_chunks)) return truncated();
  if (num_chunks != local) {
    return invalid(absl::StrCat(num_chunks, " chunks, the placement puts ",
                                local, " on shard ", ck.shard_id));
  }
  int64_t last_id = -1;
  ck.chunks.reserve(num_chunks);
  for (uint32_t i = 0; i < num_chunks; ++i) {
    const std::string where = absl::StrCat("chunks[", i, "]");
    uint32_t id;
    uint64_t version, length;
    if (!r.U32((where + ".chunk_id").c_str(), &id) ||
        !r.U64((where + ".version").c_str(), &version) ||
        !r.U64((where + ".length").c_str(), &length)) {
      return truncated();
    }
    if (id >= static_cast<uint32_t>(placement.chunks_size()) ||
        placement.chunks(id).shard() != ck.shard_id ||
        static_cast<int64_t>(id) <= last_id) {
      return invalid(absl::StrCat(where, ".chunk_id: ", id,
                                  " is not the next chunk of shard ",
                                  ck.shard_id, " in the placement"));
    }
    last_id = id;
    const ChunkPlacement& p = placement.chunks(id);
    if (length != p.length()) {
      return invalid(absl::StrCat(where, ".length: ", length,
                                  ", the placement says ", p.length()));
    }
    if (length > r.remaining() / sizeof(float)) {
      return invalid(absl::StrCat(where, ".length: ", length,
                                  " floats, more than the payload holds"));
    }
    ChunkState s = NewChunkState(p, **opt, num_workers);
    s.version = version;
    if (!r.Floats(where + ".values", absl::MakeSpan(s.values))) {
      return truncated();
    }
    uint64_t opt_len;
    absl::string_view opt_bytes;
    if (!r.U64((where + ".optimizer length").c_str(), &opt_len) ||
        !r.Bytes(where + ".optimizer", opt_len, &opt_bytes)) {
      return truncated();
    }
    if (absl::Status st = (*opt)->ImportState(opt_bytes, length, &s.optimizer);
        !st.ok()) {
      return invalid(absl::StrCat(where, ".", st.message()));
    }
    for (uint32_t w = 0; w < num_workers; ++w) {
      if (!r.U8((where + ".pushed").c_str(), &s.pushed[w])) return truncated();
      if (s.pushed[w] > 1) {
        return invalid(absl::StrCat(where, ".pushed[", w, "]: ", s.pushed[w],
                                    " is not 0 or 1"));
      }
    }
    for (uint32_t w = 0; w < num_workers; ++w) {
      if (!s.pushed[w]) continue;
      s.gradients[w].resize(length * sizeof(float));
      if (!r.Floats(absl::StrCat(where, ".gradients[", w, "]"),
                    AsFloats(s.gradients[w]))) {
        return truncated();
      }
    }
    for (uint32_t w = 0; w < num_workers; ++w) {
      if (!r.U64((where + ".next_step").c_str(), &s.next_step[w])) {
        return truncated();
      }
    }
    ck.chunks.push_back(std::move(s));
  }
  if (r.remaining() != 0) {
    return invalid(absl::StrCat(r.remaining(), " bytes after the last chunk"));
  }
  return ck;
}

// ---------------------------------------------------------------------------
// The store.

absl::StatusOr<std::unique_ptr<CheckpointStore>> CheckpointStore::Open(
    std::string dir, uint32_t shard_id) {
  if (dir.empty()) {
    return absl::InvalidArgumentError("checkpoint_dir: empty");
  }
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    return absl::InvalidArgumentError(absl::StrCat(
        "checkpoint_dir: cannot create ", dir, ": ", ec.message()));
  }
  if (!std::filesystem::is_directory(dir, ec)) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint_dir: ", dir, " is not a directory"));
  }
  std::unique_ptr<CheckpointStore> store(
      new CheckpointStore(std::move(dir), shard_id));
  // A crash in the middle of a write leaves "<file>.tmp": never valid.
  const std::string temp_suffix = absl::StrCat(kSuffix, kTempSuffix);
  for (const auto& e : std::filesystem::directory_iterator(store->dir_, ec)) {
    FileName f;
    if (ParseFileName(e.path().filename().string(), temp_suffix, &f) &&
        f.shard == shard_id) {
      std::filesystem::remove(e.path(), ec);
    }
  }
  if (ec) {
    return absl::InvalidArgumentError(absl::StrCat(
        "checkpoint_dir: cannot list ", store->dir_, ": ", ec.message()));
  }
  return store;
}

std::string CheckpointStore::PathFor(absl::string_view job_id,
                                     uint64_t sequence) const {
  return absl::StrFormat("%s/%s.shard%d.%012d%s", dir_, EscapeJobId(job_id),
                         shard_id_, sequence, kSuffix);
}

absl::StatusOr<std::vector<std::pair<uint64_t, std::string>>>
CheckpointStore::Files(absl::string_view job_id) const {
  std::vector<std::pair<uint64_t, std::string>> files;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir_, ec)) {
    FileName f;
    if (ParseFileName(e.path().filename().string(), kSuffix, &f) &&
        f.shard == shard_id_ && f.job_id == job_id) {
      files.emplace_back(f.sequence, e.path().string());
    }
  }
  if (ec) {
    return absl::InternalError(
        absl::StrCat("cannot list ", dir_, ": ", ec.message()));
  }
  std::sort(files.begin(), files.end());
  return files;
}

absl::StatusOr<std::string> CheckpointStore::Write(
    absl::string_view job_id, uint64_t sequence,
    absl::string_view bytes) const {
  const std::string path = PathFor(job_id, sequence);
  const std::string tmp = path + kTempSuffix;
  const int fd =
      ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoError("cannot create", tmp);
  auto fail = [&](absl::Status s) {
    ::close(fd);
    ::unlink(tmp.c_str());
    return s;
  };
  size_t written = 0;
  while (written < bytes.size()) {
    const ssize_t n =
        ::write(fd, bytes.data() + written, bytes.size() - written);
    if (n < 0) {
      if (errno == EINTR) continue;
      return fail(ErrnoError("cannot write", tmp));
    }
    written += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) return fail(ErrnoError("cannot fsync", tmp));
  if (::close(fd) != 0) {
    absl::Status s = ErrnoError("cannot close", tmp);
    ::unlink(tmp.c_str());
    return s;
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    absl::Status s = ErrnoError(absl::StrCat("cannot rename to ", path), tmp);
    ::unlink(tmp.c_str());
    return s;
  }
  // The rename is durable only once the directory entry is.
  if (absl::Status s = SyncDirectory(dir_); !s.ok()) return s;

  absl::StatusOr<std::vector<std::pair<uint64_t, std::string>>> files =
      Files(job_id);
  if (files.ok() && files->size() > static_cast<size_t>(kCheckpointsKept)) {
    // Never the one just written, even if an older run left higher
    // sequence numbers behind.
    std::error_code ec;
    for (size_t i = 0; i + kCheckpointsKept < files->size(); ++i) {
      if ((*files)[i].second != path) {
        std::filesystem::remove((*files)[i].second, ec);
      }
    }
  }
  return path;
}

absl::StatusOr<std::vector<std::string>> CheckpointStore::ListJobs() const {
  std::set<std::string> jobs;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir_, ec)) {
    FileName f;
    if (ParseFileName(e.path().filename().string(), kSuffix, &f) &&
        f.shard == shard_id_) {
      jobs.insert(f.job_id);
    }
  }
  if (ec) {
    return absl::InternalError(
        absl::StrCat("cannot list ", dir_, ": ", ec.message()));
  }
  return std::vector<std::string>(jobs.begin(), jobs.end());
}

absl::StatusOr<JobCheckpoint> CheckpointStore::ReadFile(
    const std::string& path) const {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(absl::StrCat(
        "checkpoint ", path, ": cannot open: ", std::strerror(errno)));
  }
  std::stringstream s;
  s << in.rdbuf();
  if (in.bad()) {
    return absl::DataLossError(
        absl::StrCat("checkpoint ", path, ": read error"));
  }
  absl::StatusOr<JobCheckpoint> ck = DecodeCheckpoint(s.str());
  if (!ck.ok()) {
    return absl::Status(
        ck.status().code(),
        absl::StrCat("checkpoint ", path, ": ", ck.status().message()));
  }
  return ck;
}

absl::StatusOr<CheckpointStore::Loaded> CheckpointStore::LoadLatest(
    absl::string_view job_id) const {
  absl::StatusOr<std::vector<std::pair<uint64_t, std::string>>> files =
      Files(job_id);
  if (!files.ok()) return files.status();
  if (files->empty()) {
    return absl::NotFoundError(absl::StrCat("no checkpoint of job \"", job_id,
                                            "\" for shard ", shard_id_, " in ",
                                            dir_));
  }
  Loaded loaded;
  for (auto it = files->rbegin(); it != files->rend(); ++it) {
    absl::StatusOr<JobCheckpoint> ck = ReadFile(it->second);
    if (ck.ok() && ck->shard_id != shard_id_) {
      ck = absl::InvalidArgumentError(
          absl::StrCat("checkpoint ", it->second, ": written by shard ",
                       ck->shard_id, ", not shard ", shard_id_));
    } else if (ck.ok() && ck->registration.job_id() != job_id) {
      ck = absl::InvalidArgumentError(
          absl::StrCat("checkpoint ", it->second, ": holds job \"",
                       ck->registration.job_id(), "\", not \"", job_id, "\""));
    } else if (ck.ok() && ck->sequence != it->first) {
      ck = absl::InvalidArgumentError(
          absl::StrCat("checkpoint ", it->second, ": holds sequence ",
                       ck->sequence, ", the name says ", it->first));
    }
    if (ck.ok()) {
      loaded.checkpoint = *std::move(ck);
      loaded.path = it->second;
      return loaded;
    }
    loaded.rejected.push_back(ck.status());
  }
  std::vector<std::string> why;
  for (const absl::Status& s : loaded.rejected) {
    why.push_back(std::string(s.message()));
  }
  return absl::DataLossError(absl::StrCat("no usable checkpoint of job \"",
                                          job_id, "\" for shard ", shard_id_,
                                          ": ", absl::StrJoin(why, "; ")));
}

absl::Status CheckpointStore::Remove(absl::string_view job_id) const {
  absl::StatusOr<std::vector<std::pair<uint64_t, std::string>>> files =
      Files(job_id);
  if (!files.ok()) return files.status();
  for (const auto& [seq, path] : *files) {
    std::error_code ec;
    std::filesystem::remove(path, ec);
    if (ec) {
      return absl::InternalError(
          absl::StrCat("cannot remove ", path, ": ", ec.message()));
    }
  }
  return SyncDirectory(dir_);
}

}  // namespace ps
