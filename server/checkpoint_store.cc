// The checkpoint directory of one shard: file names, atomic writes, and
// loading the newest intact file (format: checkpoint.cc and
// checkpoint_decode.cc).
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
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
#include "common/status_macros.h"
#include "server/checkpoint.h"
#include "server/internal/checkpoint_format.h"
#include "server/internal/le_bytes.h"

namespace ps {
namespace {

using internal::PutLe;

constexpr char kSuffix[] = ".ckpt";
constexpr char kTablesSuffix[] = ".tables";
constexpr char kTempSuffix[] = ".tmp";
// Tables files are streamed through a buffer of this size.
constexpr size_t kIoBufferBytes = size_t{1} << 20;

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

// Writes all of `bytes` to `fd`.
absl::Status WriteAll(int fd, absl::string_view bytes,
                      const std::string& path) {
  size_t written = 0;
  while (written < bytes.size()) {
    const ssize_t n =
        ::write(fd, bytes.data() + written, bytes.size() - written);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoError("cannot write", path);
    }
    written += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

// fsync, close and rename `tmp` to `path` (unlinking `tmp` on failure),
// then fsync the directory. Takes `fd`.
absl::Status Commit(int fd, const std::string& tmp, const std::string& path,
                    const std::string& dir) {
  if (::fsync(fd) != 0) {
    absl::Status s = ErrnoError("cannot fsync", tmp);
    ::close(fd);
    ::unlink(tmp.c_str());
    return s;
  }
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
  return SyncDirectory(dir);
}

// Buffers writes to a file, counting its bytes and their CRC32C.
class FileSink : public ByteSink {
 public:
  FileSink(int fd, const std::string& path) : fd_(fd), path_(path) {
    buf_.reserve(kIoBufferBytes);
  }
  absl::Status Write(absl::string_view bytes) override {
    crc_ = Crc32c(bytes, crc_);
    bytes_ += bytes.size();
    if (buf_.size() + bytes.size() > kIoBufferBytes) {
      PS_RETURN_IF_ERROR(Flush());
      if (bytes.size() >= kIoBufferBytes) return WriteAll(fd_, bytes, path_);
    }
    buf_.append(bytes.data(), bytes.size());
    return absl::OkStatus();
  }
  absl::Status Flush() {
    absl::Status s = WriteAll(fd_, buf_, path_);
    buf_.clear();
    return s;
  }
  TablesRef ref() const { return {bytes_, crc_}; }

 private:
  const int fd_;
  const std::string& path_;
  std::string buf_;
  uint64_t bytes_ = 0;
  uint32_t crc_ = 0;
};

}  // namespace

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
  const std::string tables_temp_suffix =
      absl::StrCat(kTablesSuffix, kTempSuffix);
  for (const auto& e : std::filesystem::directory_iterator(store->dir_, ec)) {
    FileName f;
    const std::string name = e.path().filename().string();
    if ((ParseFileName(name, temp_suffix, &f) ||
         ParseFileName(name, tables_temp_suffix, &f)) &&
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

absl::StatusOr<std::unique_ptr<CheckpointStore>>
CheckpointStore::OpenForReading(std::string dir, uint32_t shard_id) {
  std::error_code ec;
  if (dir.empty() || !std::filesystem::is_directory(dir, ec)) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint directory \"", dir, "\": not a directory",
                     ec ? absl::StrCat(" (", ec.message(), ")") : ""));
  }
  return std::unique_ptr<CheckpointStore>(
      new CheckpointStore(std::move(dir), shard_id));
}

absl::StatusOr<std::vector<uint32_t>> CheckpointStore::ShardsIn(
    const std::string& dir) {
  std::set<uint32_t> shards;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    FileName f;
    if (ParseFileName(e.path().filename().string(), kSuffix, &f)) {
      shards.insert(f.shard);
    }
  }
  if (ec) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot list ", dir, ": ", ec.message()));
  }
  return std::vector<uint32_t>(shards.begin(), shards.end());
}

std::string CheckpointStore::PathFor(absl::string_view job_id,
                                     uint64_t sequence) const {
  return absl::StrFormat("%s/%s.shard%d.%012d%s", dir_, EscapeJobId(job_id),
                         shard_id_, sequence, kSuffix);
}

std::string CheckpointStore::TablesPathFor(absl::string_view job_id,
                                           uint64_t sequence) const {
  return absl::StrFormat("%s/%s.shard%d.%012d%s", dir_, EscapeJobId(job_id),
                         shard_id_, sequence, kTablesSuffix);
}

absl::StatusOr<std::vector<std::pair<uint64_t, std::string>>>
CheckpointStore::Files(absl::string_view job_id,
                       absl::string_view suffix) const {
  std::vector<std::pair<uint64_t, std::string>> files;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir_, ec)) {
    FileName f;
    if (ParseFileName(e.path().filename().string(), suffix, &f) &&
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
  if (absl::Status s = WriteAll(fd, bytes, tmp); !s.ok()) {
    ::close(fd);
    ::unlink(tmp.c_str());
    return s;
  }
  PS_RETURN_IF_ERROR(Commit(fd, tmp, path, dir_));
  RemoveOld(job_id, path);
  RemoveOrphanTables(job_id);
  return path;
}

void CheckpointStore::RemoveOld(absl::string_view job_id,
                                const std::string& keep) const {
  absl::StatusOr<std::vector<std::pair<uint64_t, std::string>>> files =
      Files(job_id);
  if (!files.ok() || files->size() <= static_cast<size_t>(kCheckpointsKept)) {
    return;
  }
  // The newest kCheckpointsKept, and the checkpoints their tables chains
  // apply to (a full one and the increments up to each).
  std::set<uint64_t> kept;
  std::set<uint64_t> fulls;  // where the kept chains start
  auto keep_chain = [&](uint64_t newest) {
    std::optional<uint64_t> seq = newest;
    uint64_t first = newest;
    // BaseOf only goes down, so this ends; the bound caps the reads.
    for (size_t n = 0; seq.has_value() && n <= internal::kMaxTablesChain; ++n) {
      kept.insert(*seq);
      first = *seq;
      seq = BaseOf(job_id, *seq);
    }
    fulls.insert(first);
  };
  for (size_t i = files->size() - kCheckpointsKept; i < files->size(); ++i) {
    keep_chain((*files)[i].first);
  }
  // When they all rest on one full tables file, a torn copy of it would
  // leave nothing: also keep the newest checkpoint before it, and its
  // chain.
  if (fulls.size() == 1) {
    for (auto it = files->rbegin(); it != files->rend(); ++it) {
      if (it->first < *fulls.begin()) {
        keep_chain(it->first);
        break;
      }
    }
  }
  // Never the one just written, even if an older run left higher
  // sequence numbers behind.
  std::error_code ec;
  for (const auto& [seq, file] : *files) {
    if (kept.count(seq) == 0 && file != keep) {
      std::filesystem::remove(file, ec);
    }
  }
}

void CheckpointStore::RemoveOrphanTables(absl::string_view job_id) const {
  absl::StatusOr<std::vector<std::pair<uint64_t, std::string>>> kept =
      Files(job_id);
  absl::StatusOr<std::vector<std::pair<uint64_t, std::string>>> tables =
      Files(job_id, kTablesSuffix);
  if (!kept.ok() || !tables.ok()) return;  // the next write tries again
  std::set<uint64_t> named;
  for (const auto& [seq, path] : *kept) named.insert(seq);
  std::error_code ec;
  for (const auto& [seq, path] : *tables) {
    if (named.count(seq) == 0) std::filesystem::remove(path, ec);
  }
}

absl::StatusOr<TablesRef> CheckpointStore::WriteTables(
    absl::string_view job_id, uint64_t sequence,
    absl::FunctionRef<absl::Status(ByteSink&)> save,
    std::optional<TablesBase> base) const {
  const std::string path = TablesPathFor(job_id, sequence);
  const std::string tmp = path + kTempSuffix;
  const int fd =
      ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoError("cannot create", tmp);
  FileSink sink(fd, tmp);
  std::string header(internal::kTablesMagic, sizeof(internal::kTablesMagic));
  PutLe(base.has_value() ? internal::kTablesIncrementFormat
                         : internal::kTablesFormat,
        4, &header);
  PutLe(shard_id_, 4, &header);
  PutLe(sequence, 8, &header);
  if (base.has_value()) {
    PutLe(base->sequence, 8, &header);
    PutLe(base->ref.bytes, 8, &header);
    PutLe(base->ref.crc, 4, &header);
  }
  absl::Status s = sink.Write(header);
  if (s.ok()) s = save(sink);
  if (s.ok()) s = sink.Flush();
  if (!s.ok()) {
    ::close(fd);
    ::unlink(tmp.c_str());
    return s;
  }
  PS_RETURN_IF_ERROR(Commit(fd, tmp, path, dir_));
  return sink.ref();
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
    absl::string_view job_id, const Accept& accept) const {
  PS_ASSIGN_OR_RETURN(const auto files, Files(job_id));
  if (files.empty()) {
    return absl::NotFoundError(absl::StrCat("no checkpoint of job \"", job_id,
                                            "\" for shard ", shard_id_, " in ",
                                            dir_));
  }
  Loaded loaded;
  for (auto it = files.rbegin(); it != files.rend(); ++it) {
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
    if (ck.ok() && accept) {
      if (absl::Status st = accept(*ck, it->second); !st.ok()) {
        ck = absl::Status(st.code(), absl::StrCat("checkpoint ", it->second,
                                                  ": ", st.message()));
      }
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
  PS_ASSIGN_OR_RETURN(auto files, Files(job_id));
  PS_ASSIGN_OR_RETURN(const auto tables, Files(job_id, kTablesSuffix));
  files.insert(files.end(), tables.begin(), tables.end());
  for (const auto& [seq, path] : files) {
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