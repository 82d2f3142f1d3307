#include "worker/client/shard_channels.h"

#include <utility>

#include "spdlog/spdlog.h"

namespace ps {

ShardChannelsBase::ShardChannelsBase(const ShardChannelsOptions& options,
                                     const Security* security,
                                     std::vector<std::string> addresses,
                                     OnMoved on_moved)
    : options_(options),
      security_(security),
      num_shards_(static_cast<uint32_t>(addresses.size())),
      channels_per_shard_(std::max(1, options.channels_per_shard)),
      on_moved_(std::move(on_moved)) {
  absl::MutexLock lock(&mu_);
  addresses_ = std::move(addresses);
  suspect_.assign(num_shards_, false);
}

ShardChannelsBase::~ShardChannelsBase() { StopFollowing(); }

void ShardChannelsBase::Follow() {
  if (!options_.locate_shards) return;
  ShardRelocator::Options relocator_options;
  relocator_options.locate = options_.locate_shards;
  relocator_options.interval = options_.locate_interval;
  relocator_options.signal = options_.relocate_signal;
  std::vector<std::string> addresses;
  {
    absl::MutexLock lock(&mu_);
    addresses = addresses_;
  }
  relocator_ = std::make_unique<ShardRelocator>(
      relocator_options, std::move(addresses),
      [this](uint32_t shard, const std::string& address) {
        Moved(shard, address);
      });
}

void ShardChannelsBase::StopFollowing() { relocator_.reset(); }

std::shared_ptr<grpc::Channel> ShardChannelsBase::NewChannel(
    const std::string& address) const {
  // NewChannel gives every channel its own connection (see
  // common/security.h), so a shard's channels do not share one TCP stream.
  // Paced: this host's link split evenly over every connection to a shard.
  const uint64_t connections =
      uint64_t{num_shards_} * static_cast<uint64_t>(channels_per_shard_);
  return security_->NewChannel(
      address, options_.max_message_bytes,
      options_.link_bytes_per_s / std::max<uint64_t>(1, connections));
}

std::string ShardChannelsBase::address(uint32_t shard) const {
  absl::MutexLock lock(&mu_);
  return addresses_[shard];
}

void ShardChannelsBase::NoteHealth(uint32_t shard, const absl::Status& status) {
  if (relocator_ == nullptr) return;
  const bool unavailable = status.code() == absl::StatusCode::kUnavailable;
  absl::MutexLock lock(&mu_);
  if (unavailable && !suspect_[shard]) {
    relocator_->Suspect(shard);
  } else if (status.ok() && suspect_[shard]) {
    relocator_->Clear(shard);
  } else {
    return;
  }
  suspect_[shard] = unavailable;
}

std::string ShardChannelsBase::Note(uint32_t shard) const {
  return relocator_ != nullptr ? relocator_->Note(shard) : "";
}

void ShardChannelsBase::Moved(uint32_t shard, const std::string& address) {
  Switch(shard, address);
  {
    absl::MutexLock lock(&mu_);
    spdlog::warn("job {}: shard {} moved from {} to {}; {}", options_.job_id,
                 shard, addresses_[shard], address, options_.moved_note);
    addresses_[shard] = address;
  }
  on_moved_(shard);
}

}  // namespace ps
