// The companion tables files of a shard's checkpoints: reading one
// (TablesReader), its header, and the chains of incremental ones
// (checkpoint.h; written by checkpoint_store.cc).
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "server/checkpoint.h"
#include "server/internal/checkpoint_format.h"
#include "server/internal/le_bytes.h"

namespace ps {
namespace {

using internal::GetLe;

// Tables files are read through a buffer of this size.
constexpr size_t kIoBufferBytes = size_t{1} << 20;

}  // namespace

CheckpointStore::TablesReader::TablesReader(std::string path, int fd,
                                            TablesRef ref)
    : path_(std::move(path)), fd_(fd), ref_(ref) {}

CheckpointStore::TablesReader::~TablesReader() { ::close(fd_); }

absl::Status CheckpointStore::TablesReader::Fill() {
  buf_.resize(kIoBufferBytes);
  while (true) {
    const ssize_t n = ::read(fd_, buf_.data(), buf_.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      return absl::DataLossError(absl::StrCat(
          "tables file ", path_, ": read error: ", std::strerror(errno)));
    }
    buf_.resize(static_cast<size_t>(n));
    at_ = 0;
    read_ += static_cast<uint64_t>(n);
    crc_ = Crc32c(buf_, crc_);
    return absl::OkStatus();
  }
}

absl::Status CheckpointStore::TablesReader::Read(size_t n, char* out) {
  while (n > 0) {
    if (at_ == buf_.size()) {
      PS_RETURN_IF_ERROR(Fill());
      if (buf_.empty()) {
        return absl::DataLossError(
            absl::StrCat("tables file ", path_, ": ends early (", read_,
                         " bytes, the checkpoint names ", ref_.bytes, ")"));
      }
    }
    const size_t k = std::min(n, buf_.size() - at_);
    std::memcpy(out, buf_.data() + at_, k);
    at_ += k;
    out += k;
    n -= k;
  }
  return absl::OkStatus();
}

absl::Status CheckpointStore::TablesReader::Finish() {
  if (at_ != buf_.size()) {
    return absl::DataLossError(absl::StrCat(
        "tables file ", path_, ": bytes after the tables' stream"));
  }
  PS_RETURN_IF_ERROR(Fill());
  if (!buf_.empty() || read_ != ref_.bytes) {
    return absl::DataLossError(
        absl::StrCat("tables file ", path_, ": ", read_,
                     " bytes or more, the checkpoint names ", ref_.bytes));
  }
  if (crc_ != ref_.crc) {
    return absl::DataLossError(absl::StrFormat(
        "tables file %s: checksum mismatch (the checkpoint names CRC32C "
        "%08x, the file has %08x): the file is corrupt",
        path_, ref_.crc, crc_));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<CheckpointStore::TablesReader>>
CheckpointStore::OpenTables(absl::string_view job_id,
                            const JobCheckpoint& checkpoint) const {
  if (!checkpoint.tables.has_value()) {
    return absl::InvalidArgumentError("the checkpoint has no tables file");
  }
  return OpenTablesAt(job_id, checkpoint.sequence, *checkpoint.tables);
}

absl::StatusOr<std::unique_ptr<CheckpointStore::TablesReader>>
CheckpointStore::OpenTablesAt(absl::string_view job_id, uint64_t sequence,
                              TablesRef ref) const {
  const std::string path = TablesPathFor(job_id, sequence);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return absl::DataLossError(absl::StrCat(
        "tables file ", path, ": cannot open: ", std::strerror(errno)));
  }
  std::unique_ptr<TablesReader> r(new TablesReader(path, fd, ref));
  std::error_code ec;
  const uint64_t size = std::filesystem::file_size(path, ec);
  if (ec || size != ref.bytes) {
    return absl::DataLossError(absl::StrCat(
        "tables file ", path, ": ", ec ? ec.message() : "",
        ec ? ""
           : absl::StrCat(size, " bytes, the checkpoint names ", ref.bytes)));
  }
  char h[internal::kTablesIncrementHeaderBytes];
  PS_RETURN_IF_ERROR(r->Read(internal::kTablesHeaderBytes, h));
  const uint64_t format = GetLe(h + 8, 4);
  if (std::memcmp(h, internal::kTablesMagic, sizeof(internal::kTablesMagic)) !=
          0 ||
      (format != internal::kTablesFormat &&
       format != internal::kTablesIncrementFormat) ||
      GetLe(h + 12, 4) != shard_id_ || GetLe(h + 16, 8) != sequence) {
    return absl::DataLossError(absl::StrCat(
        "tables file ", path, ": its header is not that of format ",
        internal::kTablesFormat, " or ", internal::kTablesIncrementFormat,
        ", shard ", shard_id_, ", sequence ", sequence));
  }
  if (format == internal::kTablesIncrementFormat) {
    char* b = h + internal::kTablesHeaderBytes;
    PS_RETURN_IF_ERROR(r->Read(
        internal::kTablesIncrementHeaderBytes - internal::kTablesHeaderBytes,
        b));
    TablesBase base;
    base.sequence = GetLe(b, 8);
    base.ref.bytes = GetLe(b + 8, 8);
    base.ref.crc = static_cast<uint32_t>(GetLe(b + 16, 4));
    if (base.sequence >= sequence) {
      return absl::DataLossError(
          absl::StrCat("tables file ", path, ": an increment on sequence ",
                       base.sequence, ", not an earlier one"));
    }
    r->base_ = base;
  }
  return r;
}

std::optional<uint64_t> CheckpointStore::BaseOf(absl::string_view job_id,
                                                uint64_t sequence) const {
  const std::string path = TablesPathFor(job_id, sequence);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  char h[internal::kTablesIncrementHeaderBytes];
  const ssize_t n = ::pread(fd, h, sizeof(h), 0);
  ::close(fd);
  if (n != static_cast<ssize_t>(sizeof(h)) ||
      std::memcmp(h, internal::kTablesMagic, sizeof(internal::kTablesMagic)) !=
          0 ||
      GetLe(h + 8, 4) != internal::kTablesIncrementFormat) {
    return std::nullopt;
  }
  const uint64_t base = GetLe(h + internal::kTablesHeaderBytes, 8);
  if (base >= sequence) return std::nullopt;
  return base;
}

absl::Status CheckpointStore::ReadTablesChain(absl::string_view job_id,
                                              const JobCheckpoint& checkpoint,
                                              RestoreTablesFn restore) const {
  const std::string newest = TablesPathFor(job_id, checkpoint.sequence);
  auto fail = [&](const absl::Status& st) {
    return absl::Status(
        st.code(), absl::StrCat("tables file ", newest, ": ", st.message()));
  };
  // Newest first, back to a full one.
  std::vector<std::unique_ptr<TablesReader>> chain;
  absl::StatusOr<std::unique_ptr<TablesReader>> r =
      OpenTables(job_id, checkpoint);
  while (true) {
    if (!r.ok()) return fail(r.status());
    chain.push_back(*std::move(r));
    const std::optional<TablesBase>& base = chain.back()->base();
    if (!base.has_value()) break;
    if (chain.size() > internal::kMaxTablesChain) {
      return fail(absl::DataLossError(absl::StrCat(
          "a chain of more than ", internal::kMaxTablesChain, " increments")));
    }
    r = OpenTablesAt(job_id, base->sequence, base->ref);
    if (!r.ok()) {
      r = absl::Status(r.status().code(),
                       absl::StrCat("the increment ", chain.back()->path(),
                                    " applies to it: ", r.status().message()));
    }
  }
  std::reverse(chain.begin(), chain.end());
  std::vector<ByteSource*> increments;
  for (size_t i = 1; i < chain.size(); ++i)
    increments.push_back(chain[i].get());
  if (absl::Status st = restore(*chain[0], increments); !st.ok()) {
    if (chain.size() == 1) return fail(st);
    return fail(absl::Status(
        st.code(), absl::StrCat("its chain of ", chain.size(), " files from ",
                                chain[0]->path(), ": ", st.message())));
  }
  for (const auto& reader : chain) {
    if (absl::Status st = reader->Finish(); !st.ok()) return fail(st);
  }
  return absl::OkStatus();
}

}  // namespace ps
