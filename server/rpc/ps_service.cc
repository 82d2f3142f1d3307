#include "server/rpc/ps_service.h"

#include <atomic>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "common/grpc_status.h"
#include "common/status_macros.h"
#include "core/float_bytes.h"
#include "core/sparse_rows_codec.h"
#include "core/wire_codec.h"
#include "core/wire_slices.h"
#include "grpcpp/support/proto_buffer_reader.h"
#include "grpcpp/support/slice.h"
#include "server/rpc/push_decoder.h"
#include "server/rpc/request_limits.h"
#include "server/rpc/sparse_decoder.h"

namespace ps {
namespace {

// Finished messages kept for reuse: bounded in count and in the bytes
// their buffers hold, so an idle psd keeps little.
constexpr size_t kMaxPooledMessages = 16;
constexpr size_t kMaxPooledBytes = 64u << 20;

// Reply payloads shorter than this are copied into the header slice: a
// borrowed slice costs more than copying a few KiB.
constexpr size_t kCopyBelowBytes = 4096;

// Finishes `reactor` at once with `status`.
grpc::ServerUnaryReactor* Done(grpc::CallbackServerContext* ctx,
                               const absl::Status& status) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

// Parses `bytes` into `msg` (which keeps the buffers of its last use).
bool Parse(const grpc::ByteBuffer& bytes, google::protobuf::MessageLite* msg) {
  if (!bytes.Valid()) {  // no payload: the empty message
    msg->Clear();
    return true;
  }
  grpc::ByteBuffer copy(bytes);  // shares the slices; the reader consumes it
  grpc::ProtoBufferReader reader(&copy);
  return reader.status().ok() && msg->ParseFromZeroCopyStream(&reader);
}

// The slices of `bytes` (shared, not copied) and views of them.
absl::Status DumpSlices(const grpc::ByteBuffer& bytes,
                        std::vector<grpc::Slice>* slices,
                        std::vector<absl::string_view>* pieces) {
  if (bytes.Valid() && !bytes.Dump(slices).ok()) {
    return absl::InvalidArgumentError("request: unreadable message");
  }
  pieces->reserve(slices->size());
  for (const grpc::Slice& s : *slices) {
    pieces->emplace_back(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  return absl::OkStatus();
}

}  // namespace

// One PushPull or Pull call's messages. Reference-counted: the call holds
// references until the Shard called back and returned, and every reply
// slice that points into a response holds one more.
struct PsMessages {
  std::shared_ptr<PsMessagePool> pool;  // set while in use
  std::atomic<int> refs{0};
  // A PushPull's fields but its gradients, which stay in the received
  // slices (push_gradients; push_owned holds what had to be copied).
  PushPullRequest push_request;
  GradientsIn push_gradients;
  std::deque<std::string> push_owned;
  PushPullResponse push_response;
  PullRequest pull_request;
  PullResponse pull_response;
  // The reply's ChunkData payloads, shared with other replies (Shard).
  std::vector<Shard::SharedBytes> payloads;
};

class PsMessagePool : public std::enable_shared_from_this<PsMessagePool> {
 public:
  // Messages holding `refs` references, cleared but with the buffers of an
  // earlier call when one is idle.
  PsMessages* Take(int refs) {
    std::unique_ptr<PsMessages> m;
    {
      absl::MutexLock lock(&mu_);
      if (!idle_.empty()) {
        m = std::move(idle_.back().first);
        pooled_bytes_ -= idle_.back().second;
        idle_.pop_back();
      }
    }
    if (m == nullptr) m = std::make_unique<PsMessages>();
    m->pool = shared_from_this();
    m->refs.store(refs, std::memory_order_relaxed);
    return m.release();
  }

  // Drops one reference to `messages` (a PsMessages*; also gRPC's destroy
  // callback of reply slices). The last one returns them to the pool.
  static void Unref(void* messages) {
    auto* m = static_cast<PsMessages*>(messages);
    if (m->refs.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
    std::shared_ptr<PsMessagePool> pool = std::move(m->pool);
    pool->Put(std::unique_ptr<PsMessages>(m));
  }

 private:
  void Put(std::unique_ptr<PsMessages> m) {
    // Clear() keeps the strings' capacity and the repeated fields' elements.
    m->push_request.Clear();
    m->push_gradients.clear();
    m->push_owned.clear();
    m->push_response.Clear();
    m->pull_request.Clear();
    m->pull_response.Clear();
    m->payloads.clear();
    const size_t bytes =
        m->push_request.SpaceUsedLong() + m->push_response.SpaceUsedLong() +
        m->pull_request.SpaceUsedLong() + m->pull_response.SpaceUsedLong();
    absl::MutexLock lock(&mu_);
    if (idle_.size() < kMaxPooledMessages &&
        pooled_bytes_ + bytes <= kMaxPooledBytes) {
      pooled_bytes_ += bytes;
      idle_.emplace_back(std::move(m), bytes);
    }
  }

  absl::Mutex mu_;
  std::vector<std::pair<std::unique_ptr<PsMessages>, size_t>> idle_
      ABSL_GUARDED_BY(mu_);
  size_t pooled_bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

namespace {

// A reply's encoded pieces, then `head` (the fields after them), as send
// slices: borrowed ones point into `owner`, each holding a reference on it
// (owner->refs) that `unref` drops when gRPC is done with the slice.
template <typename Owner>
grpc::ByteBuffer ReplyBuffer(std::vector<WirePiece>& pieces, std::string head,
                             Owner* owner, void (*unref)(void*)) {
  return ToSendBuffer(pieces, std::move(head), [&](absl::string_view bytes) {
    owner->refs.fetch_add(1, std::memory_order_relaxed);
    // gRPC never writes through a send slice; the const_cast only fits the
    // constructor's signature.
    return grpc::Slice(const_cast<char*>(bytes.data()), bytes.size(), unref,
                       owner);
  });
}

// Writes a PushPullResponse (or, with duplicates = stale = 0, a
// PullResponse: same field 1) into `out`, byte for byte as protobuf would,
// with ChunkData.data i from m->payloads[i]; large ones as slices borrowing
// them (each slice holds a reference to `m`, which holds the payloads).
void WriteReply(const google::protobuf::RepeatedPtrField<ChunkData>& chunks,
                uint32_t duplicates, uint32_t stale, PsMessages* m,
                grpc::ByteBuffer* out) {
  std::vector<ChunkDataRef> refs;
  refs.reserve(chunks.size());
  for (int i = 0; i < chunks.size(); ++i) {
    // A delta's offsets are in the ChunkData (the codec copies them).
    const ChunkData& c = chunks[i];
    std::optional<uint64_t> base;
    if (c.has_base_version()) base = c.base_version();
    refs.push_back({c.chunk_id(), c.version(),
                    *m->payloads[static_cast<size_t>(i)],
                    static_cast<uint64_t>(c.format()), c.indices(), base});
  }
  std::string head;
  std::vector<WirePiece> pieces;
  EncodeChunkList(kReplyChunksTag, refs, kCopyBelowBytes, &head, &pieces);
  PutVarintField(kReplyDuplicatesTag, duplicates, &head);
  PutVarintField(kReplyStaleTag, stale, &head);
  *out = ReplyBuffer(pieces, std::move(head), m, &PsMessagePool::Unref);
}

// Decodes a PushPull request into `m`, its gradients left in the received
// slices (which they keep alive: BSP holds them until its step is applied).
absl::Status DecodePush(const grpc::ByteBuffer& bytes, PsMessages* m) {
  auto slices = std::make_shared<std::vector<grpc::Slice>>();
  std::vector<absl::string_view> pieces;
  PS_RETURN_IF_ERROR(DumpSlices(bytes, slices.get(), &pieces));
  return DecodePushPullRequest(pieces, slices, &m->push_request,
                               &m->push_gradients, &m->push_owned);
}

// One SparseExchange call: the decoded request and the reply's rows, which
// the reply's slices borrow. Reference-counted like PsMessages: the call
// holds two until the Shard called back and returned, and every borrowed
// reply slice one more.
struct SparseCall {
  std::atomic<int> refs{2};
  SparseRequestIn in;
  SparseReplyOut out;

  static void Unref(void* call) {
    auto* c = static_cast<SparseCall*>(call);
    if (c->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) delete c;
  }
};

// Writes the SparseExchangeResponse of `c` into `out`, byte for byte as
// protobuf would, with the ids and rows of large entries as slices
// borrowing c->in and c->out (each holding a reference to `c`).
void WriteSparseReply(SparseCall* c, grpc::ByteBuffer* out) {
  std::string head;
  std::vector<WirePiece> pieces;
  for (size_t i = 0; i < c->in.pull.size(); ++i) {
    EncodeSparseRows(kSparseReplyRowsTag, c->in.pull[i].table,
                     BytesOf(c->in.pull[i].ids), BytesOf(c->out.rows[i]),
                     kCopyBelowBytes, &head, &pieces);
  }
  PutVarintField(kSparseReplyVersionTag, c->out.version, &head);
  PutVarintField(kSparseReplyDuplicateTag, c->out.duplicate ? 1 : 0, &head);
  PutVarintField(kSparseReplyStaleTag, c->out.stale ? 1 : 0, &head);
  *out = ReplyBuffer(pieces, std::move(head), c, &SparseCall::Unref);
}

// A push the pause of a re-placement refuses waits at the shard until a
// second before the call's own deadline at the latest (Shard::PushPull's
// hold_until): the worker then still gets the UNAVAILABLE it retries on.
absl::Time PauseHoldUntil(const grpc::CallbackServerContext* ctx) {
  return absl::FromChrono(ctx->deadline()) - absl::Seconds(1);
}

}  // namespace

struct PsThreads {
  absl::Mutex mu;
  int running ABSL_GUARDED_BY(mu) = 0;
};

PsService::PsService(Shard* shard, const Security* security)
    : shard_(shard),
      security_(security),
      pool_(std::make_shared<PsMessagePool>()),
      threads_(std::make_shared<PsThreads>()) {}

PsService::~PsService() {
  absl::MutexLock l(&threads_->mu);
  threads_->mu.Await(absl::Condition(
      +[](int* running) { return *running == 0; }, &threads_->running));
}

// Every handler starts with the token check; the Shard never sees an
// unauthenticated request.
#define PS_AUTHENTICATE(ctx)                           \
  do {                                                 \
    absl::Status auth = security_->CheckToken(*(ctx)); \
    if (!auth.ok()) return Done((ctx), auth);          \
  } while (0)

grpc::ServerUnaryReactor* PsService::RegisterJob(
    grpc::CallbackServerContext* ctx, const RegisterJobRequest* req,
    RegisterJobResponse* resp) {
  PS_AUTHENTICATE(ctx);
  // Size bounds first: the Shard allocates per-chunk and per-worker state
  // before its memory budget can refuse a registration.
  if (absl::Status s = CheckRegisterJobLimits(*req); !s.ok())
    return Done(ctx, s);
  return Done(ctx, shard_->RegisterJob(*req, resp));
}

grpc::ServerUnaryReactor* PsService::DropJob(grpc::CallbackServerContext* ctx,
                                             const DropJobRequest* req,
                                             DropJobResponse*) {
  PS_AUTHENTICATE(ctx);
  return Done(ctx, shard_->DropJob(*req));
}

grpc::ServerUnaryReactor* PsService::SetMembership(
    grpc::CallbackServerContext* ctx, const SetMembershipRequest* req,
    SetMembershipResponse*) {
  PS_AUTHENTICATE(ctx);
  return Done(ctx, shard_->SetMembership(*req));
}

// The messages hold two references: one dropped by the Shard's callback
// after it finished the reactor, one when Shard::PushPull returns (the
// callback may run inside it, and the Shard may still read the request).
grpc::ServerUnaryReactor* PsService::PushPull(grpc::CallbackServerContext* ctx,
                                              const grpc::ByteBuffer* req,
                                              grpc::ByteBuffer* resp) {
  PS_AUTHENTICATE(ctx);
  PsMessages* m = pool_->Take(2);
  if (absl::Status st = DecodePush(*req, m); !st.ok()) {
    PsMessagePool::Unref(m);
    PsMessagePool::Unref(m);
    return Done(ctx, st);
  }
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  shard_->PushPull(
      m->push_request, m->push_gradients, &m->push_response,
      [reactor, resp, m](absl::Status s) {
        if (s.ok()) {
          WriteReply(m->push_response.parameters(),
                     m->push_response.duplicates(), m->push_response.stale(), m,
                     resp);
        }
        reactor->Finish(ToGrpcStatus(s));
        PsMessagePool::Unref(m);
      },
      &m->payloads, PauseHoldUntil(ctx));
  PsMessagePool::Unref(m);
  return reactor;
}

grpc::ServerUnaryReactor* PsService::Pull(grpc::CallbackServerContext* ctx,
                                          const grpc::ByteBuffer* req,
                                          grpc::ByteBuffer* resp) {
  PS_AUTHENTICATE(ctx);
  PsMessages* m = pool_->Take(2);
  if (!Parse(*req, &m->pull_request)) {
    PsMessagePool::Unref(m);
    PsMessagePool::Unref(m);
    return Done(ctx,
                absl::InvalidArgumentError("request: not a valid PullRequest"));
  }
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  shard_->Pull(
      m->pull_request, &m->pull_response,
      [reactor, resp, m](absl::Status s) {
        if (s.ok()) WriteReply(m->pull_response.parameters(), 0, 0, m, resp);
        reactor->Finish(ToGrpcStatus(s));
        PsMessagePool::Unref(m);
      },
      &m->payloads);
  PsMessagePool::Unref(m);
  return reactor;
}

grpc::ServerUnaryReactor* PsService::Push(grpc::CallbackServerContext* ctx,
                                          const PushRequest* req,
                                          PushResponse* resp) {
  PS_AUTHENTICATE(ctx);
  // `req` and `resp` stay valid until Finish.
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  shard_->Push(
      *req, resp,
      [reactor](absl::Status s) { reactor->Finish(ToGrpcStatus(s)); },
      PauseHoldUntil(ctx));
  return reactor;
}

grpc::ServerUnaryReactor* PsService::Stats(grpc::CallbackServerContext* ctx,
                                           const StatsRequest* req,
                                           ShardStats* resp) {
  PS_AUTHENTICATE(ctx);
  shard_->Stats(*req, resp);
  return Done(ctx, absl::OkStatus());
}

grpc::ServerUnaryReactor* PsService::SetTrace(grpc::CallbackServerContext* ctx,
                                              const SetTraceRequest* req,
                                              SetTraceResponse*) {
  PS_AUTHENTICATE(ctx);
  return Done(ctx, shard_->SetTrace(*req));
}

grpc::ServerUnaryReactor* PsService::SetReplicaView(
    grpc::CallbackServerContext* ctx, const SetReplicaViewRequest* req,
    SetReplicaViewResponse* resp) {
  PS_AUTHENTICATE(ctx);
  return Done(ctx, shard_->SetReplicaView(*req, resp));
}

grpc::ServerUnaryReactor* PsService::Replicate(grpc::CallbackServerContext* ctx,
                                               const ReplicateRequest* req,
                                               ReplicateResponse*) {
  PS_AUTHENTICATE(ctx);
  return Done(ctx, shard_->Replicate(*req));
}

grpc::ServerUnaryReactor* PsService::GetTrace(grpc::CallbackServerContext* ctx,
                                              const ShardTraceRequest* req,
                                              ShardTrace* resp) {
  PS_AUTHENTICATE(ctx);
  return Done(ctx, shard_->GetTrace(*req, resp));
}

grpc::ServerUnaryReactor* PsService::Reshard(grpc::CallbackServerContext* ctx,
                                             const ReshardRequest* req,
                                             ReshardResponse* resp) {
  PS_AUTHENTICATE(ctx);
  if (req->phase() != ReshardRequest::PREPARE) {
    return Done(ctx, shard_->Reshard(*req, resp));
  }
  // `req` and `resp` stay valid until Finish; the Shard until the
  // destructor saw the thread end.
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  {
    absl::MutexLock l(&threads_->mu);
    ++threads_->running;
  }
  std::thread([shard = shard_, threads = threads_, req, resp, reactor] {
    reactor->Finish(ToGrpcStatus(shard->Reshard(*req, resp)));
    absl::MutexLock l(&threads->mu);
    --threads->running;
  }).detach();
  return reactor;
}

grpc::ServerUnaryReactor* PsService::FetchChunks(
    grpc::CallbackServerContext* ctx, const FetchChunksRequest* req,
    FetchChunksResponse* resp) {
  PS_AUTHENTICATE(ctx);
  return Done(ctx, shard_->FetchChunks(*req, resp));
}

grpc::ServerUnaryReactor* PsService::SparseExchange(
    grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req,
    grpc::ByteBuffer* resp) {
  PS_AUTHENTICATE(ctx);
  auto* call = new SparseCall();
  absl::Status decoded;
  {
    std::vector<grpc::Slice> slices;
    std::vector<absl::string_view> pieces;
    decoded = DumpSlices(*req, &slices, &pieces);
    if (decoded.ok()) decoded = DecodeSparseExchangeRequest(pieces, &call->in);
  }
  if (!decoded.ok()) {
    delete call;
    return Done(ctx, decoded);
  }
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  shard_->SparseExchange(&call->in, &call->out,
                         [reactor, resp, call](absl::Status s) {
                           if (s.ok()) WriteSparseReply(call, resp);
                           reactor->Finish(ToGrpcStatus(s));
                           SparseCall::Unref(call);
                         });
  SparseCall::Unref(call);
  return reactor;
}

void ApplyTransportSettings(int max_message_bytes,
                            grpc::ServerBuilder* builder) {
  builder->SetMaxReceiveMessageSize(max_message_bytes);
  builder->SetMaxSendMessageSize(max_message_bytes);
  // Workers keep channels open across long BSP waits; allow their pings.
  builder->AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder->AddChannelArgument(
      GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 10000);
}

}  // namespace ps
