// PsClientOptions: how the worker's clients of the shards (AsyncPsClient,
// PsClient, GrpcSparseClient) talk to them. Workerd fills it from its
// WorkerdConfig, the Python client from its JoinOptions; every field has
// its default in common/defaults.h.
//
//   PsClientOptions options;
//   options.rpc_deadline = absl::Seconds(30);
//   options.locate_shards = ...;  // follow shards that move
//   PS_ASSIGN_OR_RETURN(auto client,
//                       AsyncPsClient::Create(options, assignment, &sec));
#ifndef WORKER_CLIENT_PS_CLIENT_OPTIONS_H_
#define WORKER_CLIENT_PS_CLIENT_OPTIONS_H_

#include <cstddef>
#include <memory>
#include <string>

#include "absl/time/time.h"
#include "common/defaults.h"
#include "common/trace_recorder.h"
#include "worker/client/retry_policy.h"
#include "worker/client/shard_channels.h"
#include "worker/client/shard_relocator.h"

namespace ps {

class GradientEncoder;

struct PsClientOptions {
  // Deadline of one RPC attempt. Calls that wait on other workers (BSP/SSP)
  // get at least the job's step deadline plus 5 s, so the shard's own
  // deadline error, which names the missing workers, arrives first.
  absl::Duration rpc_deadline = absl::Milliseconds(kDefaultRpcDeadlineMs);
  int max_attempts = kDefaultRpcMaxAttempts;
  absl::Duration initial_backoff =
      absl::Milliseconds(kDefaultRpcInitialBackoffMs);
  absl::Duration max_backoff = absl::Milliseconds(kDefaultRpcMaxBackoffMs);
  int max_inflight_per_shard = kDefaultMaxInflightPerShard;
  size_t max_request_bytes = kDefaultMaxRequestBytes;
  int max_message_bytes = kDefaultMaxMessageBytes;
  // gRPC channels (each its own TCP connection) to every shard; a shard's
  // requests are spread over them. One HTTP/2 connection is read and
  // written by one thread at a time, so a second one lets a large exchange
  // use both directions of two connections at once.
  int channels_per_shard = kDefaultChannelsPerShard;
  // This host's link in bytes per second (WorkerdConfig.link_rate_mbit); 0:
  // no pacing. Otherwise each channel is paced at this / (shards x
  // channels_per_shard), so every flow into a shard runs at its share.
  uint64_t link_bytes_per_s = 0;
  // Delta pulls, for jobs whose workers push top-k (wire.topk_fraction <
  // 1): a pull of a chunk into the same `params` buffer that the previous
  // successful pull of it wrote names the version it brought
  // (PullRequest/PushPullRequest `held`), and the shard may answer with
  // only the entries changed since; applied onto the buffer they give
  // bitwise the full reply. The caller must then leave those values as the
  // client wrote them (the trainer does); a pull into another buffer, and
  // every chunk after a reply that failed to decode, goes in full.
  bool delta_pulls = kDefaultDeltaPulls;
  // Shards that move (worker/client/shard_relocator.h). Set: while a shard
  // keeps failing with UNAVAILABLE, the coordinator is asked every
  // `locate_interval` where it is now; if it moved, the shard's channels
  // switch to the new address and the pending retries go there at once
  // (same step, attempt + 1, so the shard still applies each push once).
  // The retries' budget (max_attempts) is unchanged. Unset: a shard is only
  // ever retried at the address the Assignment gave.
  LocateShards locate_shards;
  absl::Duration locate_interval =
      absl::Milliseconds(kDefaultShardLocateIntervalMs);
  // With locate_shards: raised when the coordinator's replica epoch moved
  // (workerd's heartbeat), it makes a lookup at once; a shard that moved
  // then has its calls still on the wire cancelled and sent again at the
  // new address (a primary cut off from the network answers nothing, so
  // they would wait out their deadline). Unset: lookups only on failures.
  std::shared_ptr<RelocateSignal> relocate_signal;
  // Step timelines (psctl trace); borrowed, must outlive the client; null:
  // none. Each call of a step it covers is recorded: TRACE_RPC from issue
  // to reply and TRACE_PULL_REPLY for the reply's decode.
  TraceRecorder* tracer = nullptr;
  // The gradient encoder (top-k residuals) of the client this one replaces
  // in the same job (a re-placement: same chunks, other shards), taken over
  // so the residuals go on and a refused step rerun is encoded once
  // (GradientEncoder::EncodeStep). Null, or one for other chunks (logged):
  // a fresh encoder.
  std::shared_ptr<GradientEncoder> encoder;
};

// The fields of `options` that RetryPolicy reads.
RetryPolicy::Options RetryOptionsOf(const PsClientOptions& options);
// The fields of `options` that ShardChannels reads; `job_id` and
// `moved_note` word its log line of a move.
ShardChannelsOptions ChannelOptionsOf(const PsClientOptions& options,
                                      const std::string& job_id,
                                      const std::string& moved_note);

}  // namespace ps

#endif  // WORKER_CLIENT_PS_CLIENT_OPTIONS_H_
