#include "worker/client/ps_client_options.h"

namespace ps {

RetryPolicy::Options RetryOptionsOf(const PsClientOptions& options) {
  RetryPolicy::Options retry;
  retry.rpc_deadline = options.rpc_deadline;
  retry.max_attempts = options.max_attempts;
  retry.initial_backoff = options.initial_backoff;
  retry.max_backoff = options.max_backoff;
  return retry;
}

ShardChannelsOptions ChannelOptionsOf(const PsClientOptions& options,
                                      const std::string& job_id,
                                      const std::string& moved_note) {
  ShardChannelsOptions channels;
  channels.channels_per_shard = options.channels_per_shard;
  channels.max_message_bytes = options.max_message_bytes;
  channels.link_bytes_per_s = options.link_bytes_per_s;
  channels.locate_shards = options.locate_shards;
  channels.locate_interval = options.locate_interval;
  channels.relocate_signal = options.relocate_signal;
  channels.job_id = job_id;
  channels.moved_note = moved_note;
  return channels;
}

}  // namespace ps
