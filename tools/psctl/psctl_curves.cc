#include "tools/psctl/psctl_curves.h"

#include <spawn.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "tools/psctl/plot_curves_script.h"

extern char** environ;

namespace ps {
namespace psctl {
namespace {

// Debian's interpreter, whose python3-matplotlib the chart needs.
constexpr char kDefaultPython[] = "/usr/bin/python3";

std::string CsvSafe(const std::string& s) {
  std::string safe = s;
  for (char& c : safe) {
    if (c == ',' || c == '"' || c == '\n' || c == '\r') c = ' ';
  }
  return safe;
}

// A new empty file under $TMPDIR (or /tmp) named after `stem`.
absl::StatusOr<std::string> TempFile(const std::string& stem) {
  const char* tmpdir = std::getenv("TMPDIR");
  std::string path = absl::StrCat(
      tmpdir != nullptr && *tmpdir ? tmpdir : "/tmp", "/", stem, "-XXXXXX");
  const int fd = mkstemp(path.data());
  if (fd < 0) {
    return absl::InternalError(
        absl::StrCat("cannot create ", path, ": ", std::strerror(errno)));
  }
  close(fd);
  return path;
}

// Runs `python SCRIPT ARGS...`; OK when it exits 0 (it prints its own
// errors on stderr).
absl::Status RunPython(const std::string& python, const std::string& script,
                       const std::vector<std::string>& args) {
  std::vector<std::string> argv_s = {python, script};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& s : argv_s) argv.push_back(s.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  const int spawned = posix_spawnp(&pid, python.c_str(), nullptr, nullptr,
                                   argv.data(), environ);
  if (spawned != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--python: cannot run ", python, ": ", std::strerror(spawned)));
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return absl::InternalError(
        absl::StrCat(python, " could not draw the chart (see above)"));
  }
  return absl::OkStatus();
}

// The curves of `jobs`, or the exit code and message of the first failure.
int FetchCurves(const Args& a, std::vector<JobCurve>* curves,
                std::ostream& err) {
  absl::StatusOr<Connection> c = Connect(a, /*need_cluster=*/false);
  if (!c.ok()) return ReportConnectFailure(c.status(), err);
  CoordinatorClient client(*c);
  for (const std::string& job_id : a.positional) {
    GetJobRequest get;
    get.set_job_id(job_id);
    JobStatus job;
    absl::Status s = client.Call(&Coordinator::Stub::GetJob, get, &job);
    GetHistoryRequest request;
    request.set_job_id(job_id);
    GetHistoryResponse history;
    if (s.ok()) {
      s = client.Call(&Coordinator::Stub::GetHistory, request, &history);
    }
    if (s.code() == absl::StatusCode::kNotFound) {
      err << "psctl curves: " << s.message() << "\n";
      return kExitJobFailed;
    }
    if (!s.ok()) {
      err << "psctl curves: " << Explain(s, c->coordinator) << "\n";
      return ExitCodeFor(s);
    }
    if (history.points_size() == 0) {
      err << "psctl curves: job " << job_id << " has no progress yet (state "
          << JobState_Name(job.state()) << ")\n";
      return kExitJobFailed;
    }
    curves->push_back(
        JobCurve{job_id,
                 job.name(),
                 {history.points().begin(), history.points().end()}});
  }
  return kExitOk;
}

// Writes the CSV and the plot script to temporary files and runs it to
// draw `path`.
int Plot(const Args& a, const std::vector<JobCurve>& curves,
         const std::string& path, std::ostream& err) {
  absl::StatusOr<std::string> csv = TempFile("psctl-curves-csv");
  absl::StatusOr<std::string> script = TempFile("psctl-plot-curves-py");
  absl::Status s = csv.ok() ? script.status() : csv.status();
  if (s.ok()) {
    std::ofstream c(*csv);
    WriteCurvesCsv(curves, c);
    std::ofstream py(*script);
    py << kPlotCurvesScript;
    c.close();
    py.close();
    if (!c || !py) s = absl::InternalError("cannot write a temporary file");
  }
  if (s.ok()) {
    s = RunPython(FlagOr(a, "--python", kDefaultPython), *script,
                  {*csv, "-o", path});
  }
  if (csv.ok()) unlink(csv->c_str());
  if (script.ok()) unlink(script->c_str());
  if (!s.ok()) {
    err << "psctl curves: " << s.message() << "\n";
    return kExitJobFailed;
  }
  return kExitOk;
}

}  // namespace

void WriteCurvesCsv(const std::vector<JobCurve>& curves, std::ostream& out) {
  out << "job,name,step,epoch,loss,train_accuracy,test_accuracy,"
         "samples_per_s,data_s,compute_s,comm_s,elapsed_s\n";
  for (const JobCurve& c : curves) {
    const std::string job = CsvSafe(c.job_id);
    const std::string name = CsvSafe(c.name);
    for (const Progress& p : c.points) {
      out << absl::StrFormat(
          "%s,%s,%d,%d,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g\n", job, name,
          p.step(), p.epoch(), p.loss(), p.train_accuracy(), p.test_accuracy(),
          p.samples_per_s(), p.data_s(), p.compute_s(), p.comm_s(),
          p.elapsed_s());
    }
  }
}

int Curves(const Args& a, std::ostream& out, std::ostream& err) {
  const std::string path = FlagOr(a, "--out", "");
  if (a.positional.empty() || path.empty()) {
    err << "psctl curves: usage: psctl curves JOB [JOB...] -o FILE "
           "(.csv, or a chart: .png, .svg, .pdf)\n";
    return kExitUsage;
  }
  std::vector<JobCurve> curves;
  if (int rc = FetchCurves(a, &curves, err); rc != kExitOk) return rc;
  size_t points = 0;
  for (const JobCurve& c : curves) points += c.points.size();
  if (absl::EndsWithIgnoreCase(path, ".csv")) {
    std::ofstream f(path);
    WriteCurvesCsv(curves, f);
    f.close();
    if (!f) {
      err << "psctl curves: -o: cannot write " << path << "\n";
      return kExitUsage;
    }
  } else if (int rc = Plot(a, curves, path, err); rc != kExitOk) {
    return rc;
  }
  out << "wrote " << path << ": " << curves.size() << " job(s), " << points
      << " points\n";
  return kExitOk;
}

}  // namespace psctl
}  // namespace ps
