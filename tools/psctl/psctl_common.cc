#include "tools/psctl/psctl_common.h"

#include <cmath>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/not_retryable.h"
#include "common/status_macros.h"

namespace ps {
namespace psctl {
namespace {

const char* const kKnownFlags[] = {
    "--cluster", "--coordinator", "--json",
    "--dry-run", "--wait",        "--timeout",
    "--job",     "--help",        "--connect-timeout",
    "--hot",     "--all",         "--out",
    "--python",  "--steps",       "--from-checkpoint",
    "--workers", "--shards",      "--tables-dir",
    "--drain"};

// A failure of the user's flags or files: exit code kExitUsage.
absl::Status AsUsage(const absl::Status& s) {
  return s.ok() ? s : absl::InvalidArgumentError(s.message());
}
template <typename T>
absl::StatusOr<T> AsUsage(absl::StatusOr<T> v) {
  if (!v.ok()) return AsUsage(v.status());
  return v;
}

}  // namespace

absl::Status ParseArgs(const std::vector<std::string>& raw, Args* args) {
  for (size_t i = 0; i < raw.size(); ++i) {
    const std::string& a = raw[i];
    if (a == "-o") {  // -o FILE is --out=FILE
      if (i + 1 == raw.size()) {
        return absl::InvalidArgumentError("-o: missing file name");
      }
      args->flags["--out"] = raw[++i];
    } else if (absl::StartsWith(a, "--")) {
      size_t eq = a.find('=');
      std::string name = a.substr(0, eq);
      bool known = false;
      for (const char* k : kKnownFlags) known |= name == k;
      if (!known)
        return absl::InvalidArgumentError(absl::StrCat("unknown flag ", name));
      if ((name == "--from-checkpoint" || name == "--tables-dir") &&
          eq == std::string::npos && i + 1 < raw.size()) {
        args->flags[name] = raw[++i];  // also "--from-checkpoint DIR"
        continue;
      }
      args->flags[name] = eq == std::string::npos ? "" : a.substr(eq + 1);
    } else if (args->command.empty()) {
      args->command = a;
    } else {
      args->positional.push_back(a);
    }
  }
  return absl::OkStatus();
}

bool Has(const Args& a, const std::string& flag) {
  return a.flags.count(flag) > 0;
}

std::string FlagOr(const Args& a, const std::string& flag,
                   const std::string& def) {
  auto it = a.flags.find(flag);
  return it == a.flags.end() || it->second.empty() ? def : it->second;
}

absl::StatusOr<Connection> Connect(const Args& a, bool need_cluster) {
  ConnectOptions options;
  double timeout_s = kDefaultConnectTimeoutSeconds;
  if (!absl::SimpleAtod(FlagOr(a, "--connect-timeout",
                               absl::StrCat(kDefaultConnectTimeoutSeconds)),
                        &timeout_s) ||
      timeout_s <= 0) {
    return absl::InvalidArgumentError(
        "--connect-timeout: not a positive number");
  }
  options.timeout = absl::Seconds(timeout_s);
  options.coordinator = FlagOr(a, "--coordinator", "");
  if (!options.coordinator.empty()) {
    PS_RETURN_IF_ERROR(
        AsUsage(ValidateHostPort(options.coordinator, "--coordinator", false)));
  }
  // --coordinator alone reaches a plaintext, token-less coordinator; with
  // --cluster too, the cluster file still supplies TLS and the token.
  if (options.coordinator.empty() || need_cluster || Has(a, "--cluster")) {
    options.cluster_file =
        FlagOr(a, "--cluster", "configs/local/cluster.pbtxt");
  }
  absl::StatusOr<Connection> c = ConnectCoordinator(options);
  if (!c.ok() && c.status().code() != absl::StatusCode::kUnavailable)
    return AsUsage(c.status());
  return c;
}

int ExitCodeFor(const absl::Status& s) {
  switch (s.code()) {
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDeadlineExceeded:
      return kExitUnreachable;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kUnauthenticated:
    case absl::StatusCode::kPermissionDenied:
      return kExitUsage;
    default:
      return kExitJobFailed;
  }
}

std::string Explain(const absl::Status& s, const std::string& address) {
  if (IsNotRetryable(s)) {  // the coordinator's own answer: it was reached
    return absl::StrCat("the coordinator at ", address,
                        " answered: ", s.message());
  }
  if (ExitCodeFor(s) == kExitUnreachable) {
    return absl::StrCat("cannot reach the coordinator at ", address, ": ",
                        s.message(),
                        " (is psd running? see README: Quick start)");
  }
  return std::string(s.message());
}

int ReportConnectFailure(const absl::Status& s, std::ostream& err) {
  err << "psctl: " << s.message() << "\n";
  return ExitCodeFor(s);
}

std::string FormatProgress(const JobStatus& j) {
  const Progress& p = j.progress();
  // A Python worker's job has no known total and may report no loss (NaN).
  const std::string step =
      p.total_steps() > 0 ? absl::StrFormat("%d/%d", p.step(), p.total_steps())
                          : absl::StrCat(p.step());
  const std::string loss =
      std::isnan(p.loss()) ? "-" : absl::StrFormat("%.4f", p.loss());
  std::string acc =
      p.test_accuracy() < 0 ? "-" : absl::StrFormat("%.4f", p.test_accuracy());
  // A ctr model reports AUC and logloss (and the teacher's AUC) instead.
  if (j.spec().model().has_ctr()) {
    acc =
        p.test_auc() <= 0
            ? "-"
            : absl::StrFormat("%.4f (teacher %.4f) logloss %.4f", p.test_auc(),
                              p.teacher_auc(), p.test_logloss());
    return absl::StrFormat(
        "%s %s step %s epoch %d loss %s test_auc %s %.0f samples/s %.1fs",
        j.job_id(), JobState_Name(j.state()), step, p.epoch(), loss, acc,
        p.samples_per_s(), p.elapsed_s());
  }
  return absl::StrFormat(
      "%s %s step %s epoch %d loss %s test_acc %s %.0f samples/s %.1fs",
      j.job_id(), JobState_Name(j.state()), step, p.epoch(), loss, acc,
      p.samples_per_s(), p.elapsed_s());
}

}  // namespace psctl
}  // namespace ps
