// The rows of a job's sparse tables as a stopped shard checkpointed them,
// for psctl export --from-checkpoint: the shard's own restore path
// (CheckpointStore::LoadLatest and OpenTables, JobTables::Restore), then
// each table's rows streamed in batches (server/sparse/table_rows.h).
//
//   PS_ASSIGN_OR_RETURN(std::unique_ptr<CheckpointTables> t,
//                       CheckpointTables::Open(dir, shard, job_id));
//   PS_RETURN_IF_ERROR(t->Export("user_emb", 4096, emit));
//
// Memory: the shard's tables of the job, restored (as the shard would hold
// them), plus one stripe's copy while a table is exported. Reads only;
// never writes to `dir`. Thread-compatible.
#ifndef SERVER_TABLE_EXPORT_H_
#define SERVER_TABLE_EXPORT_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/ps.pb.h"
#include "server/sparse/table_rows.h"

namespace ps {
namespace internal {
struct Job;
}  // namespace internal

class CheckpointTables {
 public:
  // Shard `shard`'s newest intact checkpoint of `job_id` in `dir`, with its
  // tables restored. NOT_FOUND when the shard has none of the job;
  // FAILED_PRECONDITION when the job has no sparse tables; DATA_LOSS or
  // INVALID_ARGUMENT naming the file for a corrupt or mismatched one.
  static absl::StatusOr<std::unique_ptr<CheckpointTables>> Open(
      const std::string& dir, uint32_t shard, const std::string& job_id);
  ~CheckpointTables();

  const RegisterJobRequest& registration() const { return registration_; }
  // The step of the checkpoint read.
  uint64_t step() const { return step_; }

  // Table `name`'s rows, in batches of at most `batch_rows`. NOT_FOUND
  // naming a table the job lacks; an error from `emit` is returned.
  absl::Status Export(const std::string& name, size_t batch_rows,
                      const TableRowsSink::EmitFn& emit) const;

 private:
  CheckpointTables(RegisterJobRequest registration, uint64_t step,
                   std::shared_ptr<internal::Job> job);

  const RegisterJobRequest registration_;
  const uint64_t step_;
  const std::shared_ptr<internal::Job> job_;
};

}  // namespace ps

#endif  // SERVER_TABLE_EXPORT_H_
