#include "worker/ps_client.h"

#include <algorithm>
#include <cstring>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/grpc_status.h"
#include "core/wire_codec.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "tensor payloads are little-endian float32");

namespace ps {
namespace {

// Full method names of proto/ps.proto's ParameterServer service.
const char kPushPullMethod[] = "/ps.ParameterServer/PushPull";
const char kPullMethod[] = "/ps.ParameterServer/Pull";

// Reads a message spread over gRPC slices, front to back, with marks to
// come back to a position (a ChunkData's data is copied once its chunk_id,
// which may follow it on the wire, is known).
class SliceReader {
 public:
  struct Mark {
    size_t slice = 0, offset = 0, position = 0;
  };

  explicit SliceReader(const std::vector<grpc::Slice>* slices)
      : slices_(*slices) {
    Normalize();
  }

  size_t position() const { return at_.position; }
  bool done() const { return at_.slice == slices_.size(); }
  Mark mark() const { return at_; }
  void Seek(const Mark& m) { at_ = m; }

  bool ReadVarint(uint64_t* v) {
    *v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (done()) return false;
      const uint8_t b = slices_[at_.slice].begin()[at_.offset];
      Advance(1);
      *v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if ((b & 0x80) == 0) return true;
    }
    return false;
  }

  // Copies (dst != nullptr) or skips the next n bytes.
  bool Read(char* dst, size_t n) {
    while (n > 0) {
      if (done()) return false;
      const grpc::Slice& s = slices_[at_.slice];
      const size_t k = std::min(n, s.size() - at_.offset);
      if (dst != nullptr) {
        std::memcpy(dst, s.begin() + at_.offset, k);
        dst += k;
      }
      Advance(k);
      n -= k;
    }
    return true;
  }

  // Skips a field of `wire_type` whose tag was just read.
  bool SkipField(uint32_t wire_type) {
    uint64_t n = 0;
    switch (wire_type) {
      case kVarint:
        return ReadVarint(&n);
      case kFixed64:
        return Read(nullptr, 8);
      case kLengthDelimited:
        return ReadVarint(&n) && Read(nullptr, n);
      case kFixed32:
        return Read(nullptr, 4);
      default:  // groups (3, 4) are not in proto3 messages
        return false;
    }
  }

 private:
  void Advance(size_t n) {
    at_.offset += n;
    at_.position += n;
    Normalize();
  }
  // Keeps `at_` on a byte that exists (or at the end).
  void Normalize() {
    while (at_.slice < slices_.size() &&
           at_.offset == slices_[at_.slice].size()) {
      ++at_.slice;
      at_.offset = 0;
    }
  }

  const std::vector<grpc::Slice>& slices_;
  Mark at_;
};

}  // namespace

// One request to one shard, across its retries. Owned by Exchange();
// gRPC callbacks borrow it until OnDone.
struct PsClient::Call {
  size_t group = 0;
  uint32_t shard = 0;
  bool push = false;
  uint64_t step = 0;
  const float* gradient = nullptr;  // push: the caller's, borrowed
  int attempt = 0;
  absl::Time retry_at = absl::InfinitePast();
  bool finished = false;  // no more attempts: `status` is final
  absl::Status status;
  std::unique_ptr<grpc::ClientContext> context;
  grpc::ByteBuffer request;   // PushPullRequest or PullRequest
  grpc::ByteBuffer response;  // PushPullResponse or PullResponse
  absl::Span<float> params;   // where replies land
};

absl::StatusOr<std::unique_ptr<PsClient>> PsClient::Create(
    const PsClientOptions& options, const Assignment& assignment,
    const Security* security) {
  const Placement& placement = assignment.placement();
  const JobSpec& spec = assignment.spec();
  if (placement.num_shards() == 0 ||
      assignment.shard_addresses_size() !=
          static_cast<int>(placement.num_shards())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "assignment.shard_addresses: ", assignment.shard_addresses_size(),
        " addresses for ", placement.num_shards(), " shards"));
  }
  auto client =
      std::unique_ptr<PsClient>(new PsClient(options, assignment, security));
  // Flat offset of every tensor, in spec order (the model's layout).
  absl::flat_hash_map<std::string, std::pair<size_t, size_t>> tensor_range;
  size_t total = 0;
  for (const TensorSpec& t : spec.tensors()) {
    size_t n = 1;
    for (uint64_t d : t.shape()) n *= d;
    tensor_range[t.name()] = {total, n};
    total += n;
  }
  client->num_parameters_ = total;
  std::vector<size_t> covered_per_tensor(spec.tensors_size(), 0);
  size_t covered = 0;
  for (int i = 0; i < placement.chunks_size(); ++i) {
    const ChunkPlacement& c = placement.chunks(i);
    auto it = tensor_range.find(c.tensor());
    if (c.chunk_id() != static_cast<uint32_t>(i) || it == tensor_range.end() ||
        c.offset() + c.length() > it->second.second ||
        c.shard() >= placement.num_shards()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "placement.chunks[", i, "]: does not fit the job's tensors"));
    }
    client->chunks_.push_back(
        {c.chunk_id(), c.shard(), it->second.first + c.offset(), c.length()});
    covered += c.length();
  }
  if (covered != total) {
    return absl::InvalidArgumentError(absl::StrCat(
        "placement: covers ", covered, " of ", total, " parameters"));
  }
  // Group each shard's chunks into requests of at most max_request_bytes.
  for (uint32_t s = 0; s < placement.num_shards(); ++s) {
    size_t bytes = 0;
    for (size_t i = 0; i < client->chunks_.size(); ++i) {
      const Chunk& c = client->chunks_[i];
      if (c.shard != s) continue;
      size_t b = c.length * sizeof(float);
      if (client->groups_.empty() || client->group_shard_.back() != s ||
          bytes + b > options.max_request_bytes) {
        client->groups_.emplace_back();
        client->group_shard_.push_back(s);
        bytes = 0;
      }
      client->groups_.back().push_back(i);
      bytes += b;
    }
  }
  // A shard's requests take its channels in turn.
  const int channels = std::max(1, options.channels_per_shard);
  std::vector<int> next_channel(placement.num_shards(), 0);
  for (uint32_t s : client->group_shard_) {
    client->group_channel_.push_back(next_channel[s]);
    next_channel[s] = (next_channel[s] + 1) % channels;
  }
  client->versions_.assign(client->chunks_.size(), 0);
  for (uint32_t s = 0; s < placement.num_shards(); ++s) {
    client->stubs_.emplace_back();
    for (int c = 0; c < channels; ++c) {
      // NewChannel gives every channel its own connection (see
      // common/security.h), so these do not share one TCP stream.
      client->stubs_.back().push_back(
          std::make_unique<grpc::GenericStub>(security->NewChannel(
              assignment.shard_addresses(s), options.max_message_bytes)));
    }
  }
  return client;
}

PsClient::PsClient(const PsClientOptions& options, const Assignment& assignment,
                   const Security* security)
    : options_(options),
      security_(security),
      job_id_(assignment.job_id()),
      rank_(assignment.rank()),
      mode_(assignment.spec().consistency().mode()) {
  uint32_t step_deadline_ms =
      assignment.spec().consistency().step_deadline_ms();
  wait_deadline_ =
      std::max(options.rpc_deadline,
               absl::Milliseconds(step_deadline_ms) + absl::Seconds(5));
  absl::MutexLock lock(&mu_);
  inflight_.assign(assignment.placement().num_shards(), 0);
}

PsClientStats PsClient::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

absl::Status PsClient::Pull(uint64_t step, absl::Span<float> params) {
  return Exchange(step, nullptr, params);
}

absl::Status PsClient::PushPull(uint64_t step, absl::Span<const float> gradient,
                                absl::Span<float> params) {
  if (gradient.size() != num_parameters_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "gradient: ", gradient.size(), " floats, model has ", num_parameters_));
  }
  return Exchange(step, gradient.data(), params);
}

void PsClient::ReleaseBorrowed(void* client) {
  PsClient* self = static_cast<PsClient*>(client);
  absl::MutexLock lock(&self->borrow_mu_);
  self->borrowed_--;
}

void PsClient::Encode(Call* call) {
  const std::vector<size_t>& group = groups_[call->group];
  if (!call->push) {
    PullRequest r;
    r.set_job_id(job_id_);
    r.set_worker(rank_);
    r.set_step(call->step);
    r.set_min_version(mode_ == BSP ? call->step : 0);
    for (size_t i : group) r.add_chunk_ids(chunks_[i].id);
    grpc::Slice slice(r.SerializeAsString());
    call->request = grpc::ByteBuffer(&slice, 1);
    return;
  }
  // PushPullRequest: small copied slices for the fields and the ChunkData
  // headers, each followed by a slice borrowing that chunk's gradient.
  std::vector<grpc::Slice> slices;
  slices.reserve(2 * group.size() + 1);
  std::string head;
  if (!job_id_.empty()) {
    head.push_back(static_cast<char>(kRequestJobIdTag));
    PutVarint(job_id_.size(), &head);
    head += job_id_;
  }
  PutVarintField(kRequestWorkerTag, rank_, &head);
  PutVarintField(kRequestStepTag, call->step, &head);
  PutVarintField(kRequestAttemptTag, static_cast<uint64_t>(call->attempt),
                 &head);
  int borrowed = 0;
  for (size_t i : group) {
    const Chunk& c = chunks_[i];
    const size_t bytes = c.length * sizeof(float);
    PutChunkDataHead(kRequestGradientsTag, c.id, versions_[c.id], bytes, &head);
    if (bytes == 0) continue;  // proto3 leaves empty bytes off the wire
    slices.emplace_back(head);
    head.clear();
    // gRPC never writes through a send slice; the const_cast only fits
    // the constructor's signature.
    slices.emplace_back(const_cast<float*>(call->gradient + c.flat_offset),
                        bytes, &PsClient::ReleaseBorrowed, this);
    ++borrowed;
  }
  if (!head.empty()) slices.emplace_back(head);
  {
    absl::MutexLock lock(&borrow_mu_);
    borrowed_ += borrowed;
  }
  call->request = grpc::ByteBuffer(slices.data(), slices.size());
}

void PsClient::Issue(Call* call) {
  call->attempt++;
  call->context = std::make_unique<grpc::ClientContext>();
  call->context->set_deadline(absl::ToChronoTime(absl::Now() + wait_deadline_));
  security_->Authorize(call->context.get());
  // Replaces (and releases) the previous attempt's request.
  Encode(call);
  inflight_[call->shard]++;
  outstanding_++;
  stats_.requests++;
  if (call->attempt > 1) stats_.retries++;
  stats_.bytes_sent += call->request.Length();
  call->response.Clear();
  grpc::GenericStub* stub =
      stubs_[call->shard][group_channel_[call->group]].get();
  stub->UnaryCall(call->context.get(),
                  call->push ? kPushPullMethod : kPullMethod,
                  grpc::StubOptions(), &call->request, &call->response,
                  [this, call](grpc::Status s) { OnDone(call, std::move(s)); });
}

absl::Status PsClient::Decode(Call* call, uint64_t* received) {
  const std::vector<size_t>& group = groups_[call->group];
  auto lost = [call](const std::string& what) {
    return absl::DataLossError(
        absl::StrCat("shard ", call->shard, " returned ", what));
  };
  std::vector<grpc::Slice> slices;
  if (call->response.Valid() && !call->response.Dump(&slices).ok()) {
    return lost("an unreadable reply");
  }
  SliceReader in(&slices);
  size_t next = 0;  // index into `group` of the next expected chunk
  while (!in.done()) {
    uint64_t tag = 0;
    if (!in.ReadVarint(&tag)) return lost("a malformed reply (tag)");
    const uint32_t field = static_cast<uint32_t>(tag >> 3), wire = tag & 7;
    if (field != kReplyChunksField || wire != kLengthDelimited) {
      // PushPullResponse.duplicates / stale and any unknown field.
      if (!in.SkipField(wire)) return lost("a malformed reply (field)");
      continue;
    }
    uint64_t length = 0;
    if (!in.ReadVarint(&length)) return lost("a malformed reply (length)");
    const size_t end = in.position() + length;
    uint64_t id = 0, version = 0, data_bytes = 0;
    SliceReader::Mark data;
    bool has_data = false;
    while (in.position() < end) {
      uint64_t t = 0, v = 0;
      if (!in.ReadVarint(&t)) return lost("a malformed ChunkData");
      const uint32_t f = static_cast<uint32_t>(t >> 3), w = t & 7;
      if (f == 1 && w == kVarint) {
        if (!in.ReadVarint(&id)) return lost("a malformed ChunkData.chunk_id");
      } else if (f == 2 && w == kVarint) {
        if (!in.ReadVarint(&version))
          return lost("a malformed ChunkData.version");
      } else if (f == 3 && w == kLengthDelimited) {
        if (!in.ReadVarint(&v)) return lost("a malformed ChunkData.data");
        data_bytes = v;
        data = in.mark();
        has_data = true;
        if (!in.Read(nullptr, v)) return lost("a truncated ChunkData.data");
      } else if (!in.SkipField(w)) {
        return lost("a malformed ChunkData");
      }
    }
    if (in.position() != end) return lost("a ChunkData overrunning its length");
    if (next >= group.size()) {
      return lost(
          absl::StrCat("more than the ", group.size(), " chunks asked for"));
    }
    const Chunk& c = chunks_[group[next]];
    if (id != c.id || data_bytes != c.length * sizeof(float)) {
      return lost(absl::StrCat("chunk ", id, " with ", data_bytes,
                               " bytes; expected chunk ", c.id, " with ",
                               c.length * sizeof(float)));
    }
    if (has_data) {
      const SliceReader::Mark after = in.mark();
      in.Seek(data);
      in.Read(reinterpret_cast<char*>(call->params.data() + c.flat_offset),
              data_bytes);
      in.Seek(after);
    }
    versions_[c.id] = version;
    *received += data_bytes;
    ++next;
  }
  if (next != group.size()) {
    return lost(absl::StrCat(next, " chunks, asked for ", group.size()));
  }
  return absl::OkStatus();
}

// Runs on a gRPC callback thread. Copies the reply into the caller's
// parameters outside the lock: each call owns disjoint chunks.
void PsClient::OnDone(Call* call, grpc::Status grpc_status) {
  absl::Status status = FromGrpcStatus(grpc_status);
  uint64_t received = 0;
  if (status.ok()) status = Decode(call, &received);
  call->response.Clear();
  absl::MutexLock lock(&mu_);
  inflight_[call->shard]--;
  outstanding_--;
  stats_.bytes_received += received;
  if (status.ok()) {
    call->finished = true;
    call->status = status;
  } else if (status.code() == absl::StatusCode::kUnavailable &&
             call->attempt < options_.max_attempts) {
    absl::Duration backoff =
        options_.initial_backoff * (1 << std::min(call->attempt - 1, 16));
    call->retry_at = absl::Now() + std::min(backoff, options_.max_backoff);
    call->status = status;
  } else {
    call->finished = true;
    call->status = absl::Status(
        status.code(),
        absl::StrCat("shard ", call->shard, " (",
                     call->push ? "PushPull" : "Pull", ", attempt ",
                     call->attempt, "): ", status.message()));
  }
}

absl::Status PsClient::Exchange(uint64_t step, const float* gradient,
                                absl::Span<float> params) {
  if (params.size() != num_parameters_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "params: ", params.size(), " floats, model has ", num_parameters_));
  }
  std::vector<std::unique_ptr<Call>> calls;
  calls.reserve(groups_.size());
  for (size_t g = 0; g < groups_.size(); ++g) {
    auto call = std::make_unique<Call>();
    call->group = g;
    call->shard = group_shard_[g];
    call->push = gradient != nullptr;
    call->params = params;
    call->step = step;
    call->gradient = gradient;
    calls.push_back(std::move(call));
  }

  absl::Status first_error;
  mu_.Lock();
  while (true) {
    absl::Time now = absl::Now();
    absl::Time next_retry = absl::InfiniteFuture();
    bool all_finished = true;
    for (auto& call : calls) {
      if (call->finished) {
        if (!call->status.ok() && first_error.ok()) first_error = call->status;
        continue;
      }
      all_finished = false;
      bool running =
          call->context != nullptr && call->retry_at == absl::InfinitePast();
      if (running || !first_error.ok()) continue;
      if (call->retry_at > now) {
        next_retry = std::min(next_retry, call->retry_at);
        continue;
      }
      if (inflight_[call->shard] >= options_.max_inflight_per_shard) continue;
      call->retry_at = absl::InfinitePast();
      Issue(call.get());
    }
    if (!first_error.ok()) {
      // Stop what is still running; its callbacks borrow `calls`.
      for (auto& call : calls) {
        if (!call->finished && call->context != nullptr &&
            call->retry_at == absl::InfinitePast()) {
          call->context->TryCancel();
        }
      }
      if (outstanding_ == 0) break;
    } else if (all_finished) {
      break;
    }
    // Woken by a completion (outstanding_ or a finished flag changes) or by
    // the next retry time.
    int before = outstanding_;
    auto changed = [this, before]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      return outstanding_ != before;
    };
    if (next_retry == absl::InfiniteFuture()) {
      mu_.Await(absl::Condition(&changed));
    } else {
      mu_.AwaitWithDeadline(absl::Condition(&changed), next_retry);
    }
  }
  mu_.Unlock();
  // Every call is over; dropping the contexts (which hold the calls) and
  // the requests lets gRPC release the slices borrowing the gradient.
  for (auto& call : calls) {
    call->context.reset();
    call->request.Clear();
  }
  {
    absl::MutexLock borrow_lock(&borrow_mu_);
    auto released = [this]() ABSL_SHARED_LOCKS_REQUIRED(borrow_mu_) {
      return borrowed_ == 0;
    };
    borrow_mu_.Await(absl::Condition(&released));
  }
  if (!first_error.ok()) {
    return absl::Status(
        first_error.code(),
        absl::StrCat("step ", step, ": ", first_error.message()));
  }
  return absl::OkStatus();
}

}  // namespace ps
