// TraceStore: the coordinator's step-timeline state (psctl trace): each
// job's latest trace window and the spans its workers uploaded for it.
//
//   TraceStore traces;
//   PS_RETURN_IF_ERROR(traces.Start(window));      // StartTrace
//   const TraceWindow* w = traces.Window(job_id);  // into Heartbeat answers
//   PS_RETURN_IF_ERROR(traces.Upload(upload, num_workers));
//   traces.Get(job_id, rank, &response);           // GetTrace
//
// Bounded: one window per job, one upload per rank (the latest), each at
// most kTraceMaxSpans spans; a new window drops the old uploads. Not
// thread-safe: the JobCoordinator holds its mutex around every call.
#ifndef SERVER_COORDINATOR_TRACE_STORE_H_
#define SERVER_COORDINATOR_TRACE_STORE_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "proto/coordinator.pb.h"

namespace ps {

class TraceStore {
 public:
  // Checks the window's range (INVALID_ARGUMENT naming `window`: empty, or
  // more than kTraceMaxSteps steps) and stores it for its job, dropping the
  // job's earlier window and uploads.
  absl::Status Start(const TraceWindow& window);
  // The job's window, or null.
  const TraceWindow* Window(const std::string& job_id) const;
  // Keeps one worker's spans. FAILED_PRECONDITION when the upload's window
  // is not the job's current one (a late upload of a replaced window);
  // INVALID_ARGUMENT for a rank >= num_workers or too many spans.
  absl::Status Upload(const UploadTraceRequest& upload, uint32_t num_workers);
  // Fills the window, num_workers is the caller's; the ranks uploaded and,
  // when `rank` is one of them, its spans.
  void Get(const std::string& job_id, std::optional<uint32_t> rank,
           GetTraceResponse* out) const;
  // Forgets the job (it was dropped).
  void Forget(const std::string& job_id) { jobs_.erase(job_id); }

 private:
  struct JobTrace {
    TraceWindow window;
    std::map<uint32_t, WorkerTrace> workers;  // by rank
  };
  absl::flat_hash_map<std::string, JobTrace> jobs_;
};

}  // namespace ps

#endif  // SERVER_COORDINATOR_TRACE_STORE_H_
