// ShardDirectory: where every shard is now, as the coordinator knows it.
// It starts from the addresses resolved when the coordinator started;
// Current() re-reads the shards' address files (a shard restarted at a new
// port or host, as under a scheduler, rewrites its file) and keeps, per
// shard, the latest good address. A file that is missing, unreadable or
// does not hold a "host:port" leaves that shard's last good address in
// place and is reported as a problem naming the field and the file. A shard
// given by a fixed `address` in the cluster file never moves.
//
//   PS_ASSIGN_OR_RETURN(std::unique_ptr<ShardDirectory> directory,
//                       ShardDirectory::Create(cluster, resolved, options));
//   ShardDirectory::Snapshot now = directory->Current();  // files re-read
//   stub = NewStub(now.addresses[1]);
//
// Thread-safe. Current() reads the files at most once per refresh interval
// for all its callers together (the others get the last reading); it never
// waits for a file to appear, so it returns within one read of each file.
#ifndef SERVER_COORDINATOR_SHARD_DIRECTORY_H_
#define SERVER_COORDINATOR_SHARD_DIRECTORY_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/config.h"
#include "common/defaults.h"

namespace ps {

class ShardDirectory {
 public:
  struct Options {
    // The files are read again at most this often
    // (PsdConfig.shard_address_refresh_ms).
    absl::Duration refresh_interval =
        absl::Milliseconds(kDefaultShardAddressRefreshMs);
    // Time source. Unset: absl::Now. Tests inject a fake.
    std::function<absl::Time()> clock;
  };

  struct Snapshot {
    std::vector<std::string> addresses;  // by shard id
    // The last reading's unusable files: "shards[1].address_file F: why".
    std::vector<std::string> problems;
  };

  // `resolved`: "host:port" by shard id, as ResolveShardAddresses gave at
  // start. INVALID_ARGUMENT unless it holds one per shard of `cluster`.
  static absl::StatusOr<std::unique_ptr<ShardDirectory>> Create(
      LoadedCluster cluster, std::vector<std::string> resolved,
      Options options);

  ShardDirectory(const ShardDirectory&) = delete;
  ShardDirectory& operator=(const ShardDirectory&) = delete;

  // The addresses now, the files re-read if the last reading is older than
  // the refresh interval. Logs each move once ("shard 1 moved: A -> B").
  Snapshot Current() ABSL_LOCKS_EXCLUDED(mu_);
  // Current().addresses[shard]; "" for a shard out of range.
  std::string Address(uint32_t shard) ABSL_LOCKS_EXCLUDED(mu_);
  uint32_t num_shards() const { return num_shards_; }

 private:
  ShardDirectory(LoadedCluster cluster, std::vector<std::string> resolved,
                 Options options);
  void Refresh(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const LoadedCluster cluster_;
  const Options options_;
  const uint32_t num_shards_;

  absl::Mutex mu_;
  Snapshot current_ ABSL_GUARDED_BY(mu_);
  absl::Time last_read_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  // The problems last logged, so that a file stuck bad is logged once.
  std::vector<std::string> logged_problems_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ps

#endif  // SERVER_COORDINATOR_SHARD_DIRECTORY_H_
