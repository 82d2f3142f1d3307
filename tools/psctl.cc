#include "tools/psctl.h"

#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/config.h"
#include "common/grpc_status.h"
#include "common/security.h"
#include "common/text_proto.h"
#include "google/protobuf/util/json_util.h"
#include "proto/coordinator.grpc.pb.h"
#include "proto/ps.grpc.pb.h"

namespace ps {
namespace {

constexpr char kUsage[] = R"(usage: psctl COMMAND [ARGS] [FLAGS]

Commands:
  submit JOB.pbtxt   submit a job spec (text format, see configs/jobs/)
      --dry-run        validate and place only; print the placement
      --wait           follow the job until it ends; exit 1 unless SUCCEEDED
      --timeout=S      give up waiting after S seconds (default 3600)
  status JOB         one job's state and progress        [--json]
  list               every job the coordinator knows     [--json]
  cancel JOB         cancel a pending or running job
  stats              per-shard statistics                 [--json] [--job=JOB]

Flags (every command):
  --cluster=FILE          cluster file (default configs/local/cluster.pbtxt)
  --coordinator=HOST:PORT coordinator address, instead of the cluster file's
                          (with --cluster too, TLS and the token still come
                          from the cluster file)
  --connect-timeout=S     how long to wait for the cluster (default 4)
  --help                  this text

Exit codes: 0 ok, 1 job failed or cancelled, 2 usage or validation error,
3 cluster unreachable.
)";

struct Args {
  std::string command;
  std::vector<std::string> positional;
  std::map<std::string, std::string> flags;  // "--name" -> value ("" if none)
};

const char* const kKnownFlags[] = {
    "--cluster", "--coordinator", "--json", "--dry-run",        "--wait",
    "--timeout", "--job",         "--help", "--connect-timeout"};

absl::Status ParseArgs(const std::vector<std::string>& raw, Args* args) {
  for (const std::string& a : raw) {
    if (absl::StartsWith(a, "--")) {
      size_t eq = a.find('=');
      std::string name = a.substr(0, eq);
      bool known = false;
      for (const char* k : kKnownFlags) known |= name == k;
      if (!known)
        return absl::InvalidArgumentError(absl::StrCat("unknown flag ", name));
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

// Everything a command needs to reach the cluster.
struct Connection {
  Security security;
  std::string coordinator;
  LoadedCluster cluster;
  bool have_cluster = false;
  absl::Duration connect_timeout = absl::Seconds(kDefaultConnectTimeoutSeconds);
};

// Exit code + message for a failed connection set-up.
struct Failure {
  int code;
  std::string message;
};

std::unique_ptr<Failure> Connect(const Args& a, bool need_cluster,
                                 Connection* c) {
  double timeout_s = kDefaultConnectTimeoutSeconds;
  if (!absl::SimpleAtod(FlagOr(a, "--connect-timeout",
                               absl::StrCat(kDefaultConnectTimeoutSeconds)),
                        &timeout_s) ||
      timeout_s <= 0) {
    return std::make_unique<Failure>(
        Failure{kExitUsage, "--connect-timeout: not a positive number"});
  }
  c->connect_timeout = absl::Seconds(timeout_s);
  std::string coordinator = FlagOr(a, "--coordinator", "");
  // --coordinator alone reaches a plaintext, token-less coordinator; with
  // --cluster too, the cluster file still supplies TLS and the token.
  if (!coordinator.empty() && !need_cluster && !Has(a, "--cluster")) {
    absl::Status s = ValidateHostPort(coordinator, "--coordinator", false);
    if (!s.ok())
      return std::make_unique<Failure>(
          Failure{kExitUsage, std::string(s.message())});
    c->coordinator = coordinator;
    return nullptr;
  }
  std::string path = FlagOr(a, "--cluster", "configs/local/cluster.pbtxt");
  absl::StatusOr<LoadedCluster> cluster = LoadClusterConfig(path);
  if (!cluster.ok()) {
    return std::make_unique<Failure>(
        Failure{kExitUsage, std::string(cluster.status().message())});
  }
  c->cluster = *std::move(cluster);
  c->have_cluster = true;
  absl::StatusOr<Security> sec = Security::FromCluster(c->cluster.config);
  if (!sec.ok())
    return std::make_unique<Failure>(
        Failure{kExitUsage, std::string(sec.status().message())});
  c->security = *std::move(sec);
  if (!coordinator.empty()) {
    absl::Status s = ValidateHostPort(coordinator, "--coordinator", false);
    if (!s.ok())
      return std::make_unique<Failure>(
          Failure{kExitUsage, std::string(s.message())});
    c->coordinator = coordinator;
    return nullptr;
  }
  absl::StatusOr<std::string> addr =
      ResolveCoordinatorAddress(c->cluster, absl::Now() + c->connect_timeout);
  if (!addr.ok()) {
    return std::make_unique<Failure>(
        Failure{kExitUnreachable, std::string(addr.status().message())});
  }
  c->coordinator = *addr;
  return nullptr;
}

// Maps an RPC failure to psctl's exit codes.
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
  if (ExitCodeFor(s) == kExitUnreachable) {
    return absl::StrCat("cannot reach the coordinator at ", address, ": ",
                        s.message(),
                        " (is psd running? see README: Quick start)");
  }
  return std::string(s.message());
}

template <typename Message>
std::string ToJson(const Message& m) {
  std::string json;
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = true;
  options.preserve_proto_field_names = true;
  options.always_print_primitive_fields = true;  // zeros are information too
  (void)google::protobuf::util::MessageToJsonString(m, &json, options);
  return json;
}

class CoordinatorClient {
 public:
  explicit CoordinatorClient(const Connection& c)
      : c_(c),
        stub_(Coordinator::NewStub(c.security.NewChannel(c.coordinator))) {}

  // One call, waiting up to the connect timeout for the coordinator to come
  // up (a daemon just started, or still resolving its shards).
  template <typename Req, typename Resp, typename Fn>
  absl::Status Call(Fn fn, const Req& req, Resp* resp) const {
    absl::Time deadline = absl::Now() + c_.connect_timeout;
    while (true) {
      grpc::ClientContext ctx;
      ctx.set_deadline(absl::ToChronoTime(deadline));
      ctx.set_wait_for_ready(true);
      c_.security.Authorize(&ctx);
      absl::Status s = FromGrpcStatus((stub_.get()->*fn)(&ctx, req, resp));
      if (s.code() != absl::StatusCode::kUnavailable || absl::Now() >= deadline)
        return s;
      std::this_thread::sleep_for(
          std::chrono::milliseconds(100));  // coordinator starting
    }
  }
  Coordinator::Stub* stub() { return stub_.get(); }

 private:
  const Connection& c_;
  std::unique_ptr<Coordinator::Stub> stub_;
};

std::string FormatProgress(const JobStatus& j) {
  const Progress& p = j.progress();
  std::string acc =
      p.test_accuracy() < 0 ? "-" : absl::StrFormat("%.4f", p.test_accuracy());
  return absl::StrFormat(
      "%s %s step %d/%d epoch %d loss %.4f test_acc %s %.0f samples/s %.1fs",
      j.job_id(), JobState_Name(j.state()), p.step(), p.total_steps(),
      p.epoch(), p.loss(), acc, p.samples_per_s(), p.elapsed_s());
}

std::string Summary(const JobStatus& j) {
  const Progress& p = j.progress();
  double wall = j.end_time_s() > 0 && j.submit_time_s() > 0
                    ? j.end_time_s() - j.submit_time_s()
                    : p.elapsed_s();
  std::string reason = j.reason();
  for (char& ch : reason) {
    if (ch == '"') ch = '\'';
  }
  return absl::StrFormat(
      "job=%s state=%s test_accuracy=%.4f loss=%.4f steps=%d "
      "samples_per_s=%.0f "
      "data_s=%.2f compute_s=%.2f comm_s=%.2f train_s=%.2f wall_s=%.2f "
      "reason=\"%s\"",
      j.job_id(), JobState_Name(j.state()), p.test_accuracy(), p.loss(),
      p.step(), p.samples_per_s(), p.data_s(), p.compute_s(), p.comm_s(),
      p.elapsed_s(), wall, reason);
}

bool Ended(JobState s) {
  return s == SUCCEEDED || s == FAILED || s == CANCELLED;
}

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
  out << Summary(job) << std::endl;
  return job.state() == SUCCEEDED ? kExitOk : kExitJobFailed;
}

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
  Connection c;
  if (auto f = Connect(a, false, &c)) {
    err << "psctl: " << f->message << "\n";
    return f->code;
  }
  CoordinatorClient client(c);
  SubmitJobResponse resp;
  absl::Status s = client.Call(&Coordinator::Stub::SubmitJob, req, &resp);
  if (!resp.problems().empty()) {
    err << "psctl submit: " << a.positional[0] << " has "
        << resp.problems_size() << " problem(s):\n";
    for (const std::string& p : resp.problems()) err << "  " << p << "\n";
    return kExitUsage;
  }
  if (!s.ok()) {
    err << "psctl submit: " << Explain(s, c.coordinator) << "\n";
    return ExitCodeFor(s);
  }
  if (req.dry_run()) {
    std::map<uint32_t, uint64_t> bytes;
    for (const ChunkPlacement& ch : resp.placement().chunks())
      bytes[ch.shard()] += ch.length() * 4;
    out << "valid: " << resp.spec().tensors_size() << " tensors, "
        << resp.placement().chunks_size() << " chunks on "
        << resp.placement().num_shards() << " shards\n";
    for (const auto& [shard, b] : bytes)
      out << "  shard " << shard << ": " << b << " bytes\n";
    return kExitOk;
  }
  out << "submitted " << resp.job_id() << std::endl;
  if (!Has(a, "--wait")) return kExitOk;
  return WaitForJob(client, resp.job_id(), timeout_s, out, err, interactive);
}

// Connects to the coordinator and makes one call. On failure prints why
// (prefixed with `command`) and returns the exit code; else kExitOk.
template <typename Req, typename Resp, typename Fn>
int CallCoordinator(const Args& a, const std::string& command, Fn fn,
                    const Req& req, Resp* resp, std::ostream& err) {
  Connection c;
  if (auto f = Connect(a, false, &c)) {
    err << "psctl: " << f->message << "\n";
    return f->code;
  }
  CoordinatorClient client(c);
  absl::Status s = client.Call(fn, req, resp);
  if (!s.ok()) {
    err << "psctl " << command << ": " << Explain(s, c.coordinator) << "\n";
    return ExitCodeFor(s);
  }
  return kExitOk;
}

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

int Stats(const Args& a, std::ostream& out, std::ostream& err) {
  Connection c;
  if (auto f = Connect(a, /*need_cluster=*/true, &c)) {
    err << "psctl: " << f->message << "\n";
    return f->code;
  }
  absl::StatusOr<std::vector<std::string>> addresses =
      ResolveShardAddresses(c.cluster, absl::Now() + c.connect_timeout);
  if (!addresses.ok()) {
    err << "psctl stats: " << addresses.status().message() << "\n";
    return kExitUnreachable;
  }
  // Ask every shard at once; each call has the connect deadline.
  size_t n = addresses->size();
  std::vector<ShardStats> stats(n);
  std::vector<absl::Status> status(n);
  std::vector<std::unique_ptr<ParameterServer::Stub>> stubs;
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  StatsRequest req;
  req.set_job_id(FlagOr(a, "--job", ""));
  absl::Mutex mu;
  size_t done = 0;
  for (size_t i = 0; i < n; ++i) {
    stubs.push_back(
        ParameterServer::NewStub(c.security.NewChannel((*addresses)[i])));
    contexts.push_back(std::make_unique<grpc::ClientContext>());
    contexts.back()->set_deadline(
        absl::ToChronoTime(absl::Now() + c.connect_timeout));
    contexts.back()->set_wait_for_ready(true);
    c.security.Authorize(contexts.back().get());
    stubs.back()->async()->Stats(contexts.back().get(), &req, &stats[i],
                                 [&, i](grpc::Status s) {
                                   absl::MutexLock l(&mu);
                                   status[i] = FromGrpcStatus(s);
                                   ++done;
                                 });
  }
  {
    absl::MutexLock l(&mu);
    auto all = [&]() { return done == n; };
    mu.Await(absl::Condition(&all));
  }
  int rc = kExitOk;
  for (size_t i = 0; i < n; ++i) {
    if (!status[i].ok()) {
      err << "psctl stats: shard " << i << " at " << (*addresses)[i] << ": "
          << status[i].message() << "\n";
      // A refused token is a usage error (2), not an unreachable shard (3).
      if (rc == kExitOk) rc = ExitCodeFor(status[i]);
    }
  }
  if (Has(a, "--json")) {
    out << "[";
    for (size_t i = 0; i < n; ++i) {
      if (i) out << ",";
      out << (status[i].ok() ? ToJson(stats[i]) : "null");
    }
    out << "]\n";
    return rc;
  }
  out << absl::StrFormat(
      "%-5s %-21s %8s %4s %6s %10s %9s %9s %10s %10s %8s %8s %5s %5s %4s %s\n",
      "SHARD", "ADDRESS", "UPTIME_S", "JOBS", "CHUNKS", "BYTES", "PUSHES",
      "PULLS", "BYTES_IN", "BYTES_OUT", "P50_US", "P99_US", "DUP", "STALE",
      "REJ", "MISSING");
  for (size_t i = 0; i < n; ++i) {
    if (!status[i].ok()) continue;
    const ShardStats& s = stats[i];
    uint64_t pushes = 0, pulls = 0, in = 0, outb = 0, dup = 0, stale = 0,
             rej = 0;
    double p50 = 0, p99 = 0;
    std::vector<std::string> missing;
    for (const JobStats& j : s.job_stats()) {
      pushes += j.pushes();
      pulls += j.pulls();
      in += j.bytes_in();
      outb += j.bytes_out();
      dup += j.duplicates();
      stale += j.stale_pushes();
      for (const auto& [reason, count] : j.rejected()) rej += count;
      p50 = std::max(p50, j.apply_latency_p50_us());
      p99 = std::max(p99, j.apply_latency_p99_us());
      for (uint32_t w : j.missing_workers())
        missing.push_back(absl::StrCat(j.job_id(), ":w", w));
    }
    for (const auto& [reason, count] : s.rejected()) rej += count;
    out << absl::StrFormat(
        "%-5d %-21s %8.1f %4d %6d %10d %9d %9d %10d %10d %8.1f %8.1f %5d %5d "
        "%4d %s\n",
        s.shard_id(), (*addresses)[i], s.uptime_s(), s.jobs(), s.chunks(),
        s.bytes_held(), pushes, pulls, in, outb, p50, p99, dup, stale, rej,
        missing.empty() ? "-" : absl::StrJoin(missing, ","));
  }
  return rc;
}

}  // namespace

int RunPsctl(const std::vector<std::string>& raw, std::ostream& out,
             std::ostream& err, bool interactive) {
  Args a;
  absl::Status parsed = ParseArgs(raw, &a);
  if (!parsed.ok()) {
    err << "psctl: " << parsed.message() << "\n" << kUsage;
    return kExitUsage;
  }
  if (Has(a, "--help") || a.command == "help") {
    out << kUsage;
    return kExitOk;
  }
  if (a.command == "submit") return Submit(a, out, err, interactive);
  if (a.command == "status") return Status(a, out, err);
  if (a.command == "list") return List(a, out, err);
  if (a.command == "cancel") return Cancel(a, out, err);
  if (a.command == "stats") return Stats(a, out, err);
  err << (a.command.empty()
              ? std::string("psctl: missing command")
              : absl::StrCat("psctl: unknown command \"", a.command, "\""))
      << "\n"
      << kUsage;
  return kExitUsage;
}

}  // namespace ps
