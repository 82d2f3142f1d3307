// Where a cluster's shards listen (config.h): read from the cluster file or
// the address files the shards write, waiting for them with a deadline.
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/config.h"
#include "common/status_macros.h"
#include "common/text_proto.h"

namespace ps {
namespace {

absl::StatusOr<std::string> ResolveShard(const LoadedCluster& cluster,
                                         uint32_t shard, absl::Time deadline,
                                         const absl::Notification* stop) {
  // Polls: the file appears when a daemon in another process binds, and
  // there is no portable event to wait on across processes.
  absl::Duration backoff = absl::Milliseconds(10);
  while (true) {
    absl::StatusOr<std::string> address = ReadShardAddress(cluster, shard);
    if (address.status().code() != absl::StatusCode::kNotFound) return address;
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          address.status().message(), " (is psd shard ", shard, " running?)"));
    }
    const absl::Duration pause = std::min(backoff, deadline - absl::Now());
    if (stop == nullptr) {
      absl::SleepFor(pause);
    } else if (stop->WaitForNotificationWithTimeout(pause)) {
      return absl::CancelledError(
          absl::StrCat("stopped while waiting for shard ", shard,
                       "'s address (", address.status().message(), ")"));
    }
    backoff = std::min(backoff * 2, absl::Milliseconds(200));
  }
}

}  // namespace

absl::StatusOr<std::string> ReadShardAddress(const LoadedCluster& cluster,
                                             uint32_t shard) {
  if (shard >= static_cast<uint32_t>(cluster.config.shards_size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("shard ", shard, ": the cluster file ", cluster.path,
                     " lists ", cluster.config.shards_size(), " shards"));
  }
  const ShardAddress& a = cluster.config.shards(shard);
  if (!a.address().empty()) return a.address();
  const std::string file = ResolvePath(a.address_file(), cluster.path);
  const std::string field = absl::StrCat("shards[", shard, "].address_file ");
  std::string contents;
  // An address is short: a bigger file is not one (and is not read whole).
  absl::Status read = ReadFile(file, &contents, kMaxAddressFileBytes);
  if (absl::IsNotFound(read)) {
    return absl::NotFoundError(absl::StrCat(field, file, ": not written"));
  }
  if (!read.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(field, read.message()));
  }
  std::string address(absl::StripAsciiWhitespace(contents));
  // Empty: written but not yet filled (writers replace it atomically, but
  // an operator may create it first).
  if (address.empty()) {
    return absl::NotFoundError(absl::StrCat(field, file, ": empty"));
  }
  PS_RETURN_IF_ERROR(ValidateHostPort(address, absl::StrCat(field, file),
                                      /*allow_port_zero=*/false));
  return address;
}

absl::StatusOr<std::vector<std::string>> ResolveShardAddresses(
    const LoadedCluster& cluster, absl::Time deadline,
    const absl::Notification* stop) {
  std::vector<std::string> out;
  for (int i = 0; i < cluster.config.shards_size(); ++i) {
    PS_ASSIGN_OR_RETURN(std::string address,
                        ResolveShard(cluster, i, deadline, stop));
    out.push_back(std::move(address));
  }
  return out;
}

absl::StatusOr<std::string> ResolveCoordinatorAddress(
    const LoadedCluster& cluster, absl::Time deadline,
    const absl::Notification* stop) {
  return ResolveShard(cluster, cluster.config.coordinator_shard(), deadline,
                      stop);
}

}  // namespace ps
