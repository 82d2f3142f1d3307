// What every psctl command shares: the parsed command line, the connection
// to the cluster (flags, cluster file, TLS and token), the coordinator
// client, and the mapping of errors to psctl's exit codes
// (tools/psctl/psctl.h).
//
//   PS_ASSIGN_OR_RETURN(Connection c, Connect(args, /*need_cluster=*/false));
//   CoordinatorClient client(c);
//   absl::Status s = client.Call(&Coordinator::Stub::GetJob, req, &job);
//   if (!s.ok()) return ExitCodeFor(s);
#ifndef TOOLS_PSCTL_PSCTL_COMMON_H_
#define TOOLS_PSCTL_PSCTL_COMMON_H_

#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/coordinator_client.h"
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

// The connection and the coordinator client live in common/ (the Python
// client shares them).
using ::ps::Connection;
using ::ps::CoordinatorClient;

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

#endif  // TOOLS_PSCTL_PSCTL_COMMON_H_
