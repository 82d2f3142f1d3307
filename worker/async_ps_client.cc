#include "worker/async_ps_client.h"

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
#include "worker/shard_wire.h"

namespace ps {
namespace {

// Full method names of proto/ps.proto's ParameterServer service.
const char kPushPullMethod[] = "/ps.ParameterServer/PushPull";
const char kPullMethod[] = "/ps.ParameterServer/Pull";
const char kPushMethod[] = "/ps.ParameterServer/Push";
// Backoff doubles per attempt up to this many doublings (then max_backoff).
constexpr int kMaxBackoffDoublings = 16;
// Calls that wait for other workers outlive the job's step deadline by this
// much, so the shard's error naming the missing workers arrives first.
constexpr absl::Duration kStepDeadlineMargin = absl::Seconds(5);

bool Pushes(ParamOp op) { return op != ParamOp::kPull; }
bool Pulls(ParamOp op) { return op != ParamOp::kPush; }

const char* OpName(ParamOp op) {
  switch (op) {
    case ParamOp::kPull:
      return "Pull";
    case ParamOp::kPush:
      return "Push";
    case ParamOp::kPushPull:
      return "PushPull";
  }
  return "?";
}

}  // namespace

// One Start: its calls and, once over, its status. Owned by requests_.
struct AsyncPsClient::Request {
  AsyncPsClient* client = nullptr;
  uint64_t id = 0;
  ParamRequest args;
  std::vector<std::unique_ptr<Call>> calls;
  int open_calls = 0;     // not yet ended (mu_)
  absl::Status status;    // the first error (mu_)
  bool ended = false;     // every call ended; on ended_ or finishing (mu_)
  bool over = false;      // slices released, callback run (mu_)
  bool detached = false;  // (mu_)
  // A Wait is blocked on it (mu_). A request without a callback that a Wait
  // is blocked on is finished by that Wait, not by the dispatch thread.
  bool waited = false;
  // The dispatch thread or a Wait took it off ended_ to finish it (mu_).
  bool claimed = false;
  int borrowed = 0;  // gradient slices gRPC holds (borrow_mu_)

  // Whether the Wait blocked on it finishes it (no thread hop).
  bool FinishedByWaiter() const { return waited && !args.done; }
};

// One request group to one shard, across its retries. gRPC's callback
// borrows it while on the wire.
struct AsyncPsClient::Call {
  enum class State { kQueued, kOnWire, kBackoff, kEnded };
  Request* request = nullptr;
  RequestGroup group;
  std::pair<int, uint64_t> queue_key;  // (-priority, request id)
  State state = State::kQueued;
  int attempt = 0;
  absl::Time retry_at;
  std::unique_ptr<grpc::ClientContext> context;
  grpc::ByteBuffer wire_request;  // PushPullRequest, PushRequest, PullRequest
  grpc::ByteBuffer response;
  // The group's gradient chunks as encoded by EncodeGradients (empty for
  // dense FP32), and views of them for EncodePush. Kept across retries.
  std::vector<EncodedChunk> encoded;
  std::vector<PushPayload> payloads;
  uint64_t dense_bytes = 0;  // the group's chunks as dense FP32
  // The versions held of the group's chunks that the attempt on the wire
  // named (delta pulls; empty: none). Set by Encode.
  std::vector<uint64_t> bases;
  int64_t issued_ns = 0;  // traced steps only (TraceRecorder::NowNs)
};

namespace {

// See core/checkpoint_gate.h: such a job's whole step goes on the wire.
PsClientOptions ForJob(PsClientOptions options, const JobSpec& spec) {
  if (StepAnswersAwaitCheckpoint(spec)) {
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
      mode_(assignment.spec().consistency().mode()),
      wait_deadline_(
          std::max(options.rpc_deadline,
                   absl::Milliseconds(
                       assignment.spec().consistency().step_deadline_ms()) +
                       kStepDeadlineMargin)),
      delta_pulls_(options.delta_pulls &&
                   assignment.spec().wire().has_topk_fraction() &&
                   assignment.spec().wire().topk_fraction() < 1.0f) {
  std::vector<uint64_t> lengths(plan_.chunks().size(), 0);
  for (const PlannedChunk& c : plan_.chunks()) {
    if (c.id >= lengths.size()) lengths.resize(c.id + 1, 0);
    lengths[c.id] = c.length;
  }
  encoder_ = std::make_unique<GradientEncoder>(assignment.spec().wire(),
                                               std::move(lengths));
  std::vector<std::string> addresses;
  {
    absl::MutexLock lock(&mu_);
    for (uint32_t s = 0; s < plan_.num_shards(); ++s) {
      addresses_.push_back(assignment.shard_addresses(s));
      stubs_.push_back(StubsTo(addresses_[s]));
    }
    addresses = addresses_;
    suspect_.assign(plan_.num_shards(), false);
    queues_.resize(plan_.num_shards());
    inflight_.assign(plan_.num_shards(), 0);
    versions_.assign(plan_.chunks().size(), 0);
    held_.assign(plan_.chunks().size(), Held{});
  }
  dispatcher_ = std::thread([this] { Dispatch(); });
  if (options_.locate_shards) {
    ShardRelocator::Options relocator_options;
    relocator_options.locate = options_.locate_shards;
    relocator_options.interval = options_.locate_interval;
    relocator_ = std::make_unique<ShardRelocator>(
        relocator_options, std::move(addresses),
        [this](uint32_t shard, const std::string& address) {
          OnShardMoved(shard, address);
        });
  }
}

std::vector<std::unique_ptr<grpc::GenericStub>> AsyncPsClient::StubsTo(
    const std::string& address) const {
  std::vector<std::unique_ptr<grpc::GenericStub>> stubs;
  for (int c = 0; c < std::max(1, options_.channels_per_shard); ++c) {
    // NewChannel gives every channel its own connection (see
    // common/security.h), so these do not share one TCP stream.
    stubs.push_back(std::make_unique<grpc::GenericStub>(
        security_->NewChannel(address, options_.max_message_bytes)));
  }
  return stubs;
}

void AsyncPsClient::OnShardMoved(uint32_t shard, const std::string& address) {
  std::vector<std::unique_ptr<grpc::GenericStub>> stubs = StubsTo(address);
  {
    absl::MutexLock lock(&mu_);
    spdlog::warn("job {}: shard {} moved from {} to {}; retrying there",
                 job_id_, shard, addresses_[shard], address);
    addresses_[shard] = address;
    retired_stubs_.push_back(std::move(stubs_[shard]));
    stubs_[shard] = std::move(stubs);
    // Retries waiting out their backoff for the old address go now.
    const absl::Time now = absl::Now();
    for (Call* call : backoff_) {
      if (call->group.shard == shard) call->retry_at = now;
    }
  }
  Wake();
}

void AsyncPsClient::NoteShardHealth(uint32_t shard,
                                    const absl::Status& status) {
  if (relocator_ == nullptr) return;
  const bool unavailable = status.code() == absl::StatusCode::kUnavailable;
  if (unavailable && !suspect_[shard]) {
    relocator_->Suspect(shard);
  } else if (status.ok() && suspect_[shard]) {
    relocator_->Clear(shard);
  } else {
    return;
  }
  suspect_[shard] = unavailable;
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
  // Every call is over: no OnDone reads it any more. Its thread may still
  // be in OnShardMoved, which needs the stubs (members, destroyed later).
  relocator_.reset();
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
      encoder_->Encode(c.id, r->args.gradient.subspan(c.flat_offset, c.length),
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
  call->context->set_deadline(absl::ToChronoTime(absl::Now() + wait_deadline_));
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
  const char* method = op == ParamOp::kPull   ? kPullMethod
                       : op == ParamOp::kPush ? kPushMethod
                                              : kPushPullMethod;
  stubs_[shard][call->group.channel]->UnaryCall(
      call->context.get(), method, grpc::StubOptions(), &call->wire_request,
      &call->response,
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
  NoteShardHealth(shard, status);
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
  } else if (status.code() == absl::StatusCode::kUnavailable &&
             call->attempt < options_.max_attempts && r->status.ok()) {
    const absl::Duration backoff =
        options_.initial_backoff *
        (1 << std::min(call->attempt - 1, kMaxBackoffDoublings));
    call->retry_at = absl::Now() + std::min(backoff, options_.max_backoff);
    call->state = Call::State::kBackoff;
    backoff_.push_back(call);
    dispatcher_work = true;
  } else {
    // Where the coordinator says the shard is, if that is why it failed.
    const std::string note =
        relocator_ != nullptr && status.code() == absl::StatusCode::kUnavailable
            ? relocator_->Note(shard)
            : "";
    EndCall(call,
            absl::Status(status.code(),
                         absl::StrCat("step ", r->args.step, ": shard ", shard,
                                      " at ", addresses_[shard], " (",
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

void AsyncPsClient::Detach(RequestHandle handle) {
  absl::MutexLock lock(&mu_);
  auto it = requests_.find(handle.id());
  if (it == requests_.end()) return;
  if (it->second->over) {
    requests_.erase(it);
  } else {
    it->second->detached = true;
  }
}

absl::Status AsyncPsClient::Wait(RequestHandle handle, absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  auto it = requests_.find(handle.id());
  if (it == requests_.end() || it->second->detached) {
    return absl::InvalidArgumentError(absl::StrCat(
        "handle ", handle.id(), ": unknown, detached or already waited"));
  }
  Request* r = it->second.get();
  r->waited = true;
  auto ready = [r] {
    return r->over || (r->ended && !r->claimed && r->FinishedByWaiter());
  };
  bool in_time = mu_.AwaitWithDeadline(absl::Condition(&ready), deadline);
  if (in_time && !r->over) {
    // Finished here, in the waiting thread: the blocking path then costs
    // one thread hop (gRPC's callback thread to this one), as before.
    r->claimed = true;
    ended_.erase(std::remove(ended_.begin(), ended_.end(), r), ended_.end());
    mu_.Unlock();
    const bool released = ReleaseCalls(r, deadline);
    mu_.Lock();
    if (released) {
      MarkOver(r);
    } else {
      r->claimed = false;  // the dispatch thread finishes it
      in_time = false;
    }
  }
  r->waited = false;
  if (!in_time) {
    if (r->ended && !r->claimed &&
        std::find(ended_.begin(), ended_.end(), r) == ended_.end()) {
      ended_.push_back(r);
    }
    Wake();
    return absl::DeadlineExceededError(absl::StrCat(
        "request ", r->id, " (", OpName(r->args.op), " of step ", r->args.step,
        "): not over by the deadline; still running"));
  }
  absl::Status status = r->status;
  requests_.erase(handle.id());
  return status;
}

void AsyncPsClient::DropWire(Request* r) {
  // Ended calls are off the wire: dropping their contexts and requests
  // lets gRPC release the slices borrowing the gradient.
  for (auto& call : r->calls) {
    call->context.reset();
    call->wire_request.Clear();
  }
}

bool AsyncPsClient::ReleaseCalls(Request* r, absl::Time deadline) {
  DropWire(r);
  absl::MutexLock lock(&borrow_mu_);
  auto released = [r]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(borrow_mu_) {
    return r->borrowed == 0;
  };
  return borrow_mu_.AwaitWithDeadline(absl::Condition(&released), deadline);
}

void AsyncPsClient::MarkOver(Request* r) {
  r->over = true;
  if (--active_ == 0 && stopping_) Wake();
  if (r->detached) requests_.erase(r->id);
}

bool AsyncPsClient::TryFinish(Request* r) {
  {
    absl::MutexLock lock(&borrow_mu_);
    if (r->borrowed > 0) return false;
  }
  absl::Status status;
  {
    absl::MutexLock lock(&mu_);
    status = r->status;
  }
  if (r->args.done) r->args.done(status);
  absl::MutexLock lock(&mu_);
  MarkOver(r);
  return true;
}

// The loop of the dispatch thread. Sleeps until woken (a call ended, a
// slice was released, a request started or was cancelled) or the next
// retry is due.
void AsyncPsClient::Dispatch() {
  std::vector<Request*> finishing;  // ended; waiting for their slices
  absl::Time next_retry = absl::InfiniteFuture();
  while (true) {
    {
      absl::MutexLock lock(&wake_mu_);
      wake_mu_.AwaitWithDeadline(absl::Condition(&wake_), next_retry);
      wake_ = false;
    }
    std::vector<Request*> ended;
    {
      absl::MutexLock lock(&mu_);
      const absl::Time now = absl::Now();
      next_retry = absl::InfiniteFuture();
      std::vector<Call*> waiting;
      for (Call* call : backoff_) {
        if (call->retry_at > now) {
          next_retry = std::min(next_retry, call->retry_at);
          waiting.push_back(call);
          continue;
        }
        call->state = Call::State::kQueued;
        queues_[call->group.shard].emplace(call->queue_key, call);
      }
      backoff_.swap(waiting);
      Pump();
      // What a blocked Wait finishes, or already claimed, stays with it.
      for (Request* r : ended_) {
        if (r->claimed || r->FinishedByWaiter()) continue;
        r->claimed = true;
        ended.push_back(r);
      }
      ended_.clear();
    }
    for (Request* r : ended) {
      DropWire(r);  // TryFinish waits for the slices
      finishing.push_back(r);
    }
    finishing.erase(std::remove_if(finishing.begin(), finishing.end(),
                                   [this](Request* r) { return TryFinish(r); }),
                    finishing.end());
    absl::MutexLock lock(&mu_);
    if (stopping_ && active_ == 0) return;
  }
}

}  // namespace ps
