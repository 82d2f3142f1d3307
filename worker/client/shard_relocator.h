// ShardRelocator: finds shards that moved. A shard restarted at another port
// or host (as under a scheduler) rewrites its address file; the coordinator
// re-reads the files and answers GetShardAddresses. A parameter client tells
// the relocator when a shard fails with UNAVAILABLE (Suspect); while any
// shard is suspect, the relocator asks the coordinator every `interval`, on
// its own thread, and reports each shard whose address changed (OnMoved),
// so that the client's retries go to the new address with the same
// (worker, step) tags. A call that succeeds clears the suspicion (Clear).
//
//   ShardRelocator relocator(options, assignment_addresses,
//                            [&](uint32_t shard, const std::string& a) {
//                              ... switch shard's channels to `a` ...
//                            });
//   relocator.Suspect(1);  // from a gRPC callback: never blocks
//
// Thread-safe. Suspect, Clear and Note never block (they may be called
// under the caller's locks). OnMoved runs on the relocator's thread with no
// relocator lock held; it may take the caller's locks, and must not call
// back into the relocator's destructor. The destructor waits for a lookup
// in flight (at most its deadline, max(interval, 500 ms)); after it
// returns, OnMoved is never called again.
#ifndef WORKER_CLIENT_SHARD_RELOCATOR_H_
#define WORKER_CLIENT_SHARD_RELOCATOR_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/defaults.h"
#include "proto/coordinator.pb.h"

namespace ps {

// Asks the coordinator where the shards are now (GetShardAddresses),
// blocking up to `deadline`.
using LocateShards =
    std::function<absl::StatusOr<ShardAddressesResponse>(absl::Time deadline)>;

// Tells relocators to look the shards up now, whether or not a call
// failed. workerd passes it each heartbeat's replica epoch; when that moved
// (a shard failed over), calls still on the wire to the old primary, which
// may be cut off rather than dead (no UNAVAILABLE comes back), follow the
// successor at once instead of at their deadline. Thread-safe.
class RelocateSignal {
 public:
  // A heartbeat's HeartbeatResponse.replica_epoch (0: none): wakes every
  // subscriber when it differs from the last one seen.
  void OnReplicaEpoch(uint64_t epoch) ABSL_LOCKS_EXCLUDED(mu_);
  // `wake` runs on OnReplicaEpoch's thread under this object's lock: it
  // must not block or call back in. Returns the id to Unsubscribe with.
  uint64_t Subscribe(std::function<void()> wake) ABSL_LOCKS_EXCLUDED(mu_);
  // Once it returns, that `wake` never runs again.
  void Unsubscribe(uint64_t id) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  absl::Mutex mu_;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  uint64_t epoch_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<uint64_t, std::function<void()>> wakes_ ABSL_GUARDED_BY(mu_);
};

class ShardRelocator {
 public:
  using OnMoved =
      std::function<void(uint32_t shard, const std::string& address)>;

  struct Options {
    LocateShards locate;  // required
    // How often to ask while a shard is suspect
    // (WorkerdConfig.shard_locate_interval_ms).
    absl::Duration interval = absl::Milliseconds(kDefaultShardLocateIntervalMs);
    // Set: each new replica epoch it hears of makes one lookup (within
    // `interval` of the last), suspect or not. Unset: lookups only while a
    // shard is suspect.
    std::shared_ptr<RelocateSignal> signal;
  };

  // `addresses`: where the client's channels go now, by shard.
  ShardRelocator(Options options, std::vector<std::string> addresses,
                 OnMoved on_moved);
  ~ShardRelocator();

  ShardRelocator(const ShardRelocator&) = delete;
  ShardRelocator& operator=(const ShardRelocator&) = delete;

  // `shard` failed with UNAVAILABLE: look for it until Clear.
  void Suspect(uint32_t shard) ABSL_LOCKS_EXCLUDED(mu_);
  // A call to `shard` succeeded.
  void Clear(uint32_t shard) ABSL_LOCKS_EXCLUDED(mu_);
  // What the last lookup said about `shard`, for error messages: "" when
  // nothing is wrong, else e.g. "coordinator: shards[1].address_file F:
  // \"x\" is not host:port" or "coordinator unreachable: ...".
  std::string Note(uint32_t shard) const ABSL_LOCKS_EXCLUDED(mu_);
  // Lookups made (for tests and stats).
  uint64_t lookups() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void Loop();
  // Applies one answer: the moves to report, and the notes.
  std::vector<std::pair<uint32_t, std::string>> Apply(
      const absl::StatusOr<ShardAddressesResponse>& answer)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool AnySuspect() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Options options_;
  const OnMoved on_moved_;

  mutable absl::Mutex mu_;
  std::vector<std::string> addresses_ ABSL_GUARDED_BY(mu_);
  std::vector<bool> suspect_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> notes_ ABSL_GUARDED_BY(mu_);
  absl::Time last_lookup_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  uint64_t lookups_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool look_now_ ABSL_GUARDED_BY(mu_) = false;  // options_.signal was raised
  uint64_t signal_id_ = 0;                      // its subscription

  std::thread thread_;
};

}  // namespace ps

#endif  // WORKER_CLIENT_SHARD_RELOCATOR_H_
