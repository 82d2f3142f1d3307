// One psbench worker's sparse traffic: a step pushes the gradient rows of a
// batch of unique ids to the shards that own them (core/sparse_ids.h) and
// pulls the same rows back, in SparseExchange calls (proto/ps.proto) of at
// most `request_bytes` each, pipelined per shard.
//
//   SparseClientOptions o;
//   o.job_id = "bench-sparse";  o.table = "emb";  o.dim = 16;
//   o.ranks = {0, 1, 2, 3};     // 4 calls in flight per shard
//   PS_ASSIGN_OR_RETURN(auto client, SparseClient::Create(o, addresses, &sec));
//   SparseBatch batch = RouteBatch(ids, addresses.size());
//   PS_RETURN_IF_ERROR(client->Exchange(batch, grads, absl::MakeSpan(rows)));
//
// ASP only: each in-flight slot is its own worker rank whose calls to one
// shard are sequential with increasing steps, so the shard applies every
// push exactly once (a (worker, step) at or below the last is a duplicate
// under ASP, and two calls of one rank on two connections may overtake each
// other). The client does per step what a worker's sparse push would: gathers
// each shard's gradient rows into its requests and scatters the pulled rows
// back into batch order.
#ifndef TOOLS_PSBENCH_PSBENCH_SPARSE_CLIENT_H_
#define TOOLS_PSBENCH_PSBENCH_SPARSE_CLIENT_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/defaults.h"
#include "common/security.h"
#include "grpcpp/generic/generic_stub.h"

namespace ps {
namespace bench {

struct SparseClientOptions {
  std::string job_id;
  std::string table;
  uint32_t dim = 0;
  // Worker ranks, one per call in flight per shard (at least one).
  std::vector<uint32_t> ranks;
  // Ids plus values of one call (one direction), at most: a shard's rows of
  // a step are split into ceil(bytes / request_bytes) calls. A call holds
  // at least one row; it must fit the 4 MiB message limit.
  size_t request_bytes = kDefaultMaxRequestBytes;
  int channels_per_shard = kDefaultChannelsPerShard;  // TCP connections
  absl::Duration rpc_deadline = absl::Seconds(60);
};

// A batch of unique ids routed to their shards: ids[s] the ids shard s
// owns, pos[s][i] the index of ids[s][i] in the batch.
struct SparseBatch {
  uint64_t rows = 0;
  std::vector<std::vector<uint64_t>> ids;
  std::vector<std::vector<uint32_t>> pos;
};
SparseBatch RouteBatch(const std::vector<uint64_t>& ids, uint32_t num_shards);

// Thread-compatible: one thread calls Exchange at a time (the calls it makes
// run concurrently).
class SparseClient {
 public:
  // Connects to `addresses` (one per shard, in shard order). Borrows
  // `security`, which must outlive the client. InvalidArgument for bad
  // options.
  static absl::StatusOr<std::unique_ptr<SparseClient>> Create(
      const SparseClientOptions& options,
      const std::vector<std::string>& addresses, const Security* security);
  ~SparseClient();

  // One step: pushes `grads` (batch.rows x dim, batch order) and pulls the
  // same rows into `rows_out` (batch.rows x dim, batch order). Blocks until
  // every call is answered. The first failed call's error (the later calls
  // of its chain are not sent), or DataLoss when a reply's rows do not match
  // the ids asked for.
  absl::Status Exchange(const SparseBatch& batch, absl::Span<const float> grads,
                        absl::Span<float> rows_out);

  // Calls sent so far.
  uint64_t calls() const { return calls_.load(std::memory_order_relaxed); }

 private:
  struct Call;
  struct Step;

  SparseClient(const SparseClientOptions& options, const Security* security);
  // Sends piece `piece` of shard `shard` on slot `slot`; its completion
  // sends the slot's next piece of that shard.
  // The callbacks share `step`: the last one may finish after Exchange
  // returned.
  void Send(const std::shared_ptr<Step>& step, uint32_t shard, size_t slot,
            size_t piece);
  void Done(const std::shared_ptr<Step>& step, uint32_t shard, size_t slot,
            size_t piece, const absl::Status& status);
  // Checks `call`'s reply against its ids and copies its rows to
  // rows_out[pos[i] * dim, ...), read in place from the received slices.
  absl::Status Scatter(const Call& call, const uint32_t* pos,
                       float* rows_out) const;

  const SparseClientOptions options_;
  const Security* const security_;
  // [shard][channel]
  std::vector<std::vector<std::unique_ptr<grpc::GenericStub>>> stubs_;
  // [slot][shard]: the slot's last step sent to the shard.
  std::vector<std::vector<uint64_t>> steps_;
  // [shard][piece], reused across steps (buffers keep their capacity).
  std::vector<std::vector<std::unique_ptr<Call>>> calls_by_shard_;
  std::atomic<uint64_t> calls_{0};
};

}  // namespace bench
}  // namespace ps

#endif  // TOOLS_PSBENCH_PSBENCH_SPARSE_CLIENT_H_
