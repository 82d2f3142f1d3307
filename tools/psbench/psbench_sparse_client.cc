#include "tools/psbench/psbench_sparse_client.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/grpc_status.h"
#include "common/status_macros.h"
#include "core/sparse_ids.h"
#include "core/sparse_rows_codec.h"
#include "core/wire_slices.h"
#include "grpcpp/support/slice.h"
#include "worker/client/sparse_wire.h"

namespace ps {
namespace bench {

// One call's buffers, reused for the same (shard, piece) every step. The
// request is encoded by the worker's encoder (worker/client/sparse_wire.h)
// with the ids and the gathered gradients as slices borrowing `ids` and
// `values`; the reply's rows are scattered straight from the received
// slices.
struct SparseClient::Call {
  std::unique_ptr<grpc::ClientContext> context;
  grpc::ByteBuffer request;
  grpc::ByteBuffer response;
  absl::string_view ids;
  std::vector<float> values;
};

namespace {

absl::string_view BytesOf(const void* p, size_t n) {
  return absl::string_view(static_cast<const char*>(p), n);
}

}  // namespace

// What one Exchange shares with its calls' callbacks.
struct SparseClient::Step {
  const SparseBatch* batch = nullptr;
  const float* grads = nullptr;
  float* rows_out = nullptr;
  // [shard]: rows per piece and pieces of that shard.
  std::vector<size_t> rows_per_piece;
  std::vector<size_t> pieces;

  absl::Mutex mu;
  size_t remaining ABSL_GUARDED_BY(mu) = 0;  // pieces not yet finished
  absl::Status status ABSL_GUARDED_BY(mu);
};

SparseBatch RouteBatch(const std::vector<uint64_t>& ids, uint32_t num_shards) {
  SparseBatch b;
  b.rows = ids.size();
  b.ids.resize(num_shards);
  b.pos.resize(num_shards);
  for (size_t i = 0; i < ids.size(); ++i) {
    const uint32_t s = ShardForId(ids[i], num_shards);
    b.ids[s].push_back(ids[i]);
    b.pos[s].push_back(static_cast<uint32_t>(i));
  }
  return b;
}

SparseClient::SparseClient(const SparseClientOptions& options,
                           const Security* security)
    : options_(options), security_(security) {}

SparseClient::~SparseClient() = default;

absl::StatusOr<std::unique_ptr<SparseClient>> SparseClient::Create(
    const SparseClientOptions& options,
    const std::vector<std::string>& addresses, const Security* security) {
  if (options.dim == 0) return absl::InvalidArgumentError("dim: must be > 0");
  if (options.ranks.empty()) {
    return absl::InvalidArgumentError("ranks: at least one");
  }
  if (options.channels_per_shard < 1) {
    return absl::InvalidArgumentError("channels_per_shard: must be >= 1");
  }
  if (addresses.empty()) return absl::InvalidArgumentError("no shards");
  auto c = std::unique_ptr<SparseClient>(new SparseClient(options, security));
  for (const std::string& address : addresses) {
    c->stubs_.emplace_back();
    for (int k = 0; k < options.channels_per_shard; ++k) {
      c->stubs_.back().push_back(
          std::make_unique<grpc::GenericStub>(security->NewChannel(address)));
    }
  }
  c->steps_.assign(options.ranks.size(),
                   std::vector<uint64_t>(addresses.size(), 0));
  c->calls_by_shard_.resize(addresses.size());
  return c;
}

void SparseClient::Send(const std::shared_ptr<Step>& step, uint32_t shard,
                        size_t slot, size_t piece) {
  Call& call = *calls_by_shard_[shard][piece];
  const size_t dim = options_.dim;
  const size_t begin = piece * step->rows_per_piece[shard];
  const size_t n = std::min(step->rows_per_piece[shard],
                            step->batch->ids[shard].size() - begin);
  const uint64_t* ids = step->batch->ids[shard].data() + begin;
  const uint32_t* pos = step->batch->pos[shard].data() + begin;

  // Gather the shard's gradient rows out of batch order.
  call.values.resize(n * dim);
  for (size_t i = 0; i < n; ++i) {
    std::memcpy(call.values.data() + i * dim, step->grads + pos[i] * dim,
                dim * sizeof(float));
  }
  call.ids = BytesOf(ids, n * sizeof(uint64_t));
  SparseRequestHead head;
  head.job_id = options_.job_id;
  head.worker = options_.ranks[slot];
  head.step = ++steps_[slot][shard];
  head.push = true;
  const absl::Span<const uint64_t> id_span(ids, n);
  const SparseRowsRef grads{options_.table, id_span, call.values};
  const SparseRowsRef pull{options_.table, id_span, {}};
  // The borrowed slices point into the batch's ids and the call's values,
  // which stay untouched until the call's callback ran (a unary call's
  // callback runs once gRPC is done with its request).
  call.request = EncodeSparseRequest(head, {&grads, 1}, {&pull, 1});

  call.context = std::make_unique<grpc::ClientContext>();
  call.context->set_deadline(
      absl::ToChronoTime(absl::Now() + options_.rpc_deadline));
  security_->Authorize(call.context.get());
  calls_.fetch_add(1, std::memory_order_relaxed);
  stubs_[shard][slot % stubs_[shard].size()]->UnaryCall(
      call.context.get(), kSparseExchangeRpc, grpc::StubOptions(),
      &call.request, &call.response,
      [this, step, shard, slot, piece](grpc::Status s) {
        Done(step, shard, slot, piece, FromGrpcStatus(s));
      });
}

absl::Status SparseClient::Scatter(const Call& call, const uint32_t* pos,
                                   float* rows_out) const {
  const size_t dim = options_.dim;
  const size_t n = call.ids.size() / sizeof(uint64_t);
  std::vector<grpc::Slice> slices;
  if (call.response.Valid() && !call.response.Dump(&slices).ok()) {
    return absl::DataLossError("unreadable reply");
  }
  std::vector<absl::string_view> pieces;
  for (const grpc::Slice& sl : slices) {
    pieces.emplace_back(reinterpret_cast<const char*>(sl.begin()), sl.size());
  }
  WireReader in(pieces);
  SparseReplyView reply;
  PS_RETURN_IF_ERROR(DecodeSparseReply(&in, &reply));
  if (reply.rows.size() != 1 || reply.rows[0].ids_bytes != call.ids.size() ||
      !BytesEqual(in, reply.rows[0].ids, call.ids) ||
      reply.rows[0].values_bytes != n * dim * sizeof(float)) {
    return absl::DataLossError(absl::StrCat(
        "the reply's rows do not match the ", n, " ids asked for"));
  }
  // Scatter the pulled rows back into batch order, from the slices.
  in.Seek(reply.rows[0].values);
  for (size_t i = 0; i < n; ++i) {
    in.Read(reinterpret_cast<char*>(rows_out + size_t{pos[i]} * dim),
            dim * sizeof(float));
  }
  return absl::OkStatus();
}

void SparseClient::Done(const std::shared_ptr<Step>& step, uint32_t shard,
                        size_t slot, size_t piece, const absl::Status& status) {
  absl::Status s = status;
  const Call& call = *calls_by_shard_[shard][piece];
  if (s.ok()) {
    const size_t begin = piece * step->rows_per_piece[shard];
    s = Scatter(call, step->batch->pos[shard].data() + begin, step->rows_out);
    if (!s.ok()) {
      s = absl::DataLossError(absl::StrCat("shard ", shard, ": ", s.message()));
    }
  }
  const size_t next = piece + options_.ranks.size();
  size_t finished = 1;
  if (s.ok() && next < step->pieces[shard]) {
    Send(step, shard, slot, next);
  } else if (!s.ok()) {
    // The chain's later pieces will not be sent.
    for (size_t p = next; p < step->pieces[shard]; p += options_.ranks.size())
      ++finished;
  }
  absl::MutexLock l(&step->mu);
  if (!s.ok() && step->status.ok()) {
    step->status = absl::Status(
        s.code(),
        absl::StrCat("SparseExchange to shard ", shard, ": ", s.message()));
  }
  step->remaining -= finished;
}

absl::Status SparseClient::Exchange(const SparseBatch& batch,
                                    absl::Span<const float> grads,
                                    absl::Span<float> rows_out) {
  const size_t dim = options_.dim;
  if (grads.size() != batch.rows * dim || rows_out.size() != batch.rows * dim) {
    return absl::InvalidArgumentError(absl::StrCat(
        "grads and rows_out: want ", batch.rows * dim, " floats each, got ",
        grads.size(), " and ", rows_out.size()));
  }
  if (batch.ids.size() != stubs_.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch: routed to ", batch.ids.size(),
                     " shards, the job has ", stubs_.size()));
  }
  auto shared = std::make_shared<Step>();
  Step& step = *shared;
  step.batch = &batch;
  step.grads = grads.data();
  step.rows_out = rows_out.data();
  const size_t row_bytes = sizeof(uint64_t) + dim * sizeof(float);
  const size_t max_rows =
      std::max<size_t>(1, options_.request_bytes / row_bytes);
  size_t total = 0;
  for (size_t s = 0; s < stubs_.size(); ++s) {
    const size_t n = batch.ids[s].size();
    // Near-even pieces (n = 9, max 4: 3 + 3 + 3, not 4 + 4 + 1); counted
    // again from the rounded size so that no piece is empty.
    const size_t calls = (n + max_rows - 1) / max_rows;
    const size_t per = calls == 0 ? 0 : (n + calls - 1) / calls;
    const size_t pieces = per == 0 ? 0 : (n + per - 1) / per;
    step.rows_per_piece.push_back(per);
    step.pieces.push_back(pieces);
    while (calls_by_shard_[s].size() < pieces) {
      calls_by_shard_[s].push_back(std::make_unique<Call>());
    }
    total += pieces;
  }
  {
    absl::MutexLock l(&step.mu);
    step.remaining = total;
  }
  for (uint32_t s = 0; s < stubs_.size(); ++s) {
    for (size_t slot = 0; slot < options_.ranks.size(); ++slot) {
      if (slot < step.pieces[s]) Send(shared, s, slot, slot);
    }
  }
  absl::MutexLock l(&step.mu);
  auto all_done = [&step]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(step.mu) {
    return step.remaining == 0;
  };
  step.mu.Await(absl::Condition(&all_done));
  return step.status;
}

}  // namespace bench
}  // namespace ps
