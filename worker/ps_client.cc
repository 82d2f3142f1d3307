#include "worker/ps_client.h"

#include <algorithm>
#include <cstring>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/grpc_status.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "tensor payloads are little-endian float32");

namespace ps {

// One request to one shard, across its retries. Owned by Exchange();
// gRPC callbacks borrow it until OnDone.
struct PsClient::Call {
  size_t group = 0;
  uint32_t shard = 0;
  bool push = false;
  int attempt = 0;
  absl::Time retry_at = absl::InfinitePast();
  bool finished = false;  // no more attempts: `status` is final
  absl::Status status;
  std::unique_ptr<grpc::ClientContext> context;
  PushPullRequest push_request;
  PushPullResponse push_response;
  PullRequest pull_request;
  PullResponse pull_response;
  absl::Span<float> params;  // where replies land
};

absl::StatusOr<std::unique_ptr<PsClient>> PsClient::Create(
    const PsClientOptions& options, const Assignment& assignment,
    const Security* security) {
  const Placement& placement = assignment.placement();
  const JobSpec& spec = assignment.spec();
  if (placement.num_shards() == 0 ||
      assignment.shard_addresses_size() != static_cast<int>(placement.num_shards())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "assignment.shard_addresses: ", assignment.shard_addresses_size(),
        " addresses for ", placement.num_shards(), " shards"));
  }
  auto client = std::unique_ptr<PsClient>(new PsClient(options, assignment, security));
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
      return absl::InvalidArgumentError(
          absl::StrCat("placement.chunks[", i, "]: does not fit the job's tensors"));
    }
    client->chunks_.push_back({c.chunk_id(), c.shard(),
                               it->second.first + c.offset(), c.length()});
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
  client->versions_.assign(client->chunks_.size(), 0);
  for (uint32_t s = 0; s < placement.num_shards(); ++s) {
    client->stubs_.push_back(ParameterServer::NewStub(
        security->NewChannel(assignment.shard_addresses(s), options.max_message_bytes)));
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
  uint32_t step_deadline_ms = assignment.spec().consistency().step_deadline_ms();
  wait_deadline_ = std::max(options.rpc_deadline,
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

void PsClient::Issue(Call* call) {
  call->attempt++;
  call->context = std::make_unique<grpc::ClientContext>();
  call->context->set_deadline(absl::ToChronoTime(absl::Now() + wait_deadline_));
  security_->Authorize(call->context.get());
  inflight_[call->shard]++;
  outstanding_++;
  stats_.requests++;
  if (call->attempt > 1) stats_.retries++;
  ParameterServer::Stub* stub = stubs_[call->shard].get();
  if (call->push) {
    call->push_request.set_attempt(call->attempt);
    stats_.bytes_sent += call->push_request.ByteSizeLong();
    call->push_response.Clear();
    stub->async()->PushPull(call->context.get(), &call->push_request,
                            &call->push_response,
                            [this, call](grpc::Status s) { OnDone(call, std::move(s)); });
  } else {
    stats_.bytes_sent += call->pull_request.ByteSizeLong();
    call->pull_response.Clear();
    stub->async()->Pull(call->context.get(), &call->pull_request,
                        &call->pull_response,
                        [this, call](grpc::Status s) { OnDone(call, std::move(s)); });
  }
}

// Runs on a gRPC callback thread. Copies the reply into the caller's
// parameters outside the lock: each call owns disjoint chunks.
void PsClient::OnDone(Call* call, grpc::Status grpc_status) {
  absl::Status status = FromGrpcStatus(grpc_status);
  uint64_t received = 0;
  if (status.ok()) {
    const auto& chunks = call->push ? call->push_response.parameters()
                                    : call->pull_response.parameters();
    const std::vector<size_t>& group = groups_[call->group];
    if (chunks.size() != static_cast<int>(group.size())) {
      status = absl::DataLossError(absl::StrCat(
          "shard ", call->shard, " returned ", chunks.size(), " chunks, asked for ",
          group.size()));
    }
    for (int i = 0; status.ok() && i < chunks.size(); ++i) {
      const ChunkData& d = chunks[i];
      const Chunk& c = chunks_[group[i]];
      if (d.chunk_id() != c.id || d.data().size() != c.length * sizeof(float)) {
        status = absl::DataLossError(absl::StrCat(
            "shard ", call->shard, " returned chunk ", d.chunk_id(), " with ",
            d.data().size(), " bytes; expected chunk ", c.id, " with ",
            c.length * sizeof(float)));
        break;
      }
      std::memcpy(call->params.data() + c.flat_offset, d.data().data(), d.data().size());
      versions_[c.id] = d.version();
      received += d.data().size();
    }
  }
  absl::MutexLock lock(&mu_);
  inflight_[call->shard]--;
  outstanding_--;
  stats_.bytes_received += received;
  if (status.ok()) {
    call->finished = true;
    call->status = status;
  } else if (status.code() == absl::StatusCode::kUnavailable &&
             call->attempt < options_.max_attempts) {
    absl::Duration backoff = options_.initial_backoff * (1 << std::min(call->attempt - 1, 16));
    call->retry_at = absl::Now() + std::min(backoff, options_.max_backoff);
    call->status = status;
  } else {
    call->finished = true;
    call->status = absl::Status(
        status.code(), absl::StrCat("shard ", call->shard, " (",
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
    if (call->push) {
      PushPullRequest& r = call->push_request;
      r.set_job_id(job_id_);
      r.set_worker(rank_);
      r.set_step(step);
      for (size_t i : groups_[g]) {
        const Chunk& c = chunks_[i];
        ChunkData* d = r.add_gradients();
        d->set_chunk_id(c.id);
        d->set_version(versions_[c.id]);
        d->set_data(reinterpret_cast<const char*>(gradient + c.flat_offset),
                    c.length * sizeof(float));
      }
    } else {
      PullRequest& r = call->pull_request;
      r.set_job_id(job_id_);
      r.set_worker(rank_);
      r.set_step(step);
      r.set_min_version(mode_ == BSP ? step : 0);
      for (size_t i : groups_[g]) r.add_chunk_ids(chunks_[i].id);
    }
    calls.push_back(std::move(call));
  }

  absl::Status first_error;
  absl::MutexLock lock(&mu_);
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
      bool running = call->context != nullptr && call->retry_at == absl::InfinitePast();
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
  if (!first_error.ok()) {
    return absl::Status(first_error.code(),
                        absl::StrCat("step ", step, ": ", first_error.message()));
  }
  return absl::OkStatus();
}

}  // namespace ps
