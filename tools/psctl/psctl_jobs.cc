#include "tools/psctl/psctl_jobs.h"

#include <optional>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace ps {
namespace psctl {

int Status(const Args& a, std::ostream& out, std::ostream& err) {
  if (a.positional.size() != 1) {
    err << "psctl status: expected one JOB id\n";
    return kExitUsage;
  }
  GetJobRequest req;
  req.set_job_id(a.positional[0]);
  JobStatus job;
  int rc =
      CallCoordinator(a, "status", &Coordinator::Stub::GetJob, req, &job, err);
  if (rc != kExitOk) return rc;
  if (Has(a, "--json")) {
    out << ToJson(job);
  } else {
    out << FormatProgress(job) << "\n";
    if (!job.reason().empty()) out << "reason: " << job.reason() << "\n";
    if (job.workers_size() > 0)
      out << "workers: " << absl::StrJoin(job.workers(), ", ") << "\n";
    if (std::string scale = FormatScale(job.scale()); !scale.empty()) {
      out << scale << "\n";
    }
    if (std::string moved = FormatReshard(job.reshard()); !moved.empty()) {
      out << moved << "\n";
    }
    if (std::string data = FormatDataPlan(job.data_plan()); !data.empty()) {
      out << data << "\n";
    }
  }
  return kExitOk;
}

int List(const Args& a, std::ostream& out, std::ostream& err) {
  ListJobsResponse resp;
  int rc = CallCoordinator(a, "list", &Coordinator::Stub::ListJobs,
                           ListJobsRequest(), &resp, err);
  if (rc != kExitOk) return rc;
  if (Has(a, "--json")) {
    out << ToJson(resp);
    return kExitOk;
  }
  out << absl::StrFormat("%-14s %-24s %-10s %10s %9s %s\n", "JOB", "NAME",
                         "STATE", "STEP", "TEST_ACC", "REASON");
  for (const JobStatus& j : resp.jobs()) {
    std::string acc =
        j.progress().test_accuracy() < 0
            ? "-"
            : absl::StrFormat("%.4f", j.progress().test_accuracy());
    out << absl::StrFormat("%-14s %-24s %-10s %10d %9s %s\n", j.job_id(),
                           j.name(), JobState_Name(j.state()),
                           j.progress().step(), acc, j.reason());
  }
  return kExitOk;
}

int Cancel(const Args& a, std::ostream& out, std::ostream& err) {
  if (a.positional.size() != 1) {
    err << "psctl cancel: expected one JOB id\n";
    return kExitUsage;
  }
  CancelJobRequest req;
  req.set_job_id(a.positional[0]);
  CancelJobResponse resp;
  int rc = CallCoordinator(a, "cancel", &Coordinator::Stub::CancelJob, req,
                           &resp, err);
  if (rc != kExitOk) return rc;
  out << a.positional[0] << " " << JobState_Name(resp.state()) << "\n";
  return kExitOk;
}

std::string FormatScale(const ScaleStatus& s) {
  if (s.target_workers() == 0) return "";
  return absl::StrFormat(
      "scale: %d -> %d workers, %d active (%s)", s.from_workers(),
      s.target_workers(), s.active_workers(),
      s.reached_s() > 0 ? absl::StrFormat("reached %.1f s after the command",
                                          s.reached_s() - s.requested_s())
                        : std::string("in progress"));
}

std::string FormatReshard(const ReshardStatus& s) {
  if (s.target_shards() == 0) return "";
  // A move to or from an explicit set (--drain) shows the sets.
  std::string out =
      s.target_shard_ids_size() > 0
          ? absl::StrFormat("shards: [%s] -> [%s], %s",
                            absl::StrJoin(s.from_shard_ids(), " "),
                            absl::StrJoin(s.target_shard_ids(), " "), s.phase())
          : absl::StrFormat("shards: %d -> %d, %s", s.from_shards(),
                            s.target_shards(), s.phase());
  if (s.moved_chunks() > 0) {
    absl::StrAppendFormat(&out, "; %d chunks (%.1f MB) move", s.moved_chunks(),
                          s.moved_bytes() / 1e6);
  }
  if (s.pause_step() > 0) {
    absl::StrAppendFormat(&out, " at step %d", s.pause_step());
  }
  if (s.fetched_bytes() > 0) {  // chunks and table rows
    absl::StrAppendFormat(&out, ", %.1f MB fetched", s.fetched_bytes() / 1e6);
  }
  if (s.reached_s() > 0) {
    absl::StrAppendFormat(&out,
                          " (placement epoch %d, reached %.2f s after the "
                          "command, paused %.1f ms)",
                          s.epoch(), s.reached_s() - s.requested_s(),
                          s.pause_ms());
  }
  if (s.late_shards_size() > 0) {  // restarted between the commit and COMMIT
    absl::StrAppendFormat(&out, "; shards %s committed late",
                          absl::StrJoin(s.late_shards(), ", "));
  }
  return out;
}

std::string FormatDataPlan(const DataPlan& plan) {
  if (plan.segments_size() == 0) return "";
  const DataSegment& s = plan.segments(plan.segments_size() - 1);
  return absl::StrFormat(
      "data: epoch %d from step %d over ranks %s (%d examples of it read "
      "before)%s",
      s.epoch(), s.start_step(), absl::StrJoin(s.ranks(), ", "), s.offset(),
      plan.done() ? ", every epoch planned" : "");
}

// --drain=K[,K2...]: the shard ids, or nullopt for anything else.
std::optional<std::vector<uint32_t>> ParseDrain(const std::string& value) {
  std::vector<uint32_t> ids;
  for (absl::string_view part : absl::StrSplit(value, ',')) {
    uint32_t id = 0;
    if (!absl::SimpleAtoi(part, &id)) return std::nullopt;
    ids.push_back(id);
  }
  return ids;
}

int Scale(const Args& a, std::ostream& out, std::ostream& err) {
  uint32_t workers = 0;
  uint32_t shards = 0;
  const bool by_workers = Has(a, "--workers");
  const bool by_shards = Has(a, "--shards");
  const bool by_drain = Has(a, "--drain");
  const std::optional<std::vector<uint32_t>> drain =
      ParseDrain(FlagOr(a, "--drain", ""));
  if (a.positional.size() != 1 || by_workers + by_shards + by_drain != 1 ||
      (by_workers && !absl::SimpleAtoi(FlagOr(a, "--workers", ""), &workers)) ||
      (by_shards && (!absl::SimpleAtoi(FlagOr(a, "--shards", ""), &shards) ||
                     shards == 0)) ||
      (by_drain && !drain.has_value())) {
    err << "psctl scale: expected one JOB id and one of --workers=N, "
           "--shards=N (a count, >= 1) or --drain=K[,K2...] (shard ids)\n";
    return kExitUsage;
  }
  ScaleJobRequest req;
  req.set_job_id(a.positional[0]);
  req.set_workers(workers);
  req.set_shards(shards);
  if (by_drain) {
    for (uint32_t id : *drain) req.add_drain(id);
  }
  ScaleJobResponse resp;
  int rc = CallCoordinator(a, "scale", &Coordinator::Stub::ScaleJob, req, &resp,
                           err);
  if (rc != kExitOk) return rc;
  out << a.positional[0] << " "
      << (by_workers ? FormatScale(resp.scale())
                     : FormatReshard(resp.reshard()))
      << "\n";
  return kExitOk;
}

}  // namespace psctl
}  // namespace ps
