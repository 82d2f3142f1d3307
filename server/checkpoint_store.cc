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

namespace ps {
namespace {

constexpr char kSuffix[] = ".ckpt";
constexpr char kTempSuffix[] = ".tmp";

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
  PS_RETURN_IF_ERROR(SyncDirectory(dir_));

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
  PS_ASSIGN_OR_RETURN(const auto files, Files(job_id));
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