// SparseClient: what the trainer needs from the shards' sparse embedding
// tables (JobSpec.tables): one exchange per step that pushes this worker's
// gradient rows and pulls the rows the next batch reads. Transport-free;
// GrpcSparseClient talks SparseExchange (proto/ps.proto) to the psd shards,
// worker/client/testing/fake_sparse_client.h is an in-process stand-in.
//
//   PS_ASSIGN_OR_RETURN(std::unique_ptr<GrpcSparseClient> client,
//                       GrpcSparseClient::Create(options, assignment, &sec));
//   SparseTableStep emb;
//   emb.table = "emb";
//   emb.push_ids = grad_ids;          // this step's rows and their gradients
//   emb.push_grads = grads;           // push_ids.size() x dim
//   emb.pull_ids = next_ids;          // the rows the next batch reads
//   emb.pull_rows = absl::MakeSpan(rows);  // pull_ids.size() x dim, written
//   PS_RETURN_IF_ERROR(client->Exchange(t, /*push=*/true, {&emb, 1}));
//
// Overlapping a step's exchange with compute: Start takes the same step and
// returns a handle (worker/client/request_handle.h), as AsyncPsClient's
// Start does; Wait collects the step's status, Cancel ends it early, and an
// optional `done` runs once it is over. Exchange is Start plus Wait.
//
//   SparseStep s{t, true, {emb}};
//   RequestHandle h = client->Start(std::move(s));
//   ... dense forward/backward ...
//   PS_RETURN_IF_ERROR(client->Wait(h, absl::Now() + absl::Seconds(60)));
//
// Consistency (the shard's rules, server/sparse/job_tables.h): with `push`,
// the rows pulled are those after step `step` (BSP: version >= step + 1);
// without, those before it (BSP: version >= step). Under BSP every worker
// must push to every shard each step, so a step with push sends a request to
// EVERY shard, also those that own none of its ids. A retried (worker, step)
// push is answered as a duplicate and not applied twice.
#ifndef WORKER_CLIENT_SPARSE_CLIENT_H_
#define WORKER_CLIENT_SPARSE_CLIENT_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/security.h"
#include "grpcpp/generic/generic_stub.h"
#include "proto/coordinator.pb.h"
#include "proto/job.pb.h"
#include "worker/client/ps_client_options.h"
#include "worker/client/request_handle.h"
#include "worker/client/retry_policy.h"
#include "worker/client/shard_channels.h"
#include "worker/client/sparse_split.h"
#include "worker/client/sparse_step.h"
#include "worker/client/sparse_wire.h"

namespace ps {

// Cumulative counters.
struct SparseClientStats {
  uint64_t steps = 0;           // steps started with valid input
  uint64_t requests = 0;        // SparseExchange attempts
  uint64_t retries = 0;         // attempts after UNAVAILABLE
  uint64_t rows_pushed = 0;     // ids pushed (with repeats), per shard reply
  uint64_t rows_pulled = 0;     // ids pulled (with repeats), per shard reply
  uint64_t bytes_sent = 0;      // serialized requests, every attempt
  uint64_t bytes_received = 0;  // serialized replies
  uint64_t duplicates = 0;      // replies saying the push was already there
  uint64_t stale = 0;           // BSP: the step completed without this push
  // Shard calls too big for one message, sent in parts, and those parts.
  uint64_t split_calls = 0;
  uint64_t parts = 0;
};

// Thread-safe: any thread may Start, Wait, Cancel and Detach; steps may
// overlap (e.g. the next step's pull-only exchange beside this step's
// compute).
class SparseClient {
 public:
  virtual ~SparseClient() = default;

  // Starts the exchange without blocking on the network and returns its
  // handle: give it to exactly one of Wait (until it returns other than
  // DEADLINE_EXCEEDED) or Detach. Bad input ends the step at once with
  // kInvalidArgument, nothing sent.
  virtual RequestHandle Start(SparseStep s) = 0;
  // Blocks until the step is over (its `done` ran) or `deadline` passes.
  // Over: returns its status and forgets the handle. Deadline first:
  // DEADLINE_EXCEEDED; the step carries on. An unknown handle:
  // kInvalidArgument.
  absl::Status Wait(RequestHandle handle,
                    absl::Time deadline = absl::InfiniteFuture());
  // Ends the step early: its calls on the wire are cancelled, and its
  // status becomes CANCELLED unless it was already over. Does not block.
  virtual void Cancel(RequestHandle handle) = 0;
  // Nobody will Wait: the handle is forgotten once the step is over.
  void Detach(RequestHandle handle);

  // Start, then Wait. Every RPC attempt has a deadline and the retries are
  // bounded, so this returns in bounded time.
  absl::Status Exchange(uint64_t step, bool push,
                        absl::Span<const SparseTableStep> tables);

  virtual SparseClientStats stats() const = 0;

 protected:
  // The handles of the steps: an implementation opens one in Start and
  // closes it once the step's `done` ran.
  RequestTracker& tracker() { return tracker_; }

 private:
  RequestTracker tracker_;
};

// The SparseClient of the psd shards. Each step is split by
// ShardForId (core/sparse_ids.h) into one SparseExchange per shard, all sent
// at once; a shard's call that fails UNAVAILABLE is retried with exponential
// backoff (initial_backoff doubling up to max_backoff, at most max_attempts
// attempts) with the same (worker, step) and attempt + 1. Any other error,
// or the last attempt's, ends the step with that code and a message naming
// the step, the shard and its address; the step's other calls are
// cancelled. Every attempt has a deadline (worker/client/retry_policy.h,
// StepDeadlineRule::kWaitingModes): rpc_deadline under ASP, at least the
// job's step deadline + 5 s under BSP/SSP (so the shard's own error, which
// names the missing workers, arrives first). Requests are hand-encoded and
// replies read in place (worker/client/sparse_wire.h). Pulled rows are copied
// into pull_rows on the network threads, each shard's disjoint positions by
// its own reply. A shard's request (or reply) that would not fit
// max_message_bytes is sent as parts that do (worker/client/sparse_split.h,
// SparseExchangeRequest.part/parts), each retried on its own with the same
// (worker, step, part); the shard applies the step once, when every part
// is in. Only a single row too big for a message is kInvalidArgument,
// nothing sent.
// Of PsClientOptions it uses rpc_deadline, max_attempts, initial_backoff,
// max_backoff, max_message_bytes, channels_per_shard (steps alternate over
// a shard's channels), and locate_shards and locate_interval: as the dense
// client does, a shard that keeps failing UNAVAILABLE is looked for at the
// coordinator (worker/client/shard_channels.h) and the retries go to its new
// address, with the same (worker, step); the last attempt's error then
// carries what the coordinator said about the shard.
//
// Life of one shard's call (Start sends them all):
//
//   Start --> on the wire --reply--> ended (rows scattered)
//                ^    |
//                |    +--UNAVAILABLE, attempts left--> backoff --+
//                +------------(retry thread, attempt + 1)--------+
//   Cancel, a sibling failed, client destroyed: on the wire --> TryCancel;
//   backoff --> ended.   Every call ended --> done(status) --> Wait returns.
class GrpcSparseClient final : public SparseClient {
 public:
  // `security` is borrowed and must outlive the client. kInvalidArgument
  // for an assignment without tables, with a table of dim 0, or whose
  // shard_addresses do not match placement.num_shards.
  static absl::StatusOr<std::unique_ptr<GrpcSparseClient>> Create(
      const PsClientOptions& options, const Assignment& assignment,
      const Security* security);
  // Cancels the steps not yet over and blocks until each `done` ran.
  ~GrpcSparseClient() override;

  RequestHandle Start(SparseStep s) override;
  void Cancel(RequestHandle handle) override;
  SparseClientStats stats() const override;

  uint32_t num_shards() const { return num_shards_; }

 private:
  struct Step;
  struct Call;
  struct IdRoute;

  GrpcSparseClient(const PsClientOptions& options, const Assignment& assignment,
                   const Security* security);

  // Splits `step` into its calls (one per shard that gets one): routes each
  // table's ids to their shards and packs them into the calls' requests;
  // fails kInvalidArgument if one would not fit a message.
  absl::Status Plan(Step* step, const std::vector<int>& table_index) const;
  // The call of `step` to `shard`, made on first use (`by_shard` caches).
  Call* CallTo(Step* step, uint32_t shard, std::vector<Call*>* by_shard) const;
  // Packs the pushed rows of step entry `entry`, routed by `route`.
  void PackPush(Step* step, size_t entry, const IdRoute& route,
                std::vector<Call*>* by_shard) const;
  // Packs the pulled ids of step entry `entry`, and where each goes back.
  void PackPull(Step* step, size_t entry, const IdRoute& route,
                std::vector<Call*>* by_shard) const;
  // Splits each call whose request or reply would not fit a message into
  // parts that do (kInvalidArgument if one row does not).
  absl::Status CheckFits(Step* step) const;
  // The rows of `c`, moved out, as sparse_split.h cuts them.
  SparseShardRows RowsOf(Call* c) const;
  // Part `part` of `parts` of `whole`'s rows, as a call of its own.
  std::unique_ptr<Call> PartCall(const Call& whole, SparseShardRows rows,
                                 size_t part, size_t parts) const;
  // Sets up the next attempt of `call` (new context, attempt + 1, counts).
  void ArmLocked(Call* call) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Puts an armed call on the wire. Never under mu_: gRPC may run the
  // callback before returning.
  void Send(Call* call);
  void OnDone(Call* call, const grpc::Status& grpc_status);
  // The request's scalar fields for the call's current attempt.
  SparseRequestHead HeadOf(const Call& c) const;
  // Checks a reply and copies its rows into the caller's pull_rows, read in
  // place from the reply's slices (worker/client/sparse_wire.h).
  absl::Status Scatter(Call* call) const;
  // What a locked section leaves to do once mu_ is released.
  struct Outcome;
  // Ends `call`; a first error cancels its siblings.
  void EndCallLocked(Call* call, absl::Status status, Outcome* outcome)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ends the calls waiting in backoff and marks those on the wire to be
  // cancelled.
  void CancelCallsLocked(Step* step, Outcome* outcome)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `step` has no open call: moves it from steps_ to `outcome`.
  void TakeOverLocked(Step* step, Outcome* outcome)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Cancels, then runs `done` of each step that is over and forgets it.
  // Not under mu_.
  void Settle(Outcome outcome);
  void RetryLoop();
  // `shard` moved (ShardChannels switched it): later attempts go there, and
  // the calls waiting out a backoff for the old address go now.
  void OnShardMoved(uint32_t shard) ABSL_LOCKS_EXCLUDED(mu_);

  const PsClientOptions options_;
  const Security* const security_;
  const JobSpec spec_;  // for the tables' names, dims and bounds
  const std::string job_id_;
  const uint32_t rank_;
  const RetryPolicy retry_;
  const uint32_t num_shards_;
  // The shards that hold rows (Placement.table_shards; every shard when
  // the placement names none), and the placement's epoch, sent with every
  // request.
  const std::vector<uint32_t> owners_;
  const uint64_t placement_epoch_;

  mutable absl::Mutex mu_;
  // By handle id.
  absl::flat_hash_map<uint64_t, std::unique_ptr<Step>> steps_
      ABSL_GUARDED_BY(mu_);
  std::vector<Call*> backoff_ ABSL_GUARDED_BY(mu_);
  // Steps whose `done` has not yet returned.
  int active_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool quit_ ABSL_GUARDED_BY(mu_) = false;  // the retry thread returns
  bool retry_wake_ ABSL_GUARDED_BY(mu_) = false;
  SparseClientStats stats_ ABSL_GUARDED_BY(mu_);

  std::thread retry_thread_;
  // Last: its relocator thread calls OnShardMoved; the destructor stops it
  // once no call is left.
  std::unique_ptr<ShardChannels<grpc::GenericStub>> channels_;
};

}  // namespace ps

#endif  // WORKER_CLIENT_SPARSE_CLIENT_H_
