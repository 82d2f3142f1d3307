#include "worker/client/async_ps_client.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/grpc_status.h"
#include "common/status_macros.h"
#include "core/checkpoint_gate.h"
#include "core/wire_format.h"
#include "spdlog/spdlog.h"
#include "worker/client/async_ps_request.h"
#include "worker/client/shard_wire.h"

namespace ps {

using async_ps_internal::OpName;
using async_ps_internal::Pulls;
using async_ps_internal::Pushes;

namespace {

// See core/checkpoint_gate.h: such a job's whole step goes on the wire.
PsClientOptions ForJob(PsClientOptions options, const JobSpec& spec) {
  if (StepAnswersAwaitCheckpoint(spec) || StepAnswersAwaitReplicas(spec)) {
    options.max_inflight_per_shard = std::numeric_limits<int>::max();
  }
  return options;
}

}  // namespace

absl::StatusOr<std::unique_ptr<AsyncPsClient>> AsyncPsClient::Create(
    const PsClientOptions& options, const Assignment& assignment,
    const Security* security) {
  RequestPlanOptions plan_options;
  plan_options.max_request_bytes = options.max_request_bytes;
  plan_options.channels_per_shard = std::max(1, options.channels_per_shard);
  PS_ASSIGN_OR_RETURN(RequestPlan plan,
                      RequestPlan::Create(assignment, plan_options));
  return std::unique_ptr<AsyncPsClient>(
      new AsyncPsClient(ForJob(options, assignment.spec()), assignment,
                        security, std::move(plan)));
}

AsyncPsClient::AsyncPsClient(const PsClientOptions& options,
                             const Assignment& assignment,
                             const Security* security, RequestPlan plan)
    : options_(options),
      security_(security),
      plan_(std::move(plan)),
      job_id_(assignment.job_id()),
      rank_(assignment.rank()),
      placement_epoch_(assignment.placement().epoch()),
      mode_(assignment.spec().consistency().mode()),
      retry_(RetryOptionsOf(options), assignment.spec().consistency(),
             StepDeadlineRule::kEveryMode),
      delta_pulls_(options.delta_pulls &&
                   assignment.spec().wire().has_topk_fraction() &&
                   assignment.spec().wire().topk_fraction() < 1.0f) {
  std::vector<uint64_t> lengths(plan_.chunks().size(), 0);
  for (const PlannedChunk& c : plan_.chunks()) {
    if (c.id >= lengths.size()) lengths.resize(c.id + 1, 0);
    lengths[c.id] = c.length;
  }
  if (options.encoder != nullptr &&
      options.encoder->Serves(assignment.spec().wire(), lengths)) {
    encoder_ = options.encoder;
  } else {
    if (options.encoder != nullptr) {
      spdlog::warn(
          "job {}: the previous client's gradient encoder is for other "
          "chunks; top-k residuals start from zero",
          job_id_);
    }
    encoder_ = std::make_shared<GradientEncoder>(assignment.spec().wire(),
                                                 std::move(lengths));
  }
  {
    absl::MutexLock lock(&mu_);
    queues_.resize(plan_.num_shards());
    inflight_.assign(plan_.num_shards(), 0);
    versions_.assign(plan_.chunks().size(), 0);
    held_.assign(plan_.chunks().size(), Held{});
  }
  std::vector<std::string> addresses;
  for (uint32_t s = 0; s < plan_.num_shards(); ++s) {
    addresses.push_back(assignment.shard_addresses(s));
  }
  channels_ = std::make_unique<ShardChannels<grpc::GenericStub>>(
      ChannelOptionsOf(options_, job_id_, "retrying there"), security_,
      std::move(addresses),
      [](std::shared_ptr<grpc::Channel> channel) {
        return std::make_unique<grpc::GenericStub>(std::move(channel));
      },
      [this](uint32_t shard) { OnShardMoved(shard); });
  dispatcher_ = std::thread([this] { Dispatch(); });
}

void AsyncPsClient::OnShardMoved(uint32_t shard) {
  {
    absl::MutexLock lock(&mu_);
    // Retries waiting out their backoff for the old address go now.
    const absl::Time now = absl::Now();
    for (Call* call : backoff_) {
      if (call->group.shard == shard) call->retry_at = now;
    }
    // Calls on the wire to the old address go again too: a failed-over
    // primary that the network cut off answers nothing before their
    // deadline. (Same (worker, step), attempt + 1: applied once.)
    for (auto& [id, r] : requests_) {
      for (auto& call : r->calls) {
        if (call->state == Call::State::kOnWire && call->group.shard == shard &&
            !call->moved) {
          call->moved = true;
          call->context->TryCancel();  // OnDone retries it
        }
      }
    }
  }
  Wake();
}

AsyncPsClient::~AsyncPsClient() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    for (auto& [id, r] : requests_) {
      if (!r->ended)
        CancelLocked(r.get(), absl::CancelledError("client shutting down"));
    }
  }
  Wake();
  dispatcher_.join();
  // Every call is over: no OnDone reads it any more. The relocator's thread
  // may still be in OnShardMoved, which needs the members.
  channels_->StopFollowing();
}

PsClientStats AsyncPsClient::stats() const {
  absl::MutexLock lock(&mu_);
  PsClientStats s = stats_;
  s.wire_fallbacks = encoder_->fallbacks();
  return s;
}

absl::Status AsyncPsClient::Validate(const ParamRequest& r) const {
  const size_t n = plan_.num_parameters();
  if (Pushes(r.op) && r.gradient.size() != n) {
    return absl::InvalidArgumentError(absl::StrCat(
        "gradient: ", r.gradient.size(), " floats, model has ", n));
  }
  if (Pulls(r.op) && r.params.size() != n) {
    return absl::InvalidArgumentError(
        absl::StrCat("params: ", r.params.size(), " floats, model has ", n));
  }
  if (!r.tensor.empty())
    PS_RETURN_IF_ERROR(plan_.TensorRange(r.tensor).status());
  if (!r.tensor.empty() && !r.tensors.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensors: given with tensor \"", r.tensor, "\""));
  }
  for (const std::string& t : r.tensors) {
    PS_RETURN_IF_ERROR(plan_.TensorRange(t).status());
  }
  return absl::OkStatus();
}

RequestHandle AsyncPsClient::Start(ParamRequest args) {
  auto r = std::make_unique<Request>();
  r->client = this;
  r->args = std::move(args);
  absl::Status valid = Validate(r->args);
  std::vector<RequestGroup> groups;
  if (valid.ok()) {
    if (!r->args.tensors.empty()) {
      groups = *plan_.TensorsGroups(r->args.tensors);  // validated above
    } else if (r->args.tensor.empty()) {
      groups = plan_.model_groups();
    } else {
      groups = *plan_.TensorGroups(r->args.tensor);  // validated above
    }
  }
  for (RequestGroup& g : groups) {
    auto call = std::make_unique<Call>();
    call->request = r.get();
    call->group = std::move(g);
    for (size_t i : call->group.chunks) {
      call->dense_bytes += plan_.chunks()[i].length * sizeof(float);
    }
    r->calls.push_back(std::move(call));
  }
  if (valid.ok() && Pushes(r->args.op)) EncodeGradients(r.get());
  r->status = valid;
  Request* raw = r.get();
  RequestHandle handle;
  {
    absl::MutexLock lock(&mu_);
    raw->id = next_id_++;
    handle = RequestHandle(raw->id);
    requests_[raw->id] = std::move(r);
    ++active_;
    Enqueue(raw);
    Pump();
  }
  Wake();
  return handle;
}

void AsyncPsClient::EncodeGradients(Request* r) {
  if (encoder_->passthrough()) return;
  const uint64_t before = encoder_->fallbacks();
  for (auto& call : r->calls) {
    const std::vector<size_t>& chunks = call->group.chunks;
    call->encoded.resize(chunks.size());
    call->payloads.resize(chunks.size());
    for (size_t j = 0; j < chunks.size(); ++j) {
      const PlannedChunk& c = plan_.chunks()[chunks[j]];
      EncodedChunk& e = call->encoded[j];
      encoder_->EncodeStep(c.id, r->args.step,
                           r->args.gradient.subspan(c.flat_offset, c.length),
                           &e);
      call->payloads[j] = PushPayload{e.format, e.data, e.indices};
    }
  }
  if (encoder_->fallbacks() > before &&
      !fallback_logged_.exchange(true, std::memory_order_relaxed)) {
    spdlog::warn(
        "job {}: a gradient holds a value beyond the wire format's range; "
        "such chunks are sent as FP32 (PsClientStats.wire_fallbacks counts "
        "them)",
        job_id_);
  }
}

void AsyncPsClient::Enqueue(Request* r) {
  if (!r->status.ok() || stopping_ || !cancel_all_.empty()) {
    if (r->status.ok()) {
      r->status = absl::CancelledError(cancel_all_.empty() ? "client stopping"
                                                           : cancel_all_);
    }
    for (auto& call : r->calls) call->state = Call::State::kEnded;
  }
  for (auto& call : r->calls) {
    if (call->state == Call::State::kEnded) continue;
    call->queue_key = {-r->args.priority, r->id};
    queues_[call->group.shard].emplace(call->queue_key, call.get());
    ++r->open_calls;
  }
  if (r->open_calls == 0) {
    r->ended = true;
    ended_.push_back(r);
  }
}

void AsyncPsClient::Pump() {
  for (uint32_t s = 0; s < queues_.size(); ++s) {
    auto& queue = queues_[s];
    while (!queue.empty() && inflight_[s] < options_.max_inflight_per_shard) {
      Call* call = queue.begin()->second;
      queue.erase(queue.begin());
      Issue(call);
    }
  }
}

void AsyncPsClient::ReleaseBorrowed(void* request) {
  Request* r = static_cast<Request*>(request);
  AsyncPsClient* self = r->client;
  // Wakes the dispatcher before letting go of borrow_mu_: once it is free,
  // the request (and the client) may be gone.
  absl::MutexLock lock(&self->borrow_mu_);
  if (--r->borrowed == 0) self->Wake();
}

void AsyncPsClient::Wake() {
  absl::MutexLock lock(&wake_mu_);
  wake_ = true;
}

void AsyncPsClient::Encode(Call* call) {
  const ParamRequest& args = call->request->args;
  RequestHead head;
  head.job_id = job_id_;
  head.worker = rank_;
  head.step = args.step;
  head.attempt = static_cast<uint32_t>(call->attempt);
  head.min_version = mode_ == BSP ? args.step : 0;
  head.placement_epoch = placement_epoch_;
  head.push_message =
      args.op == ParamOp::kPush ? PushMessage::kPush : PushMessage::kPushPull;
  call->bases.clear();
  if (delta_pulls_ && Pulls(args.op)) {
    for (size_t i : call->group.chunks) {
      const Held& h = held_[plan_.chunks()[i].id];
      call->bases.push_back(h.params == args.params.data() ? h.version
                                                           : kNotHeld);
    }
  }
  if (!Pushes(args.op)) {
    call->wire_request = EncodePull(head, plan_, call->group, call->bases);
    return;
  }
  int borrowed = 0;
  // Dense FP32 borrows the gradient; other formats the call's buffers.
  grpc::ByteBuffer request =
      EncodePush(head, plan_, call->group, versions_, args.gradient.data(),
                 &AsyncPsClient::ReleaseBorrowed, call->request, &borrowed,
                 call->payloads, call->bases);
  {
    absl::MutexLock lock(&borrow_mu_);
    call->request->borrowed += borrowed;
  }
  // Replaces (and releases) the previous attempt's request.
  call->wire_request = std::move(request);
}

void AsyncPsClient::Issue(Call* call) {
  const ParamOp op = call->request->args.op;
  const uint32_t shard = call->group.shard;
  call->attempt++;
  call->state = Call::State::kOnWire;
  call->context = std::make_unique<grpc::ClientContext>();
  call->context->set_deadline(
      absl::ToChronoTime(absl::Now() + retry_.attempt_deadline()));
  security_->Authorize(call->context.get());
  Encode(call);
  inflight_[shard]++;
  stats_.requests++;
  if (call->attempt > 1) stats_.retries++;
  stats_.bytes_sent += call->wire_request.Length();
  if (Pushes(op)) stats_.dense_bytes_sent += call->dense_bytes;
  call->response.Clear();
  TraceRecorder* tracer = options_.tracer;
  if (tracer != nullptr && tracer->Covers(call->request->args.step)) {
    call->issued_ns = TraceRecorder::NowNs();
  }
  const char* method = op == ParamOp::kPull ? async_ps_internal::kPullMethod
                       : op == ParamOp::kPush
                           ? async_ps_internal::kPushMethod
                           : async_ps_internal::kPushPullMethod;
  channels_->stub(shard, call->group.channel)
      ->UnaryCall(call->context.get(), method, grpc::StubOptions(),
                  &call->wire_request, &call->response,
                  [this, call](grpc::Status s) { OnDone(call, std::move(s)); });
}

// Runs on a gRPC callback thread. The reply lands in params outside the
// lock: each call owns disjoint chunks.
void AsyncPsClient::TraceCall(Call& call, int64_t replied_ns) {
  const int64_t decoded_ns = TraceRecorder::NowNs();
  TraceSpan span;
  span.set_kind(TRACE_RPC);
  span.set_step(call.request->args.step);
  span.set_shard(call.group.shard);
  span.set_attempt(static_cast<uint32_t>(call.attempt));
  span.set_start_ns(call.issued_ns);
  span.set_end_ns(decoded_ns);
  options_.tracer->Add(span);
  span.set_kind(TRACE_PULL_REPLY);
  span.set_start_ns(replied_ns);
  options_.tracer->Add(span);
  call.issued_ns = 0;
}

bool AsyncPsClient::RetriesCall(Call& call, const absl::Status& status) {
  return retry_.RetriesPaused(status, call.attempt, &call.paused_since);
}

void AsyncPsClient::OnDone(Call* call, grpc::Status grpc_status) {
  absl::Status status = FromGrpcStatus(grpc_status);
  Request* r = call->request;
  DecodedReply reply;
  bool bad_reply = false;
  const int64_t replied_ns = call->issued_ns != 0 ? TraceRecorder::NowNs() : 0;
  if (status.ok()) {
    // Each call owns its chunks' part of params: no lock needed.
    status = DecodeReply(call->response, plan_, call->group, Pulls(r->args.op),
                         r->args.params.data(), &reply, call->bases);
    bad_reply = !status.ok();
  }
  if (call->issued_ns != 0) TraceCall(*call, replied_ns);
  call->response.Clear();
  const uint32_t shard = call->group.shard;
  absl::MutexLock lock(&mu_);
  inflight_[shard]--;
  channels_->NoteHealth(shard, status);
  const bool moved = std::exchange(call->moved, false) && !status.ok();
  if (moved && absl::IsCancelled(status)) {
    status = absl::UnavailableError(
        absl::StrCat("shard ", shard, " moved to ", channels_->address(shard),
                     " while the call was on the wire"));
  }
  bool dispatcher_work = false;
  stats_.bytes_received += reply.data_bytes;
  stats_.dense_bytes_received += reply.dense_bytes;
  stats_.delta_chunks += reply.deltas;
  if (bad_reply) {
    // DecodeReply wrote nothing, but the shard's idea of what this worker
    // holds is in doubt: the next pulls of these chunks go in full.
    for (size_t i : call->group.chunks) held_[plan_.chunks()[i].id] = Held{};
  }
  if (status.ok()) {
    for (const auto& [id, version] : reply.versions) {
      versions_[id] = version;
      if (Pulls(r->args.op)) held_[id] = Held{version, r->args.params.data()};
    }
    EndCall(call, status);
  } else if (RetriesCall(*call, status) && r->status.ok()) {
    call->retry_at = absl::Now() + (moved ? absl::ZeroDuration()
                                          : retry_.Backoff(call->attempt));
    call->state = Call::State::kBackoff;
    backoff_.push_back(call);
    dispatcher_work = true;
  } else {
    // Where the coordinator says the shard is, if that is why it failed.
    const std::string note = status.code() == absl::StatusCode::kUnavailable
                                 ? channels_->Note(shard)
                                 : "";
    EndCall(call,
            absl::Status(status.code(),
                         absl::StrCat("step ", r->args.step, ": shard ", shard,
                                      " at ", channels_->address(shard), " (",
                                      OpName(r->args.op), ", attempt ",
                                      call->attempt, "): ", status.message(),
                                      note.empty() ? "" : "; ", note)));
  }
  // The shard has room again: its next queued call goes out now.
  Pump();
  // Under mu_: once it is released the client may be gone. A request that
  // its waiting Wait finishes needs no dispatcher.
  if (dispatcher_work || (r->ended && !r->FinishedByWaiter())) Wake();
}

void AsyncPsClient::EndCall(Call* call, absl::Status status) {
  Request* r = call->request;
  call->state = Call::State::kEnded;
  if (!status.ok() && r->status.ok()) {
    r->status = std::move(status);
    StopCalls(r);
  }
  if (--r->open_calls == 0) {
    r->ended = true;
    ended_.push_back(r);
  }
}

void AsyncPsClient::StopCalls(Request* r) {
  for (auto& owned : r->calls) {
    Call* call = owned.get();
    switch (call->state) {
      case Call::State::kQueued: {
        auto& queue = queues_[call->group.shard];
        auto [begin, end] = queue.equal_range(call->queue_key);
        for (auto it = begin; it != end; ++it) {
          if (it->second == call) {
            queue.erase(it);
            break;
          }
        }
        EndCall(call, r->status);
        break;
      }
      case Call::State::kBackoff:
        backoff_.erase(std::find(backoff_.begin(), backoff_.end(), call));
        EndCall(call, r->status);
        break;
      case Call::State::kOnWire:
        call->context->TryCancel();  // OnDone ends it
        break;
      case Call::State::kEnded:
        break;
    }
  }
}

void AsyncPsClient::CancelLocked(Request* r, absl::Status why) {
  if (r->ended) return;
  if (r->status.ok()) r->status = std::move(why);
  StopCalls(r);
}

void AsyncPsClient::Cancel(RequestHandle handle) {
  absl::MutexLock lock(&mu_);
  auto it = requests_.find(handle.id());
  if (it == requests_.end()) return;
  CancelLocked(it->second.get(), absl::CancelledError(absl::StrCat(
                                     "request ", handle.id(), ": cancelled")));
  Wake();
}

void AsyncPsClient::CancelAll(const std::string& why) {
  absl::MutexLock lock(&mu_);
  cancel_all_ = why.empty() ? "cancelled" : why;
  for (auto& [id, r] : requests_) {
    if (!r->ended) CancelLocked(r.get(), absl::CancelledError(cancel_all_));
  }
  Wake();
}

}  // namespace ps
