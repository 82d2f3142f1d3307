// GrpcChunkFetcher: a re-placement's PREPARE fetching chunk states from the
// shards that hold them (Shard::FetchChunks on the other psd) over gRPC, one
// channel per address, kept.
//
//   GrpcChunkFetcher fetcher(&security);
//   shard.SetChunkFetcher([&](const std::string& a,
//                             const FetchChunksRequest& r, absl::Time d,
//                             FetchChunksResponse* out) {
//     return fetcher.Fetch(a, r, d, out);
//   });
//
// Thread-safe. Fetch blocks up to its deadline.
#ifndef SERVER_RPC_CHUNK_FETCHER_H_
#define SERVER_RPC_CHUNK_FETCHER_H_

#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/security.h"
#include "proto/ps.grpc.pb.h"

namespace ps {

class GrpcChunkFetcher {
 public:
  // `security` is borrowed and must outlive this. Answers up to
  // `max_message_bytes` are accepted (the other psd's max_message_bytes).
  GrpcChunkFetcher(const Security* security, int max_message_bytes)
      : security_(security), max_message_bytes_(max_message_bytes) {}

  // The other shard's answer, or its error (UNAVAILABLE for an empty
  // address, DEADLINE_EXCEEDED past `deadline`).
  absl::Status Fetch(const std::string& address, const FetchChunksRequest& req,
                     absl::Time deadline, FetchChunksResponse* resp)
      ABSL_LOCKS_EXCLUDED(mu_);

 private:
  const Security* const security_;
  const int max_message_bytes_;
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<ParameterServer::Stub>>
      stubs_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ps

#endif  // SERVER_RPC_CHUNK_FETCHER_H_
