#include "tools/psctl/psctl_trace.h"

#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/grpc_status.h"
#include "common/trace_recorder.h"
#include "proto/ps.grpc.pb.h"
#include "tools/psctl/trace_json.h"

namespace ps {
namespace psctl {
namespace {

constexpr char kUsageLine[] =
    "psctl trace: usage: psctl trace JOB --steps=A:B -o FILE.json "
    "[--timeout=SECONDS]\n";
constexpr int kDefaultTraceTimeoutSeconds = 600;
// How often the coordinator is asked whether the workers uploaded.
constexpr absl::Duration kPollInterval = absl::Milliseconds(200);

// "A:B" -> window; false for anything else.
bool ParseSteps(const std::string& text, TraceWindow* w) {
  std::vector<std::string> parts = absl::StrSplit(text, ':');
  uint64_t begin = 0, end = 0;
  if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &begin) ||
      !absl::SimpleAtoi(parts[1], &end)) {
    return false;
  }
  w->set_begin_step(begin);
  w->set_end_step(end);
  return true;
}

// One call to shard `address` with the connection's security.
template <typename Req, typename Resp, typename Fn>
absl::Status CallShard(const Connection& c, const std::string& address, Fn fn,
                       const Req& req, Resp* resp) {
  std::unique_ptr<ParameterServer::Stub> stub =
      ParameterServer::NewStub(c.security.NewChannel(address));
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + c.connect_timeout));
  ctx.set_wait_for_ready(true);
  c.security.Authorize(&ctx);
  return FromGrpcStatus((stub.get()->*fn)(&ctx, req, resp));
}

// Waits until every worker uploaded, the job ended or `deadline`.
absl::StatusOr<GetTraceResponse> AwaitUploads(const CoordinatorClient& client,
                                              const std::string& job_id,
                                              absl::Time deadline) {
  for (;;) {
    GetTraceRequest req;
    req.set_job_id(job_id);
    GetTraceResponse got;
    absl::Status s = client.Call(&Coordinator::Stub::GetTrace, req, &got);
    if (!s.ok()) return s;
    if (got.num_workers() > 0 &&
        static_cast<uint32_t>(got.uploaded_ranks_size()) >= got.num_workers()) {
      return got;
    }
    JobStatus job;
    GetJobRequest get;
    get.set_job_id(job_id);
    s = client.Call(&Coordinator::Stub::GetJob, get, &job);
    if (!s.ok()) return s;
    const JobState st = job.state();
    if (st == SUCCEEDED || st == FAILED || st == CANCELLED) {
      // Workers upload before their final report: what is there is all.
      s = client.Call(&Coordinator::Stub::GetTrace, req, &got);
      if (!s.ok()) return s;
      return got;
    }
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "--timeout: ", got.uploaded_ranks_size(), " of ", got.num_workers(),
          " workers uploaded their trace in time (the job is at step ",
          job.progress().step(), ")"));
    }
    absl::SleepFor(kPollInterval);
  }
}

// What `psctl trace` was asked for.
struct TraceCommand {
  std::string job_id;
  TraceWindow window;
  std::string path;
  int timeout_s = kDefaultTraceTimeoutSeconds;
};

// Parses and checks the command line. Returns kExitOk, or the exit code
// after reporting why on `err`.
int ParseTraceCommand(const Args& a, TraceCommand* cmd, std::ostream& err) {
  cmd->path = FlagOr(a, "--out", "");
  if (a.positional.size() != 1 || cmd->path.empty() || !Has(a, "--steps") ||
      !ParseSteps(FlagOr(a, "--steps", ""), &cmd->window) ||
      (Has(a, "--timeout") &&
       (!absl::SimpleAtoi(FlagOr(a, "--timeout", ""), &cmd->timeout_s) ||
        cmd->timeout_s <= 0))) {
    err << kUsageLine;
    return kExitUsage;
  }
  cmd->job_id = a.positional[0];
  TraceWindow& window = cmd->window;
  window.set_job_id(cmd->job_id);
  if (window.end_step() <= window.begin_step()) {
    err << "psctl trace: --steps: empty step range [" << window.begin_step()
        << ", " << window.end_step() << ")\n";
    return kExitJobFailed;
  }
  if (window.end_step() - window.begin_step() > kTraceMaxSteps) {
    err << "psctl trace: --steps: " << window.end_step() - window.begin_step()
        << " steps; a trace holds at most " << kTraceMaxSteps << "\n";
    return kExitJobFailed;
  }
  return kExitOk;
}

// The calls of one trace, in order: CheckRunning, GetShards, Start, then
// Collect. Each returns kExitOk, or the exit code after reporting the
// failure on `err`. Borrows the connection and the stream.
class TraceSession {
 public:
  TraceSession(const Connection& c, const std::string& job_id,
               std::ostream& err)
      : c_(c), client_(c), job_id_(job_id), err_(err) {}

  // The job, which must be RUNNING.
  int CheckRunning(JobStatus* job) {
    GetJobRequest get;
    get.set_job_id(job_id_);
    if (absl::Status s = client_.Call(&Coordinator::Stub::GetJob, get, job);
        !s.ok()) {
      return Fail("", s);
    }
    if (job->state() != RUNNING) {
      err_ << "psctl trace: job " << job_id_ << " is "
           << JobState_Name(job->state())
           << (job->state() == PENDING ? "; trace it once it runs" : "")
           << "\n";
      return kExitJobFailed;
    }
    return kExitOk;
  }

  int GetShards(ShardAddressesResponse* shards) {
    if (absl::Status s = client_.Call(&Coordinator::Stub::GetShardAddresses,
                                      ShardAddressesRequest(), shards);
        !s.ok()) {
      return Fail("", s);
    }
    return kExitOk;
  }

  // Sets the window on every shard, then on the coordinator (which tells
  // the workers at their next heartbeat).
  int Start(const TraceWindow& window, const ShardAddressesResponse& shards) {
    // Shards first: they record the window before any worker learns it.
    SetTraceRequest set;
    *set.mutable_window() = window;
    for (int i = 0; i < shards.addresses_size(); ++i) {
      SetTraceResponse ignored;
      absl::Status s =
          CallShard(c_, shards.addresses(i), &ParameterServer::Stub::SetTrace,
                    set, &ignored);
      if (!s.ok()) return FailShard(shards, i, s);
    }
    StartTraceRequest start;
    *start.mutable_window() = window;
    StartTraceResponse started;
    if (absl::Status s =
            client_.Call(&Coordinator::Stub::StartTrace, start, &started);
        !s.ok()) {
      return Fail("", s);
    }
    if (started.step() >= window.begin_step()) {
      err_ << "psctl trace: note: job " << job_id_ << " reported step "
           << started.step() << " already; steps before the workers learn the "
           << "window (next heartbeat) are not traced\n";
    }
    return kExitOk;
  }

  // Waits up to `timeout` for the workers' uploads, then gathers their
  // spans and the shards' into `in`.
  int Collect(absl::Duration timeout, const ShardAddressesResponse& shards,
              TraceInput* in) {
    absl::StatusOr<GetTraceResponse> uploads =
        AwaitUploads(client_, job_id_, absl::Now() + timeout);
    if (!uploads.ok()) return Fail("", uploads.status());
    for (uint32_t rank : uploads->uploaded_ranks()) {
      GetTraceRequest req;
      req.set_job_id(job_id_);
      req.set_rank(rank);
      GetTraceResponse got;
      if (absl::Status s =
              client_.Call(&Coordinator::Stub::GetTrace, req, &got);
          !s.ok()) {
        return Fail("", s);
      }
      in->workers.push_back(std::move(*got.mutable_worker()));
    }
    for (int i = 0; i < shards.addresses_size(); ++i) {
      ShardTraceRequest req;
      req.set_job_id(job_id_);
      ShardTrace got;
      absl::Status s = CallShard(c_, shards.addresses(i),
                                 &ParameterServer::Stub::GetTrace, req, &got);
      if (!s.ok()) return FailShard(shards, i, s);
      in->shards.push_back(std::move(got));
    }
    return kExitOk;
  }

 private:
  int Fail(const std::string& what, const absl::Status& s) {
    err_ << "psctl trace: " << what << Explain(s, c_.coordinator) << "\n";
    // Unknown job, ended job, bad window: exit 1; unreachable: 3.
    const int code = ExitCodeFor(s);
    return code == kExitUsage ? kExitJobFailed : code;
  }
  int FailShard(const ShardAddressesResponse& shards, int i,
                const absl::Status& s) {
    return Fail(absl::StrCat("shard ", i, " at ", shards.addresses(i), ": "),
                s);
  }

  const Connection& c_;
  CoordinatorClient client_;
  const std::string job_id_;
  std::ostream& err_;
};

// Writes the trace file and reports what it holds: kExitOk, or kExitUsage
// when the file cannot be written, kExitJobFailed when no step was recorded.
int WriteTrace(const TraceCommand& cmd, const TraceInput& in, std::ostream& out,
               std::ostream& err) {
  const TraceWindow& window = cmd.window;
  std::ofstream f(cmd.path);
  const TraceSummary sum = WriteTraceJson(in, f);
  f.close();
  if (!f) {
    err << "psctl trace: -o: cannot write " << cmd.path << "\n";
    return kExitUsage;
  }
  const uint64_t steps = window.end_step() - window.begin_step();
  if (sum.missing_steps.size() == steps) {
    err << "psctl trace: no step of [" << window.begin_step() << ", "
        << window.end_step() << ") was recorded (the job ended or passed the "
        << "window first)\n";
    return kExitJobFailed;
  }
  if (!sum.missing_steps.empty()) {
    err << "psctl trace: steps missing on some worker: "
        << absl::StrJoin(sum.missing_steps, " ") << "\n";
  }
  if (sum.dropped > 0) {
    err << "psctl trace: " << sum.dropped
        << " spans dropped past the recorders' cap\n";
  }
  out << "wrote " << cmd.path << ": steps [" << window.begin_step() << ", "
      << window.end_step() << "), " << in.workers.size() << " workers, "
      << in.shards.size() << " shards, " << sum.events << " events, "
      << sum.flows << " flows\n";
  return kExitOk;
}

}  // namespace

int Trace(const Args& a, std::ostream& out, std::ostream& err) {
  TraceCommand cmd;
  if (int code = ParseTraceCommand(a, &cmd, err); code != kExitOk) return code;
  absl::StatusOr<Connection> c = Connect(a, /*need_cluster=*/false);
  if (!c.ok()) return ReportConnectFailure(c.status(), err);
  TraceSession session(*c, cmd.job_id, err);
  JobStatus job;
  ShardAddressesResponse shards;
  TraceInput in;
  in.window = cmd.window;
  int code = session.CheckRunning(&job);
  if (code == kExitOk) code = session.GetShards(&shards);
  if (code == kExitOk) code = session.Start(cmd.window, shards);
  if (code == kExitOk) {
    in.job_name = job.name();
    code = session.Collect(absl::Seconds(cmd.timeout_s), shards, &in);
  }
  if (code != kExitOk) return code;
  return WriteTrace(cmd, in, out, err);
}

}  // namespace psctl
}  // namespace ps
