// What every psctl command shares: the parsed command line, the connection
// to the cluster (flags, cluster file, TLS and token), the coordinator
// client, and the mapping of errors to psctl's exit codes (tools/psctl.h).
//
//   PS_ASSIGN_OR_RETURN(Connection c, Connect(args, /*need_cluster=*/false));
//   CoordinatorClient client(c);
//   absl::Status s = client.Call(&Coordinator::Stub::GetJob, req, &job);
//   if (!s.ok()) return ExitCodeFor(s);
#ifndef TOOLS_PSCTL_COMMON_H_
#define TOOLS_PSCTL_COMMON_H_

#include <chrono>
#include <map>
#include <memory>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/config.h"
#include "common/defaults.h"
#include "common/grpc_status.h"
#include "common/security.h"
#include "google/protobuf/util/json_util.h"
#include "proto/coordinator.grpc.pb.h"

namespace ps {
namespace psctl {

inline constexpr int kExitOk = 0;
inline constexpr int kExitJobFailed = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitUnreachable = 3;

// The command line, split into the command, its positional arguments and
// the flags.
struct Args {
  std::string command;
  std::vector<std::string> positional;
  std::map<std::string, std::string> flags;  // "--name" -> value ("" if none)
};

// kInvalidArgument naming the flag for a flag psctl does not know.
absl::Status ParseArgs(const std::vector<std::string>& raw, Args* args);

bool Has(const Args& a, const std::string& flag);
// The flag's value; `def` when it is absent or empty.
std::string FlagOr(const Args& a, const std::string& flag,
                   const std::string& def);

// Everything a command needs to reach the cluster.
struct Connection {
  Security security;
  std::string coordinator;
  LoadedCluster cluster;  // empty when --coordinator alone was enough
  absl::Duration connect_timeout = absl::Seconds(kDefaultConnectTimeoutSeconds);
};

// Reads --connect-timeout, --coordinator and --cluster (the cluster file is
// loaded unless --coordinator alone suffices and `need_cluster` is false).
// Blocks up to the connect timeout resolving the coordinator. Errors map to
// exit codes through ExitCodeFor: kInvalidArgument for a bad flag or file,
// kUnavailable when the coordinator cannot be resolved.
absl::StatusOr<Connection> Connect(const Args& a, bool need_cluster);

// Maps an RPC or connection failure to psctl's exit codes.
int ExitCodeFor(const absl::Status& s);

// `s`'s message, with a hint when the coordinator at `address` is
// unreachable.
std::string Explain(const absl::Status& s, const std::string& address);

// Indented JSON with proto field names and zero-valued fields.
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

// Calls to the coordinator of a Connection, which it borrows (the
// Connection must outlive it). Thread-compatible.
class CoordinatorClient {
 public:
  explicit CoordinatorClient(const Connection& c)
      : c_(c),
        stub_(Coordinator::NewStub(c.security.NewChannel(c.coordinator))) {}

  // One call, waiting up to the connect timeout for the coordinator to come
  // up (a daemon just started, or still resolving its shards). Blocks.
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

 private:
  const Connection& c_;
  std::unique_ptr<Coordinator::Stub> stub_;
};

// Writes "psctl: MESSAGE" for a failed Connect and returns its exit code.
int ReportConnectFailure(const absl::Status& s, std::ostream& err);

// Connects to the coordinator and makes one call. On failure prints why
// (prefixed with `command`) and returns the exit code; else kExitOk.
template <typename Req, typename Resp, typename Fn>
int CallCoordinator(const Args& a, const std::string& command, Fn fn,
                    const Req& req, Resp* resp, std::ostream& err) {
  absl::StatusOr<Connection> c = Connect(a, /*need_cluster=*/false);
  if (!c.ok()) return ReportConnectFailure(c.status(), err);
  CoordinatorClient client(*c);
  absl::Status s = client.Call(fn, req, resp);
  if (!s.ok()) {
    err << "psctl " << command << ": " << Explain(s, c->coordinator) << "\n";
    return ExitCodeFor(s);
  }
  return kExitOk;
}

// One line of a job's state and progress (status, and submit --wait).
std::string FormatProgress(const JobStatus& j);

}  // namespace psctl
}  // namespace ps

#endif  // TOOLS_PSCTL_COMMON_H_
