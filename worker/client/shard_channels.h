// ShardChannels: the channels from one client to every shard, and following
// a shard that moved. Both clients of the shards (AsyncPsClient over generic
// stubs, GrpcSparseClient over ParameterServer stubs) hold one.
//
//   ShardChannels<grpc::GenericStub> channels(
//       options, security, addresses,
//       [](std::shared_ptr<grpc::Channel> c) {
//         return std::make_unique<grpc::GenericStub>(std::move(c));
//       },
//       [this](uint32_t shard) { ... retry shard's calls in backoff now ... });
//   grpc::GenericStub* stub = channels.stub(shard, channel);
//   channels.NoteHealth(shard, status);  // after each call
//
// Each shard gets channels_per_shard channels (at least one), each its own
// TCP connection (Security::NewChannel). With options.locate_shards, a
// shard whose calls fail UNAVAILABLE is looked for at the coordinator
// (ShardRelocator, worker/client/shard_relocator.h); when it moved, its
// channels switch to the new address and `on_moved` tells the client, which
// sends its pending retries there at once (same (worker, step), attempt +
// 1). The stubs of the old address live as long as this object: calls still
// on the wire hold on to them, so a stub pointer stays valid until the end.
//
// Thread-safe. Its lock is a leaf below the client's: the client may call in
// under its own lock; `on_moved` runs on the relocator's thread with no lock
// of this object held. Call StopFollowing before anything `on_moved`
// touches is destroyed.
#ifndef WORKER_CLIENT_SHARD_CHANNELS_H_
#define WORKER_CLIENT_SHARD_CHANNELS_H_

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/defaults.h"
#include "common/security.h"
#include "grpcpp/channel.h"
#include "worker/client/shard_relocator.h"

namespace ps {

struct ShardChannelsOptions {
  // PsClientOptions' fields of the same names.
  int channels_per_shard = kDefaultChannelsPerShard;
  int max_message_bytes = kDefaultMaxMessageBytes;
  uint64_t link_bytes_per_s = 0;  // 0: channels not paced
  LocateShards locate_shards;     // unset: shards never move
  // A new replica epoch: look the shards up now
  // (ShardRelocator::Options::signal).
  std::shared_ptr<RelocateSignal> relocate_signal;
  absl::Duration locate_interval =
      absl::Milliseconds(kDefaultShardLocateIntervalMs);
  // For the log line of a move: "job <job_id>: shard 1 moved from A to B;
  // <moved_note>".
  std::string job_id;
  std::string moved_note = "retrying there";
};

// The part that does not depend on the stub type: addresses, shard health
// and the relocator.
class ShardChannelsBase {
 public:
  // Called after a shard's channels switched to its new address.
  using OnMoved = std::function<void(uint32_t shard)>;

  ShardChannelsBase(const ShardChannelsBase&) = delete;
  ShardChannelsBase& operator=(const ShardChannelsBase&) = delete;

  uint32_t num_shards() const { return num_shards_; }
  // Channels per shard, at least one.
  int channels_per_shard() const { return channels_per_shard_; }
  // Where `shard`'s channels go now.
  std::string address(uint32_t shard) const ABSL_LOCKS_EXCLUDED(mu_);
  // A call to `shard` ended with `status`: an UNAVAILABLE makes it suspect
  // (the relocator looks for it), a success clears that. Never blocks.
  void NoteHealth(uint32_t shard, const absl::Status& status)
      ABSL_LOCKS_EXCLUDED(mu_);
  // What the coordinator said about `shard`, for the error of a call that
  // stayed UNAVAILABLE: "" without locate_shards or when nothing is known.
  std::string Note(uint32_t shard) const;
  // No more moves: waits for a lookup in flight; `on_moved` is never
  // called again. Idempotent; call it before the client's state goes.
  void StopFollowing();

 protected:
  ShardChannelsBase(const ShardChannelsOptions& options,
                    const Security* security,
                    std::vector<std::string> addresses, OnMoved on_moved);
  virtual ~ShardChannelsBase();

  // Starts the relocator (with locate_shards). The derived class calls it
  // once its stubs exist.
  void Follow();
  // A new channel (its own connection) to `address`.
  std::shared_ptr<grpc::Channel> NewChannel(const std::string& address) const;
  // Replaces `shard`'s stubs by ones to `address` (made outside mu_).
  virtual void Switch(uint32_t shard, const std::string& address)
      ABSL_LOCKS_EXCLUDED(mu_) = 0;

  mutable absl::Mutex mu_;

 private:
  void Moved(uint32_t shard, const std::string& address)
      ABSL_LOCKS_EXCLUDED(mu_);

  const ShardChannelsOptions options_;
  const Security* const security_;
  const uint32_t num_shards_;
  const int channels_per_shard_;
  const OnMoved on_moved_;
  std::vector<std::string> addresses_ ABSL_GUARDED_BY(mu_);  // by shard
  // By shard: told the relocator it failed, no success since.
  std::vector<bool> suspect_ ABSL_GUARDED_BY(mu_);
  // Set with options.locate_shards; reset by StopFollowing (its thread
  // calls Moved).
  std::unique_ptr<ShardRelocator> relocator_;
};

// The channels as stubs of type Stub (grpc::GenericStub,
// ParameterServer::Stub, ...).
template <typename Stub>
class ShardChannels final : public ShardChannelsBase {
 public:
  using MakeStub =
      std::function<std::unique_ptr<Stub>(std::shared_ptr<grpc::Channel>)>;

  // `security` is borrowed and must outlive this object. `addresses`: by
  // shard, where the channels go first.
  ShardChannels(const ShardChannelsOptions& options, const Security* security,
                std::vector<std::string> addresses, MakeStub make_stub,
                OnMoved on_moved)
      : ShardChannelsBase(options, security, addresses, std::move(on_moved)),
        make_stub_(std::move(make_stub)) {
    {
      absl::MutexLock lock(&mu_);
      for (const std::string& address : addresses) {
        stubs_.push_back(StubsTo(address));
      }
    }
    Follow();
  }
  ~ShardChannels() override { StopFollowing(); }

  // The stub of `shard`'s channel `channel` (< channels_per_shard()) as of
  // now; valid as long as this object.
  Stub* stub(uint32_t shard, uint32_t channel) const ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    return stubs_[shard][channel].get();
  }

 private:
  std::vector<std::unique_ptr<Stub>> StubsTo(const std::string& address) const {
    std::vector<std::unique_ptr<Stub>> stubs;
    for (int c = 0; c < channels_per_shard(); ++c) {
      stubs.push_back(make_stub_(NewChannel(address)));
    }
    return stubs;
  }

  void Switch(uint32_t shard, const std::string& address) override
      ABSL_LOCKS_EXCLUDED(mu_) {
    std::vector<std::unique_ptr<Stub>> stubs = StubsTo(address);
    absl::MutexLock lock(&mu_);
    retired_.push_back(std::move(stubs_[shard]));
    stubs_[shard] = std::move(stubs);
  }

  const MakeStub make_stub_;
  // [shard][channel]
  std::vector<std::vector<std::unique_ptr<Stub>>> stubs_ ABSL_GUARDED_BY(mu_);
  // Stubs of addresses a shard moved from, kept to the end: calls sent
  // there may still be on the wire.
  std::vector<std::vector<std::unique_ptr<Stub>>> retired_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ps

#endif  // WORKER_CLIENT_SHARD_CHANNELS_H_
