#include "server/coordinator/trace_store.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/trace_recorder.h"

namespace ps {
namespace {

bool SameWindow(const TraceWindow& a, const TraceWindow& b) {
  return a.job_id() == b.job_id() && a.begin_step() == b.begin_step() &&
         a.end_step() == b.end_step();
}

std::string Range(const TraceWindow& w) {
  return absl::StrCat("[", w.begin_step(), ", ", w.end_step(), ")");
}

}  // namespace

absl::Status TraceStore::Start(const TraceWindow& window) {
  if (window.end_step() <= window.begin_step()) {
    return absl::InvalidArgumentError(
        absl::StrCat("window: empty step range ", Range(window)));
  }
  if (window.end_step() - window.begin_step() > kTraceMaxSteps) {
    return absl::InvalidArgumentError(
        absl::StrCat("window: ", window.end_step() - window.begin_step(),
                     " steps; a trace holds at most ", kTraceMaxSteps));
  }
  JobTrace& t = jobs_[window.job_id()];
  t.window = window;
  t.workers.clear();
  return absl::OkStatus();
}

const TraceWindow* TraceStore::Window(const std::string& job_id) const {
  auto it = jobs_.find(job_id);
  return it == jobs_.end() ? nullptr : &it->second.window;
}

absl::Status TraceStore::Upload(const UploadTraceRequest& upload,
                                uint32_t num_workers) {
  auto it = jobs_.find(upload.window().job_id());
  if (it == jobs_.end() || !SameWindow(it->second.window, upload.window())) {
    return absl::FailedPreconditionError(absl::StrCat(
        "window: steps ", Range(upload.window()), " of job ",
        upload.window().job_id(), " are not the job's current trace window"));
  }
  if (upload.rank() >= num_workers) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rank: ", upload.rank(), " is not below num_workers ", num_workers));
  }
  if (static_cast<size_t>(upload.spans_size()) > kTraceMaxSpans) {
    return absl::InvalidArgumentError(absl::StrCat(
        "spans: ", upload.spans_size(), "; at most ", kTraceMaxSpans));
  }
  WorkerTrace& w = it->second.workers[upload.rank()];
  w.Clear();
  w.set_rank(upload.rank());
  w.set_name(upload.name());
  *w.mutable_devices() = upload.devices();
  *w.mutable_spans() = upload.spans();
  w.set_dropped(upload.dropped());
  return absl::OkStatus();
}

void TraceStore::Get(const std::string& job_id, std::optional<uint32_t> rank,
                     GetTraceResponse* out) const {
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return;
  *out->mutable_window() = it->second.window;
  for (const auto& [r, w] : it->second.workers) {
    out->add_uploaded_ranks(r);
    if (rank.has_value() && *rank == r) *out->mutable_worker() = w;
  }
}

}  // namespace ps
