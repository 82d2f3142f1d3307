// Shard::ExportRows: a sparse table's rows streamed out of the shard
// (psctl export), decoded from the table's save stream as it is written.
#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "server/internal/job.h"
#include "server/shard.h"
#include "server/sparse/table_rows.h"

namespace ps {

absl::Status Shard::ExportRows(
    const ExportRowsRequest& req,
    const std::function<absl::Status(const SparseRows&)>& send) const {
  const uint32_t limit = req.max_message_bytes() == 0
                             ? kDefaultExportMessageBytes
                             : req.max_message_bytes();
  if (limit > kMaxExportMessageBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_message_bytes: ", limit, " is over ", kMaxExportMessageBytes));
  }
  // The job stays alive while it is read, even if dropped meanwhile.
  PS_ASSIGN_OR_RETURN(JobPtr job, FindJob(req.job_id()));
  if (job->tables == nullptr) {
    return absl::NotFoundError(absl::StrCat("job_id: job \"", req.job_id(),
                                            "\" has no sparse tables"));
  }
  uint32_t dim = 0;
  for (const TableSpec& t : job->spec.tables()) {
    if (t.name() == req.table()) dim = t.dim();
  }
  if (dim == 0) {
    return absl::NotFoundError(absl::StrCat("table: job \"", req.job_id(),
                                            "\" has no sparse table \"",
                                            req.table(), "\""));
  }
  SparseRows msg;
  msg.set_table(req.table());
  const size_t row_bytes = 8 + 4 * size_t{dim};
  TableRowsSink sink(
      std::max<size_t>(limit / row_bytes, 1),
      [&](absl::Span<const uint64_t> ids, absl::Span<const float> values) {
        // Little-endian host (core/float_bytes.h): the wire's layout.
        msg.mutable_ids()->assign(reinterpret_cast<const char*>(ids.data()),
                                  ids.size() * 8);
        msg.mutable_values()->assign(
            reinterpret_cast<const char*>(values.data()), values.size() * 4);
        return send(msg);
      });
  PS_RETURN_IF_ERROR(job->tables->SaveTable(req.table(), sink));
  PS_RETURN_IF_ERROR(sink.Finish());
  if (sink.dim() != dim) {
    return absl::InternalError(absl::StrCat("table \"", req.table(),
                                            "\" saved dim ", sink.dim(),
                                            ", its spec says ", dim));
  }
  return absl::OkStatus();
}

}  // namespace ps
