#include "server/coordinator/shard_directory.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "spdlog/spdlog.h"

namespace ps {

absl::StatusOr<std::unique_ptr<ShardDirectory>> ShardDirectory::Create(
    LoadedCluster cluster, std::vector<std::string> resolved, Options options) {
  if (resolved.size() != static_cast<size_t>(cluster.config.shards_size())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "resolved: ", resolved.size(), " addresses for the ",
        cluster.config.shards_size(), " shards of ", cluster.path));
  }
  return std::unique_ptr<ShardDirectory>(new ShardDirectory(
      std::move(cluster), std::move(resolved), std::move(options)));
}

ShardDirectory::ShardDirectory(LoadedCluster cluster,
                               std::vector<std::string> resolved,
                               Options options)
    : cluster_(std::move(cluster)),
      options_(std::move(options)),
      num_shards_(static_cast<uint32_t>(resolved.size())) {
  absl::MutexLock lock(&mu_);
  current_.addresses = std::move(resolved);
  last_read_ = options_.clock ? options_.clock() : absl::Now();
}

ShardDirectory::Snapshot ShardDirectory::Current() {
  const absl::Time now = options_.clock ? options_.clock() : absl::Now();
  absl::MutexLock lock(&mu_);
  if (now - last_read_ >= options_.refresh_interval) Refresh(now);
  return current_;
}

std::string ShardDirectory::Address(uint32_t shard) {
  Snapshot now = Current();
  return shard < now.addresses.size() ? now.addresses[shard] : "";
}

void ShardDirectory::Refresh(absl::Time now) {
  last_read_ = now;
  current_.problems.clear();
  for (uint32_t s = 0; s < num_shards_; ++s) {
    absl::StatusOr<std::string> address = ReadShardAddress(cluster_, s);
    if (!address.ok()) {
      // Missing (the shard is down and its file removed, or not yet
      // rewritten) or bad: the last good address stands.
      current_.problems.emplace_back(address.status().message());
      continue;
    }
    if (*address != current_.addresses[s]) {
      spdlog::warn("shard {} moved: {} -> {} (its address file)", s,
                   current_.addresses[s], *address);
      current_.addresses[s] = *std::move(address);
    }
  }
  if (current_.problems != logged_problems_) {
    for (const std::string& p : current_.problems) {
      spdlog::warn("shard address: {}", p);
    }
    logged_problems_ = current_.problems;
  }
}

}  // namespace ps
