#include "server/table_export.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "server/checkpoint.h"
#include "server/internal/job.h"
#include "server/internal/registration.h"

namespace ps {

CheckpointTables::CheckpointTables(RegisterJobRequest registration,
                                   uint64_t step,
                                   std::shared_ptr<internal::Job> job)
    : registration_(std::move(registration)),
      step_(step),
      job_(std::move(job)) {}

CheckpointTables::~CheckpointTables() = default;

absl::StatusOr<std::unique_ptr<CheckpointTables>> CheckpointTables::Open(
    const std::string& dir, uint32_t shard, const std::string& job_id) {
  PS_ASSIGN_OR_RETURN(std::unique_ptr<CheckpointStore> store,
                      CheckpointStore::OpenForReading(dir, shard));
  PS_ASSIGN_OR_RETURN(CheckpointStore::Loaded l, store->LoadLatest(job_id));
  JobCheckpoint& ck = l.checkpoint;
  const std::string where = absl::StrCat("checkpoint ", l.path);
  if (!ck.tables.has_value()) {
    return absl::FailedPreconditionError(
        absl::StrCat(where, ": job \"", job_id, "\" has no sparse tables"));
  }
  // The job as the shard would re-create it (tables empty, no chunks).
  int local_count = 0;
  absl::StatusOr<std::shared_ptr<internal::Job>> job = internal::NewJob(
      ck.registration, shard, /*can_checkpoint=*/false, &local_count);
  if (!job.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": its registration: ", job.status().message()));
  }
  if ((*job)->tables == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": names a tables file, its registration has no tables"));
  }
  // A full tables file, or the chain of increments up to this one.
  PS_RETURN_IF_ERROR(store->ReadTablesChain(
      job_id, ck,
      [&](ByteSource& full, absl::Span<ByteSource* const> increments) {
        return (*job)->tables->Restore(full, increments);
      }));
  return std::unique_ptr<CheckpointTables>(new CheckpointTables(
      std::move(ck.registration), ck.step, *std::move(job)));
}

absl::Status CheckpointTables::Export(const std::string& name,
                                      size_t batch_rows,
                                      const TableRowsSink::EmitFn& emit) const {
  TableRowsSink sink(batch_rows, emit);
  PS_RETURN_IF_ERROR(job_->tables->SaveTable(name, sink));
  return sink.Finish();
}

}  // namespace ps
