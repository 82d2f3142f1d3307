#include "tools/psbench/psbench_load.h"

#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/json_string.h"
#include "common/status_macros.h"
#include "tools/psbench/psbench_clients.h"
#include "tools/psbench/psbench_util.h"

namespace ps {
namespace bench {
namespace {

absl::Status Validate(const LoadOptions& options) {
  if (options.clients < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("clients: must be >= 1, got ", options.clients));
  }
  if (options.bytes < 4 || options.bytes % 4 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bytes: ", options.bytes, " is not a positive multiple of 4"));
  }
  return absl::OkStatus();
}

// Fills the measurements of `run` into `report` and decides pass/fail.
void Summarize(const ClientRun& run, const LoadOptions& options,
               LoadReport* report) {
  report->steps = run.steps;
  report->errors = run.errors;
  report->first_error = run.first_error;
  report->seconds = run.seconds;
  report->steps_per_second = run.seconds > 0 ? run.steps / run.seconds : 0;
  report->p50_us = Percentile(run.latencies_us, 0.50);
  report->p99_us = Percentile(run.latencies_us, 0.99);
  report->max_us = Percentile(run.latencies_us, 1.0);
  report->rss_growth =
      report->rss_start > 0
          ? static_cast<double>(report->rss_end) / report->rss_start - 1.0
          : 0;
  report->pass =
      report->errors == 0 && report->rss_growth < options.max_rss_growth;
}

}  // namespace

absl::StatusOr<LoadReport> RunLoad(const BenchCluster& cluster,
                                   const LoadOptions& options) {
  PS_RETURN_IF_ERROR(Validate(options));
  LoadReport report;
  report.clients = options.clients;
  PS_ASSIGN_OR_RETURN(std::vector<pid_t> pids, cluster.ServerPids());
  report.rss_source = cluster.in_process()
                          ? "self"
                          : absl::StrCat("psd pids ", absl::StrJoin(pids, ","));
  BenchJob job;
  job.job_id = absl::StrCat("psbench-load-", getpid());
  job.floats = options.bytes / 4;
  job.mode = options.mode;
  job.workers = static_cast<uint32_t>(options.clients);
  job.partition_bytes = options.partition_bytes;
  PS_ASSIGN_OR_RETURN(Assignment a, cluster.RegisterJob(job));
  ClientPhases phases;
  phases.warmup = options.warmup;
  phases.measure = options.duration;
  absl::Status rss_status;  // the first failure to read RSS
  auto rss = [&](uint64_t* out) {
    absl::StatusOr<uint64_t> r = cluster.ResidentBytes();
    if (r.ok()) {
      *out = *r;
    } else if (rss_status.ok()) {
      rss_status = r.status();
    }
  };
  absl::StatusOr<ClientRun> run = RunClients(
      cluster, a, options.clients, options.client, phases,
      [&] { rss(&report.rss_start); }, [&] { rss(&report.rss_end); });
  absl::Status dropped = cluster.DropJob(job.job_id);
  if (!run.ok()) return run.status();
  PS_RETURN_IF_ERROR(rss_status);
  PS_RETURN_IF_ERROR(dropped);
  Summarize(*run, options, &report);
  return report;
}

std::string FormatLoad(const LoadReport& r) {
  return absl::StrFormat(
      "load: %d clients, %.1f s measured: %d steps (%.0f/s), errors %d, "
      "latency p50 %.0f us "
      "p99 %.0f us max %.0f us\n"
      "resident memory (%s): %.1f MiB after warm-up, %.1f MiB at end, growth "
      "%+.2f%%\n"
      "%s%s\n",
      r.clients, r.seconds, r.steps, r.steps_per_second, r.errors, r.p50_us,
      r.p99_us, r.max_us, r.rss_source, r.rss_start / 1048576.0,
      r.rss_end / 1048576.0, 100 * r.rss_growth,
      r.first_error.empty()
          ? ""
          : absl::StrCat("first error: ", r.first_error, "\n"),
      r.pass ? "PASS" : "FAIL");
}

std::string LoadJson(const LoadReport& r) {
  return absl::StrFormat(
      "{\"mode\":\"load\",\"clients\":%d,\"seconds\":%.3f,\"steps\":%d,"
      "\"steps_per_s\":%.1f,\"errors\":%d,\"first_error\":%s,\"p50_us\":%.1f,"
      "\"p99_us\":%.1f,\"max_us\":%.1f,\"rss_source\":%s,\"rss_start_bytes\":%"
      "d,"
      "\"rss_end_bytes\":%d,\"rss_growth\":%.5f,\"pass\":%s}",
      r.clients, r.seconds, r.steps, r.steps_per_second, r.errors,
      JsonString(r.first_error), r.p50_us, r.p99_us, r.max_us,
      JsonString(r.rss_source), r.rss_start, r.rss_end, r.rss_growth,
      r.pass ? "true" : "false");
}

}  // namespace bench
}  // namespace ps
