// Every constant of defaults.h against the "Default N" written in the field
// comment of the proto field it fills, so that the two cannot drift apart.
// The comments are read from the .proto sources: "Default 12",
// "Default \"cpu:0\"", "Default 4 MiB (4194304)" (the exact number wins).
#include "common/defaults.h"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

std::string ReadProto(const std::string& name) {
  std::ifstream in("proto/" + name);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The comment lines right above `field`'s declaration inside `message`, and
// the trailing comment on its line, joined with spaces.
std::string FieldComment(const std::string& proto, const std::string& message,
                         const std::string& field) {
  std::vector<std::string> lines = absl::StrSplit(proto, '\n');
  bool inside = false;
  std::string comment;
  for (const std::string& raw : lines) {
    absl::string_view line = absl::StripAsciiWhitespace(raw);
    if (absl::StartsWith(line, "message ")) {
      inside = absl::StartsWith(line, absl::StrCat("message ", message, " "));
      comment.clear();
      continue;
    }
    if (!inside) continue;
    if (absl::StartsWith(line, "//")) {
      absl::StrAppend(&comment, " ", absl::StripPrefix(line, "//"));
      continue;
    }
    // "[repeated] type name = number;": the name is the word before '='.
    std::vector<absl::string_view> words =
        absl::StrSplit(line, ' ', absl::SkipEmpty());
    auto eq = std::find(words.begin(), words.end(), "=");
    if (eq != words.begin() && eq != words.end() && *(eq - 1) == field) {
      const size_t trailing = line.find("//");
      if (trailing != absl::string_view::npos) {
        absl::StrAppend(&comment, " ", line.substr(trailing + 2));
      }
      return comment;
    }
    comment.clear();
  }
  return "";
}

// The value after "Default" in `comment`: a quoted string, or a number,
// or the exact number in parentheses after a unit ("4 MiB (4194304)").
std::string DocumentedDefault(const std::string& comment) {
  size_t at = comment.find("Default ");
  if (at == std::string::npos) return "<no \"Default\" in the comment>";
  absl::string_view rest = absl::StripLeadingAsciiWhitespace(
      absl::string_view(comment).substr(at + 8));
  if (absl::ConsumePrefix(&rest, "\"")) {
    return std::string(rest.substr(0, rest.find('"')));
  }
  std::string value(rest.substr(0, rest.find_first_of(" .,;)")));
  const size_t open = rest.find(" (");
  const size_t unit = rest.find("iB");
  if (unit != absl::string_view::npos && open != absl::string_view::npos &&
      unit < open) {
    rest.remove_prefix(open + 2);
    value = std::string(rest.substr(0, rest.find(')')));
  }
  return value;
}

struct Case {
  const char* proto;
  const char* message;
  const char* field;
  std::string value;  // the constant, printed
};

TEST(DefaultsTest, ProtoCommentsDocumentTheConstants) {
  const std::vector<Case> cases = {
      {"cluster.proto", "PsdConfig", "listen_address", kDefaultListenAddress},
      {"cluster.proto", "PsdConfig", "max_message_bytes",
       absl::StrCat(kDefaultMaxMessageBytes)},
      {"cluster.proto", "PsdConfig", "memory_budget_bytes",
       absl::StrCat(kDefaultMemoryBudgetBytes)},
      {"cluster.proto", "PsdConfig", "worker_timeout_ms",
       absl::StrCat(kDefaultWorkerTimeoutMs)},
      {"cluster.proto", "PsdConfig", "progress_history_rows",
       absl::StrCat(kDefaultProgressHistoryRows)},
      {"cluster.proto", "PsdConfig", "shard_address_refresh_ms",
       absl::StrCat(kDefaultShardAddressRefreshMs)},
      {"cluster.proto", "PsdConfig", "succeeded_jobs_kept",
       absl::StrCat(kDefaultSucceededJobsKept)},
      {"cluster.proto", "PsdConfig", "shard_heartbeat_ms",
       absl::StrCat(kDefaultShardHeartbeatMs)},
      {"cluster.proto", "PsdConfig", "shard_heartbeat_misses",
       absl::StrCat(kDefaultShardHeartbeatMisses)},
      {"cluster.proto", "WorkerdConfig", "devices", kDefaultDevice},
      {"cluster.proto", "WorkerdConfig", "device_weights",
       absl::StrCat(kDefaultDeviceWeight)},
      {"cluster.proto", "WorkerdConfig", "data_dir", kDefaultDataDir},
      {"cluster.proto", "WorkerdConfig", "threads_per_device",
       absl::StrCat(kDefaultThreadsPerDevice)},
      {"cluster.proto", "WorkerdConfig", "cpu_kernels", kDefaultCpuKernels},
      {"cluster.proto", "WorkerdConfig", "loader_threads",
       absl::StrCat(kDefaultLoaderThreads)},
      {"cluster.proto", "WorkerdConfig", "prefetch_batches",
       absl::StrCat(kDefaultPrefetchBatches)},
      {"cluster.proto", "WorkerdConfig", "heartbeat_interval_ms",
       absl::StrCat(kDefaultHeartbeatIntervalMs)},
      {"cluster.proto", "WorkerdConfig", "rpc_deadline_ms",
       absl::StrCat(kDefaultRpcDeadlineMs)},
      {"cluster.proto", "WorkerdConfig", "rpc_max_attempts",
       absl::StrCat(kDefaultRpcMaxAttempts)},
      {"cluster.proto", "WorkerdConfig", "max_inflight_per_shard",
       absl::StrCat(kDefaultMaxInflightPerShard)},
      {"cluster.proto", "WorkerdConfig", "max_request_bytes",
       absl::StrCat(kDefaultMaxRequestBytes)},
      {"cluster.proto", "WorkerdConfig", "max_message_bytes",
       absl::StrCat(kDefaultMaxMessageBytes)},
      {"cluster.proto", "WorkerdConfig", "channels_per_shard",
       absl::StrCat(kDefaultChannelsPerShard)},
      {"cluster.proto", "WorkerdConfig", "fusion_bytes",
       absl::StrCat(kDefaultFusionBytes)},
      {"cluster.proto", "WorkerdConfig", "shard_locate_interval_ms",
       absl::StrCat(kDefaultShardLocateIntervalMs)},
      {"job.proto", "ConsistencySpec", "step_deadline_ms",
       absl::StrCat(kDefaultStepDeadlineMs)},
      {"job.proto", "JobSpec", "partition_bytes",
       absl::StrCat(kDefaultPartitionBytes)},
      {"job.proto", "WireSpec", "format", kDefaultWireFormat},
      {"job.proto", "WireSpec", "topk_fraction",
       absl::StrCat(kDefaultTopkFraction)},
      {"job.proto", "OptimizerSpec", "ftrl_beta",
       absl::StrCat(kDefaultFtrlBeta)},
      {"job.proto", "CtrModel", "fields", absl::StrCat(kDefaultCtrFields)},
      {"job.proto", "CtrModel", "dense_features",
       absl::StrCat(kDefaultCtrDenseFeatures)},
      {"job.proto", "TableSpec", "admit_after",
       absl::StrCat(kDefaultTableAdmitAfter)},
      {"job.proto", "TableSpec", "hot_ids", absl::StrCat(kDefaultTableHotIds)},
  };
  for (const Case& c : cases) {
    const std::string comment =
        FieldComment(ReadProto(c.proto), c.message, c.field);
    ASSERT_FALSE(comment.empty())
        << c.proto << ": " << c.message << "." << c.field << " not found";
    EXPECT_EQ(DocumentedDefault(comment), c.value)
        << c.proto << ": " << c.message << "." << c.field << ":" << comment;
  }
}

TEST(DefaultsTest, RetryBackoffIsDocumented) {
  const std::string comment = FieldComment(ReadProto("cluster.proto"),
                                           "WorkerdConfig", "rpc_max_attempts");
  EXPECT_TRUE(absl::StrContains(
      comment, absl::StrCat("from ", kDefaultRpcInitialBackoffMs, " ms up to ",
                            kDefaultRpcMaxBackoffMs / 1000, " s")))
      << comment;
}

}  // namespace
}  // namespace ps
