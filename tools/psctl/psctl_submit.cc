#include "tools/psctl/psctl_submit.h"

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/text_proto.h"

namespace ps {
namespace psctl {

std::string FormatSummary(const JobStatus& j) {
  const Progress& p = j.progress();
  double wall = j.end_time_s() > 0 && j.submit_time_s() > 0
                    ? j.end_time_s() - j.submit_time_s()
                    : p.elapsed_s();
  std::string reason = j.reason();
  for (char& ch : reason) {
    if (ch == '"') ch = '\'';
  }
  // Progress keeps -1 for a metric with no value (not evaluated yet, or no
  // teacher); a dense model reports accuracy, a ctr model AUC and logloss.
  const bool ctr = j.spec().model().has_ctr();
  auto metric = [](const char* key, float value) {
    return value < 0 ? std::string() : absl::StrFormat(" %s=%.4f", key, value);
  };
  // A ctr model's table traffic (rank 0's, training only).
  const std::string rows =
      p.has_sparse()
          ? absl::StrFormat(
                " table_rows_pushed=%d table_rows_pulled=%d row_cache_hits=%d",
                p.sparse().rows_pushed(), p.sparse().rows_pulled(),
                p.sparse().row_cache_hits())
          : "";
  return absl::StrFormat(
      "job=%s state=%s%s loss=%.4f steps=%d samples_per_s=%.0f "
      "data_s=%.2f compute_s=%.2f comm_s=%.2f overlap=%d train_s=%.2f "
      "wall_s=%.2f%s%s%s%s reason=\"%s\"",
      j.job_id(), JobState_Name(j.state()),
      ctr ? "" : metric("test_accuracy", p.test_accuracy()), p.loss(), p.step(),
      p.samples_per_s(), p.data_s(), p.compute_s(), p.comm_s(),
      p.overlap() ? 1 : 0, p.elapsed_s(), wall,
      ctr ? metric("test_auc", p.test_auc()) : "",
      ctr ? metric("test_logloss", p.test_logloss()) : "",
      ctr ? metric("teacher_auc", p.teacher_auc()) : "", rows, reason);
}

namespace {

bool Ended(JobState s) {
  return s == SUCCEEDED || s == FAILED || s == CANCELLED;
}

// Polls the job until it ends or `timeout_s` passes, drawing its progress.
int WaitForJob(CoordinatorClient& client, const std::string& job_id,
               double timeout_s, std::ostream& out, std::ostream& err,
               bool interactive) {
  absl::Time give_up = absl::Now() + absl::Seconds(timeout_s);
  absl::Time last_line = absl::InfinitePast();
  int unreachable_in_a_row = 0;
  JobStatus job;
  while (true) {
    GetJobRequest req;
    req.set_job_id(job_id);
    absl::Status s = client.Call(&Coordinator::Stub::GetJob, req, &job);
    if (!s.ok()) {
      // A coordinator restart is survivable; a long outage is not.
      if (ExitCodeFor(s) == kExitUnreachable && ++unreachable_in_a_row < 10) {
        std::this_thread::sleep_for(std::chrono::milliseconds(500));
        continue;
      }
      if (interactive) out << "\n";
      err << "psctl: " << s.message() << "\n";
      return ExitCodeFor(s);
    }
    unreachable_in_a_row = 0;
    if (Ended(job.state())) break;
    if (interactive) {
      out << "\r\033[K" << FormatProgress(job) << std::flush;
    } else if (absl::Now() - last_line >= absl::Seconds(5)) {
      out << FormatProgress(job) << std::endl;
      last_line = absl::Now();
    }
    if (absl::Now() > give_up) {
      if (interactive) out << "\n";
      err << "psctl: gave up waiting for " << job_id << " after " << timeout_s
          << " s (--timeout); the job goes on\n";
      return kExitJobFailed;
    }
    // Polling period of the progress display.
    std::this_thread::sleep_for(
        std::chrono::milliseconds(interactive ? 250 : 500));
  }
  if (interactive) out << "\r\033[K";
  out << FormatProgress(job) << "\n";
  out << FormatSummary(job) << std::endl;
  return job.state() == SUCCEEDED ? kExitOk : kExitJobFailed;
}

// The --dry-run answer: the spec's size and the bytes placed on each shard
// (with replication k > 1, its primaries' and its backups' bytes).
void PrintPlacement(const SubmitJobResponse& resp, std::ostream& out) {
  std::map<uint32_t, uint64_t> bytes;
  std::map<uint32_t, uint64_t> backup_bytes;
  for (const ChunkPlacement& ch : resp.placement().chunks()) {
    bytes[ch.shard()] += ch.length() * 4;
    for (uint32_t b : ch.backups()) backup_bytes[b] += ch.length() * 4;
  }
  out << "valid: " << resp.spec().tensors_size() << " tensors, "
      << resp.placement().chunks_size() << " chunks on "
      << resp.placement().num_shards() << " shards";
  const uint32_t k = resp.spec().replication();
  if (k > 1) out << ", " << k << " copies each";
  out << "\n";
  for (uint32_t shard = 0; shard < resp.placement().num_shards(); ++shard) {
    if (k <= 1 && !bytes.count(shard)) continue;
    out << "  shard " << shard << ": " << bytes[shard] << " bytes";
    if (k > 1) out << " primary, " << backup_bytes[shard] << " bytes backup";
    out << "\n";
  }
}

}  // namespace

int Submit(const Args& a, std::ostream& out, std::ostream& err,
           bool interactive) {
  if (a.positional.size() != 1) {
    err << "psctl submit: expected one JOB.pbtxt\n";
    return kExitUsage;
  }
  double timeout_s = 3600;
  if (!absl::SimpleAtod(FlagOr(a, "--timeout", "3600"), &timeout_s) ||
      timeout_s <= 0) {
    err << "psctl submit: --timeout: not a positive number\n";
    return kExitUsage;
  }
  SubmitJobRequest req;
  absl::Status parsed = ParseTextProtoFile(a.positional[0], req.mutable_spec());
  if (!parsed.ok()) {
    err << "psctl submit: " << parsed.message() << "\n";
    return kExitUsage;
  }
  req.set_dry_run(Has(a, "--dry-run"));
  absl::StatusOr<Connection> c = Connect(a, /*need_cluster=*/false);
  if (!c.ok()) return ReportConnectFailure(c.status(), err);
  CoordinatorClient client(*c);
  SubmitJobResponse resp;
  absl::Status s = client.Call(&Coordinator::Stub::SubmitJob, req, &resp);
  if (!resp.problems().empty()) {
    err << "psctl submit: " << a.positional[0] << " has "
        << resp.problems_size() << " problem(s):\n";
    for (const std::string& p : resp.problems()) err << "  " << p << "\n";
    return kExitUsage;
  }
  if (!s.ok()) {
    err << "psctl submit: " << Explain(s, c->coordinator) << "\n";
    return ExitCodeFor(s);
  }
  if (req.dry_run()) {
    PrintPlacement(resp, out);
    return kExitOk;
  }
  out << "submitted " << resp.job_id() << std::endl;
  if (!Has(a, "--wait")) return kExitOk;
  return WaitForJob(client, resp.job_id(), timeout_s, out, err, interactive);
}

}  // namespace psctl
}  // namespace ps
