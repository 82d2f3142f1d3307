#include "tools/psctl/psctl_export_tables.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "common/status_macros.h"
#include "proto/ps.grpc.pb.h"
#include "server/table_export.h"

namespace ps {
namespace psctl {
namespace {

constexpr size_t kSpoolBytes = 1 << 20;

absl::Status ErrnoError(absl::string_view what, const std::string& path) {
  return absl::InvalidArgumentError(
      absl::StrCat(path, ": ", what, ": ", std::strerror(errno)));
}

// An unlinked file beside the output that holds a table's ids while its
// values stream into the archive; then copied in. Buffered.
class IdSpool {
 public:
  static absl::StatusOr<std::unique_ptr<IdSpool>> Create(
      const std::string& beside) {
    const std::string path = absl::StrCat(beside, ".ids.", ::getpid());
    const int fd =
        ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) return ErrnoError("cannot create", path);
    ::unlink(path.c_str());  // gone with the descriptor, whatever happens
    return std::unique_ptr<IdSpool>(new IdSpool(path, fd));
  }
  ~IdSpool() { ::close(fd_); }

  absl::Status Write(absl::string_view bytes) {
    if (buffer_.size() + bytes.size() > kSpoolBytes)
      PS_RETURN_IF_ERROR(Flush());
    buffer_.append(bytes.data(), bytes.size());
    return absl::OkStatus();
  }

  // Appends everything written to the array open in `w`.
  absl::Status CopyTo(NpzStreamWriter& w) {
    PS_RETURN_IF_ERROR(Flush());
    std::string piece(kSpoolBytes, '\0');
    for (uint64_t at = 0; at < size_;) {
      const ssize_t n =
          ::pread(fd_, piece.data(), piece.size(), static_cast<off_t>(at));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return ErrnoError("read", path_);
      PS_RETURN_IF_ERROR(w.Append(absl::string_view(piece.data(), n)));
      at += static_cast<uint64_t>(n);
    }
    return absl::OkStatus();
  }

 private:
  IdSpool(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}

  absl::Status Flush() {
    absl::string_view rest = buffer_;
    while (!rest.empty()) {
      const ssize_t n = ::write(fd_, rest.data(), rest.size());
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return ErrnoError("write", path_);
      rest.remove_prefix(static_cast<size_t>(n));
      size_ += static_cast<uint64_t>(n);
    }
    buffer_.clear();
    return absl::OkStatus();
  }

  const std::string path_;
  const int fd_;
  std::string buffer_;
  uint64_t size_ = 0;  // flushed bytes
};

// Table `t`'s rows on `shards` into `w` as arrays `prefix` + "ids" and
// `prefix` + "values".
absl::Status WriteTable(const TableSpec& t, const std::vector<uint32_t>& shards,
                        const RowSource& source, const std::string& prefix,
                        NpzStreamWriter& w, TablesWritten* written) {
  const uint32_t dim = t.dim();
  PS_ASSIGN_OR_RETURN(std::unique_ptr<IdSpool> spool,
                      IdSpool::Create(w.path()));
  PS_RETURN_IF_ERROR(w.Begin(prefix + "values", "<f4", 4, {dim}));
  for (uint32_t s : shards) {
    absl::Status st = source(
        t.name(), s,
        [&](absl::Span<const uint64_t> ids, absl::Span<const float> values) {
          if (values.size() != ids.size() * dim) {
            return absl::InternalError(absl::StrCat(
                ids.size(), " ids with ", values.size(), " values, dim ", dim));
          }
          PS_RETURN_IF_ERROR(w.Append(
              absl::string_view(reinterpret_cast<const char*>(values.data()),
                                values.size() * 4)));
          written->rows += ids.size();
          written->bytes += ids.size() * 8 + values.size() * 4;
          return spool->Write(absl::string_view(
              reinterpret_cast<const char*>(ids.data()), ids.size() * 8));
        });
    if (!st.ok()) {
      return absl::Status(
          st.code(), absl::StrCat("table \"", t.name(), "\", shard ", s, ": ",
                                  st.message()));
    }
  }
  PS_RETURN_IF_ERROR(w.End());
  PS_RETURN_IF_ERROR(w.Begin(prefix + "ids", "<u8", 8, {}));
  PS_RETURN_IF_ERROR(spool->CopyTo(w));
  return w.End();
}

std::vector<uint32_t> Range(uint32_t n) {
  std::vector<uint32_t> v(n);
  for (uint32_t i = 0; i < n; ++i) v[i] = i;
  return v;
}

// One message of a shard's ExportRows stream into `ids` and `values` (the
// caller checks the values per id against the table's dim).
absl::Status TakeRows(const SparseRows& m, const std::string& table,
                      std::vector<uint64_t>* ids, std::vector<float>* values) {
  const size_t n = m.ids().size() / 8;
  const size_t floats = m.values().size() / 4;
  if (m.table() != table || m.ids().size() % 8 != 0 ||
      m.values().size() % 4 != 0 || (n == 0) != (floats == 0) ||
      (n > 0 && floats % n != 0)) {
    return absl::InternalError(absl::StrCat(
        "the shard sent a malformed message (table \"", m.table(), "\", ",
        m.ids().size(), " id bytes, ", m.values().size(), " value bytes)"));
  }
  ids->resize(n);
  values->resize(floats);
  if (n > 0) {
    std::memcpy(ids->data(), m.ids().data(), n * 8);
    std::memcpy(values->data(), m.values().data(), floats * 4);
  }
  return absl::OkStatus();
}

}  // namespace

RowSource ShardRowSource(const Connection& c, std::string job_id,
                         std::vector<std::string> addresses,
                         absl::Duration timeout) {
  return [&c, job_id = std::move(job_id), addresses = std::move(addresses),
          timeout](const std::string& table, uint32_t shard,
                   const TableRowsSink::EmitFn& emit) -> absl::Status {
    if (shard >= addresses.size()) {
      return absl::FailedPreconditionError(
          absl::StrCat("the coordinator knows ", addresses.size(), " shards"));
    }
    auto stub =
        ParameterServer::NewStub(c.security.NewChannel(addresses[shard]));
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
    c.security.Authorize(&ctx);
    ExportRowsRequest req;
    req.set_job_id(job_id);
    req.set_table(table);
    std::unique_ptr<grpc::ClientReader<SparseRows>> reader =
        stub->ExportRows(&ctx, req);
    SparseRows m;
    std::vector<uint64_t> ids;
    std::vector<float> values;
    absl::Status st;
    while (st.ok() && reader->Read(&m)) {
      st = TakeRows(m, table, &ids, &values);
      if (st.ok()) st = emit(ids, values);
    }
    if (!st.ok()) ctx.TryCancel();
    absl::Status finished = FromGrpcStatus(reader->Finish());
    if (!st.ok()) return st;
    if (!finished.ok()) {
      return absl::Status(finished.code(),
                          absl::StrCat("rows from ", addresses[shard], ": ",
                                       finished.message()));
    }
    return absl::OkStatus();
  };
}

RowSource CheckpointRowSource(std::string dir, std::string job_id) {
  return [dir = std::move(dir), job_id = std::move(job_id)](
             const std::string& table, uint32_t shard,
             const TableRowsSink::EmitFn& emit) -> absl::Status {
    absl::StatusOr<std::unique_ptr<CheckpointTables>> t =
        CheckpointTables::Open(dir, shard, job_id);
    if (!t.ok()) {
      // A corrupt file is the user's input: exit 2, as for a bad flag.
      return absl::InvalidArgumentError(t.status().message());
    }
    return (*t)->Export(table, kExportBatchRows, emit);
  };
}

absl::Status WriteTables(const JobSpec& spec, uint32_t num_shards,
                         const RowSource& source, NpzStreamWriter& w,
                         TablesWritten* written) {
  for (const TableSpec& t : spec.tables()) {
    PS_RETURN_IF_ERROR(WriteTable(t, Range(num_shards), source,
                                  absl::StrCat("tables/", t.name(), "/"), w,
                                  written));
  }
  return absl::OkStatus();
}

absl::Status WriteTablesDir(const JobSpec& spec, uint32_t num_shards,
                            const RowSource& source, const std::string& dir,
                            TablesWritten* written) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::exists(dir, ec)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tables-dir ", dir, ": already exists"));
  }
  const std::string tmp = absl::StrCat(dir, ".tmp.", ::getpid());
  if (!fs::create_directory(tmp, ec)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tables-dir: cannot create ", tmp, ": ", ec.message()));
  }
  absl::Status st;
  for (const TableSpec& t : spec.tables()) {
    for (uint32_t s = 0; st.ok() && s < num_shards; ++s) {
      absl::StatusOr<std::unique_ptr<NpzStreamWriter>> w =
          NpzStreamWriter::Create(
              absl::StrCat(tmp, "/", t.name(), ".shard", s, ".npz"));
      st = w.status();
      if (st.ok()) st = WriteTable(t, {s}, source, "", **w, written);
      if (st.ok()) st = (*w)->Commit();
    }
  }
  if (st.ok()) {
    fs::rename(tmp, dir, ec);
    if (ec) {
      st = absl::InvalidArgumentError(
          absl::StrCat("--tables-dir ", dir, ": rename: ", ec.message()));
    }
  }
  if (!st.ok()) fs::remove_all(tmp, ec);
  return st;
}

}  // namespace psctl
}  // namespace ps
