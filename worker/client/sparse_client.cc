#include "worker/client/sparse_client.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/defaults.h"
#include "common/grpc_status.h"
#include "common/status_macros.h"
#include "core/sparse_ids.h"
#include "core/sparse_rows_codec.h"
#include "worker/client/sparse_split.h"
#include "worker/client/sparse_wire.h"

namespace ps {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "ids and values travel as little-endian bytes, copied as is");

namespace {

// A request's scalar fields beyond the job id, at their widest (worker,
// step, attempt, push, part, parts).
constexpr size_t kHeadFieldBytes = 48;

}  // namespace

absl::Status SparseClient::Wait(RequestHandle handle, absl::Time deadline) {
  return tracker_.Wait(handle, deadline);
}

void SparseClient::Detach(RequestHandle handle) { tracker_.Detach(handle); }

absl::Status SparseClient::Exchange(uint64_t step, bool push,
                                    absl::Span<const SparseTableStep> tables) {
  SparseStep s;
  s.step = step;
  s.push = push;
  s.tables.assign(tables.begin(), tables.end());
  // Bounded: every attempt has a deadline and the attempts are bounded.
  return Wait(Start(std::move(s)));
}

// ---------------------------------------------------------------------------
// GrpcSparseClient

// One Start. Owned by steps_ while its calls run, then by Finish.
struct GrpcSparseClient::Step {
  RequestHandle handle;  // its id keys steps_
  SparseStep args;
  std::vector<uint32_t> dims;  // per args.tables entry
  std::vector<std::unique_ptr<Call>> calls;
  int open = 0;         // calls not yet ended (mu_)
  absl::Status status;  // the first error (mu_)
};

// One shard's SparseExchange of a step, across its attempts. gRPC's
// callback borrows it while it is on the wire.
struct GrpcSparseClient::Call {
  enum class State { kOnWire, kBackoff, kEnded };
  // pull_rows[j] asks for the ids at `positions` of step entry `entry`.
  struct Pull {
    size_t entry = 0;
    std::vector<uint32_t> positions;
  };

  Step* step = nullptr;
  uint32_t shard = 0;
  // Part `part` of `parts` of the shard's step (0 of 0: not split).
  uint32_t part = 0;
  uint32_t parts = 0;
  uint32_t channel = 0;
  // The attempt's stub (set by ArmLocked: the shard's may change after).
  grpc::GenericStub* stub = nullptr;
  State state = State::kOnWire;  // (mu_)
  int attempt = 0;
  absl::Time retry_at;
  absl::Time paused_since = absl::InfinitePast();  // RetriesPaused
  // The request's rows (its slices borrow them, every attempt), the
  // encoded request of the current attempt and its reply.
  std::vector<SparseRowsOut> gradients;
  std::vector<SparseRowsOut> pull_rows;
  grpc::ByteBuffer request;
  size_t request_bytes = 0;
  grpc::ByteBuffer response;
  SparseReplyInfo reply;
  // Shared with a sibling that cancels it outside mu_.
  std::shared_ptr<grpc::ClientContext> context;
  std::vector<Pull> pulls;
  uint64_t rows_pushed = 0;
  uint64_t rows_pulled = 0;
};

// The request's scalar fields for `c`'s current attempt.
SparseRequestHead GrpcSparseClient::HeadOf(const Call& c) const {
  SparseRequestHead h;
  h.job_id = job_id_;
  h.worker = rank_;
  h.step = c.step->args.step;
  h.attempt = static_cast<uint32_t>(c.attempt);
  h.push = c.step->args.push;
  h.part = c.part;
  h.parts = c.parts;
  // Names the copy a replicated job's successor shard serves it from.
  h.table_shard = c.shard;
  h.placement_epoch = placement_epoch_;
  return h;
}

// What a locked section decided and the caller does once mu_ is released:
// cancel calls on the wire (gRPC may run their callbacks inline), then
// finish the steps that ended.
struct GrpcSparseClient::Outcome {
  std::vector<std::shared_ptr<grpc::ClientContext>> cancel;
  std::vector<std::unique_ptr<Step>> over;
};

absl::StatusOr<std::unique_ptr<GrpcSparseClient>> GrpcSparseClient::Create(
    const PsClientOptions& options, const Assignment& assignment,
    const Security* security) {
  if (security == nullptr) {
    return absl::InvalidArgumentError("security: null");
  }
  const JobSpec& spec = assignment.spec();
  if (spec.tables_size() == 0) {
    return absl::InvalidArgumentError(
        "spec.tables: the job has no sparse tables");
  }
  for (int i = 0; i < spec.tables_size(); ++i) {
    if (spec.tables(i).dim() == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("spec.tables[", i, "].dim: 0"));
    }
  }
  const uint32_t shards = assignment.placement().num_shards();
  if (shards == 0 ||
      static_cast<int>(shards) != assignment.shard_addresses_size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("shard_addresses: ", assignment.shard_addresses_size(),
                     " addresses for placement.num_shards ", shards));
  }
  PS_RETURN_IF_ERROR(RowOwners(assignment.placement()).status());
  return std::unique_ptr<GrpcSparseClient>(
      new GrpcSparseClient(options, assignment, security));
}

GrpcSparseClient::GrpcSparseClient(const PsClientOptions& options,
                                   const Assignment& assignment,
                                   const Security* security)
    : options_(options),
      security_(security),
      spec_(assignment.spec()),
      job_id_(assignment.job_id()),
      rank_(assignment.rank()),
      retry_(RetryOptionsOf(options), assignment.spec().consistency(),
             StepDeadlineRule::kWaitingModes),
      num_shards_(static_cast<uint32_t>(assignment.shard_addresses_size())),
      owners_(*RowOwners(assignment.placement())),  // checked by Create
      placement_epoch_(assignment.placement().epoch()) {
  channels_ = std::make_unique<ShardChannels<grpc::GenericStub>>(
      ChannelOptionsOf(options_, job_id_, "sparse retries go there"), security_,
      std::vector<std::string>(assignment.shard_addresses().begin(),
                               assignment.shard_addresses().end()),
      [](std::shared_ptr<grpc::Channel> channel) {
        return std::make_unique<grpc::GenericStub>(std::move(channel));
      },
      [this](uint32_t shard) { OnShardMoved(shard); });
  retry_thread_ = std::thread([this] { RetryLoop(); });
}

void GrpcSparseClient::OnShardMoved(uint32_t shard) {
  absl::MutexLock lock(&mu_);
  const absl::Time now = absl::Now();
  for (Call* call : backoff_) {
    if (call->shard == shard) call->retry_at = now;
  }
  retry_wake_ = true;
}

GrpcSparseClient::~GrpcSparseClient() {
  Outcome outcome;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    std::vector<Step*> live;
    for (auto& [id, step] : steps_) live.push_back(step.get());
    for (Step* step : live) {
      if (step->status.ok()) {
        step->status = absl::CancelledError("sparse client shutting down");
      }
      CancelCallsLocked(step, &outcome);
    }
  }
  Settle(std::move(outcome));
  {
    absl::MutexLock lock(&mu_);
    auto idle = [this]()
                    ABSL_SHARED_LOCKS_REQUIRED(mu_) { return active_ == 0; };
    mu_.Await(absl::Condition(&idle));
    quit_ = true;
  }
  retry_thread_.join();
  // No call is left; OnShardMoved may still run until this returns.
  channels_->StopFollowing();
}

SparseClientStats GrpcSparseClient::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

// A table's ids routed to their shards (ShardForId over `owners`).
struct GrpcSparseClient::IdRoute {
  std::vector<uint32_t> shard_of;  // by id position
  std::vector<size_t> count;       // ids per shard

  IdRoute(absl::Span<const uint64_t> ids, absl::Span<const uint32_t> owners,
          uint32_t num_shards)
      : shard_of(ids.size()), count(num_shards, 0) {
    const uint32_t n = static_cast<uint32_t>(owners.size());
    for (size_t k = 0; k < ids.size(); ++k) {
      shard_of[k] = owners[ShardForId(ids[k], n)];
      ++count[shard_of[k]];
    }
  }
};

absl::Status GrpcSparseClient::Plan(Step* step,
                                    const std::vector<int>& table_index) const {
  const SparseStep& a = step->args;
  const uint32_t n = num_shards();
  std::vector<Call*> by_shard(n, nullptr);
  if (a.push) {  // every shard with rows counts this worker's push
    for (uint32_t s : owners_) CallTo(step, s, &by_shard);
  }
  for (size_t e = 0; e < a.tables.size(); ++e) {
    const SparseTableStep& t = a.tables[e];
    step->dims.push_back(spec_.tables(table_index[e]).dim());
    if (!t.push_ids.empty()) {
      PackPush(step, e, IdRoute(t.push_ids, owners_, n), &by_shard);
    }
    if (!t.pull_ids.empty()) {
      PackPull(step, e, IdRoute(t.pull_ids, owners_, n), &by_shard);
    }
  }
  return CheckFits(step);
}

GrpcSparseClient::Call* GrpcSparseClient::CallTo(
    Step* step, uint32_t shard, std::vector<Call*>* by_shard) const {
  Call*& c = (*by_shard)[shard];
  if (c == nullptr) {
    step->calls.push_back(std::make_unique<Call>());
    c = step->calls.back().get();
    c->step = step;
    c->shard = shard;
  }
  return c;
}

// Pushed rows: one SparseRows per shard that owns some.
void GrpcSparseClient::PackPush(Step* step, size_t entry, const IdRoute& route,
                                std::vector<Call*>* by_shard) const {
  const SparseTableStep& t = step->args.tables[entry];
  const size_t dim = step->dims[entry];
  const size_t row_bytes = dim * sizeof(float);
  const uint32_t n = num_shards();
  std::vector<uint64_t*> id_out(n);
  std::vector<float*> value_out(n);
  for (uint32_t s = 0; s < n; ++s) {
    if (route.count[s] == 0) continue;
    Call* c = CallTo(step, s, by_shard);
    SparseRowsOut& rows = c->gradients.emplace_back();
    rows.table = t.table;
    rows.ids.resize(route.count[s]);
    rows.values.resize(route.count[s] * dim);
    id_out[s] = rows.ids.data();
    value_out[s] = rows.values.data();
    c->rows_pushed += route.count[s];
  }
  for (size_t k = 0; k < t.push_ids.size(); ++k) {
    const uint32_t s = route.shard_of[k];
    *id_out[s]++ = t.push_ids[k];
    std::memcpy(value_out[s], t.push_grads.data() + k * dim, row_bytes);
    value_out[s] += dim;
  }
}

// Pulled ids: one SparseRows per shard, and where each goes back.
void GrpcSparseClient::PackPull(Step* step, size_t entry, const IdRoute& route,
                                std::vector<Call*>* by_shard) const {
  const SparseTableStep& t = step->args.tables[entry];
  const uint32_t n = num_shards();
  std::vector<uint64_t*> id_out(n);
  std::vector<Call::Pull*> pull_of(n, nullptr);
  for (uint32_t s = 0; s < n; ++s) {
    if (route.count[s] == 0) continue;
    Call* c = CallTo(step, s, by_shard);
    SparseRowsOut& rows = c->pull_rows.emplace_back();
    rows.table = t.table;
    rows.ids.resize(route.count[s]);
    id_out[s] = rows.ids.data();
    c->pulls.emplace_back();
    c->pulls.back().entry = entry;
    c->pulls.back().positions.reserve(route.count[s]);
    c->rows_pulled += route.count[s];
    pull_of[s] = &c->pulls.back();
  }
  for (size_t k = 0; k < t.pull_ids.size(); ++k) {
    const uint32_t s = route.shard_of[k];
    *id_out[s]++ = t.pull_ids[k];
    pull_of[s]->positions.push_back(static_cast<uint32_t>(k));
  }
}

// A call too big for one message becomes parts (sparse_split.h), each with
// the shard's rows in order; then every call must fit, both directions.
absl::Status GrpcSparseClient::CheckFits(Step* step) const {
  const size_t limit = static_cast<size_t>(options_.max_message_bytes);
  const size_t head = job_id_.size() + kHeadFieldBytes;
  std::vector<std::unique_ptr<Call>> calls;
  for (auto& c : step->calls) {
    SparseShardRows rows = RowsOf(c.get());
    if (SparseRequestBytes(rows, head) <= limit &&
        SparseReplyBytes(rows) <= limit) {
      calls.push_back(PartCall(*c, std::move(rows), 0, 1));
      continue;
    }
    absl::StatusOr<std::vector<SparseShardRows>> parts =
        SplitSparseRows(std::move(rows), head, limit);
    if (!parts.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tables: step ", step->args.step, " with shard ", c->shard, ": ",
          parts.status().message(),
          " (fewer ids per step, or a larger limit on workers and shards)"));
    }
    for (size_t i = 0; i < parts->size(); ++i) {
      calls.push_back(PartCall(*c, std::move((*parts)[i]), i, parts->size()));
    }
  }
  step->calls = std::move(calls);
  for (const auto& c : step->calls) {
    c->request_bytes =
        EncodeSparseRequest(HeadOf(*c), c->gradients, c->pull_rows).Length();
    if (c->request_bytes > limit) {
      return absl::InternalError(absl::StrCat(
          "tables: step ", step->args.step, ": a request of ", c->request_bytes,
          " bytes to shard ", c->shard, " part ", c->part, " of ", c->parts,
          " is over max_message_bytes ", limit, " after splitting"));
    }
  }
  return absl::OkStatus();
}

SparseShardRows GrpcSparseClient::RowsOf(Call* c) const {
  SparseShardRows rows;
  rows.gradients = std::move(c->gradients);
  rows.pulls = std::move(c->pull_rows);
  for (Call::Pull& p : c->pulls) {
    rows.pull_row_floats.push_back(c->step->dims[p.entry]);
    rows.pull_entry.push_back(p.entry);
    rows.pull_positions.push_back(std::move(p.positions));
  }
  c->pulls.clear();
  return rows;
}

std::unique_ptr<GrpcSparseClient::Call> GrpcSparseClient::PartCall(
    const Call& whole, SparseShardRows rows, size_t part, size_t parts) const {
  auto c = std::make_unique<Call>();
  c->step = whole.step;
  c->shard = whole.shard;
  // One part is the call as it was (the bounds only overestimate).
  c->part = parts > 1 ? static_cast<uint32_t>(part) : 0;
  c->parts = parts > 1 ? static_cast<uint32_t>(parts) : 0;
  for (const SparseRowsOut& g : rows.gradients) c->rows_pushed += g.ids.size();
  c->gradients = std::move(rows.gradients);
  c->pull_rows = std::move(rows.pulls);
  for (size_t j = 0; j < c->pull_rows.size(); ++j) {
    c->rows_pulled += c->pull_rows[j].ids.size();
    c->pulls.push_back({rows.pull_entry[j], std::move(rows.pull_positions[j])});
  }
  return c;
}

RequestHandle GrpcSparseClient::Start(SparseStep s) {
  const RequestHandle handle =
      tracker().Open(absl::StrCat("sparse step ", s.step));
  auto finish_now = [&s, &handle, this](const absl::Status& status) {
    if (s.done) s.done(status);
    tracker().Close(handle, status);
    return handle;
  };
  absl::StatusOr<std::vector<int>> index =
      CheckSparseStep(spec_, s.push, s.tables);
  if (!index.ok()) return finish_now(index.status());
  auto step = std::make_unique<Step>();
  step->handle = handle;
  step->args = std::move(s);
  absl::Status planned = Plan(step.get(), *index);
  if (!planned.ok() || step->calls.empty()) {
    s.done = std::move(step->args.done);
    return finish_now(planned);  // OK: a pull of nothing
  }
  std::vector<Call*> calls;
  {
    absl::MutexLock lock(&mu_);
    if (!stopping_) {
      stats_.steps++;
      step->open = static_cast<int>(step->calls.size());
      for (auto& c : step->calls) {
        if (c->parts > 0) stats_.parts++;
        if (c->parts > 0 && c->part == 0) stats_.split_calls++;
        ArmLocked(c.get());
        calls.push_back(c.get());
      }
      ++active_;
      steps_[handle.id()] = std::move(step);
    }
  }
  if (calls.empty()) {
    s.done = std::move(step->args.done);
    return finish_now(absl::CancelledError("sparse client shutting down"));
  }
  // Once the last is sent the step may be over and gone: touch only calls.
  for (Call* c : calls) Send(c);
  return handle;
}

void GrpcSparseClient::Cancel(RequestHandle handle) {
  Outcome outcome;
  {
    absl::MutexLock lock(&mu_);
    auto it = steps_.find(handle.id());
    if (it == steps_.end()) return;
    Step* step = it->second.get();
    if (!step->status.ok()) return;  // its calls are ending already
    step->status = absl::CancelledError(
        absl::StrCat("sparse step ", step->args.step, ": cancelled"));
    CancelCallsLocked(step, &outcome);
  }
  Settle(std::move(outcome));
}

void GrpcSparseClient::ArmLocked(Call* call) {
  call->attempt++;
  call->state = Call::State::kOnWire;
  call->request =
      EncodeSparseRequest(HeadOf(*call), call->gradients, call->pull_rows);
  call->response.Clear();
  call->reply = SparseReplyInfo();
  call->context = std::make_shared<grpc::ClientContext>();
  call->context->set_deadline(
      absl::ToChronoTime(absl::Now() + retry_.attempt_deadline()));
  security_->Authorize(call->context.get());
  // Successive attempts and steps alternate over the shard's channels.
  call->channel = static_cast<uint32_t>(
      stats_.requests % static_cast<uint64_t>(channels_->channels_per_shard()));
  call->stub = channels_->stub(call->shard, call->channel);
  stats_.requests++;
  if (call->attempt > 1) stats_.retries++;
  stats_.bytes_sent += call->request_bytes;
}

void GrpcSparseClient::Send(Call* call) {
  call->stub->UnaryCall(call->context.get(), kSparseExchangeRpc,
                        grpc::StubOptions(), &call->request, &call->response,
                        [this, call](grpc::Status s) { OnDone(call, s); });
}

absl::Status GrpcSparseClient::Scatter(Call* call) const {
  const Step& step = *call->step;
  std::vector<size_t> dims;
  for (const Call::Pull& p : call->pulls) dims.push_back(step.dims[p.entry]);
  return ReadSparseReply(
      call->response, call->pull_rows, dims,
      [&](size_t j, size_t i) {
        const Call::Pull& p = call->pulls[j];
        return step.args.tables[p.entry].pull_rows.data() +
               size_t{p.positions[i]} * dims[j];
      },
      &call->reply);
}

// Runs on a gRPC callback thread. Rows are copied outside the lock: each
// call owns its positions of pull_rows.
void GrpcSparseClient::OnDone(Call* call, const grpc::Status& grpc_status) {
  absl::Status status = FromGrpcStatus(grpc_status);
  if (status.ok()) status = Scatter(call);
  const size_t reply_bytes = status.ok() ? call->reply.bytes : 0;
  Outcome outcome;
  {
    absl::MutexLock lock(&mu_);
    Step* step = call->step;
    channels_->NoteHealth(call->shard, status);
    if (status.ok()) {
      stats_.bytes_received += reply_bytes;
      stats_.rows_pushed += call->rows_pushed;
      stats_.rows_pulled += call->rows_pulled;
      if (call->reply.duplicate) stats_.duplicates++;
      if (call->reply.stale) stats_.stale++;
    } else if (retry_.RetriesPaused(status, call->attempt,
                                    &call->paused_since) &&
               step->status.ok()) {
      // A pause ends at the commit: the first backoff, not a growing one.
      const bool paused = call->paused_since != absl::InfinitePast();
      call->retry_at = absl::Now() + retry_.Backoff(paused ? 1 : call->attempt);
      call->state = Call::State::kBackoff;
      backoff_.push_back(call);
      retry_wake_ = true;
      return;
    } else {
      // Where the relocator looked, for a shard that stayed unreachable.
      const std::string note = status.code() == absl::StatusCode::kUnavailable
                                   ? channels_->Note(call->shard)
                                   : "";
      status = absl::Status(
          status.code(),
          absl::StrCat("sparse step ", step->args.step, ": shard ", call->shard,
                       " at ", channels_->address(call->shard), " (attempt ",
                       call->attempt, "): ", status.message(),
                       note.empty() ? "" : "; ", note));
    }
    EndCallLocked(call, std::move(status), &outcome);
  }
  // The call (and its step) may be gone now.
  Settle(std::move(outcome));
}

void GrpcSparseClient::EndCallLocked(Call* call, absl::Status status,
                                     Outcome* outcome) {
  Step* step = call->step;
  call->state = Call::State::kEnded;
  if (!status.ok() && step->status.ok()) {
    step->status = std::move(status);
    CancelCallsLocked(step, outcome);
  }
  if (--step->open == 0) TakeOverLocked(step, outcome);
}

void GrpcSparseClient::CancelCallsLocked(Step* step, Outcome* outcome) {
  for (auto& owned : step->calls) {
    Call* c = owned.get();
    if (c->state == Call::State::kOnWire) {
      outcome->cancel.push_back(c->context);  // OnDone ends it
    } else if (c->state == Call::State::kBackoff) {
      backoff_.erase(std::find(backoff_.begin(), backoff_.end(), c));
      c->state = Call::State::kEnded;
      if (--step->open == 0) TakeOverLocked(step, outcome);
    }
  }
}

void GrpcSparseClient::TakeOverLocked(Step* step, Outcome* outcome) {
  auto it = steps_.find(step->handle.id());
  outcome->over.push_back(std::move(it->second));
  steps_.erase(it);
}

void GrpcSparseClient::Settle(Outcome outcome) {
  // The contexts are shared: a call may end (and its step go) meanwhile.
  // This loop touches nothing of the client, which may be gone once the
  // last step's `done` ran on another thread.
  for (auto& context : outcome.cancel) context->TryCancel();
  for (auto& step : outcome.over) {
    if (step->args.done) step->args.done(step->status);
    tracker().Close(step->handle, step->status);
    step.reset();
    absl::MutexLock lock(&mu_);
    --active_;
  }
}

// The retry thread: sleeps until a call's backoff is over (or it is woken
// by a new one), then sends it again with attempt + 1.
void GrpcSparseClient::RetryLoop() {
  absl::MutexLock lock(&mu_);
  while (true) {
    absl::Time next = absl::InfiniteFuture();
    for (Call* c : backoff_) next = std::min(next, c->retry_at);
    auto woken = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      return retry_wake_ || quit_;
    };
    mu_.AwaitWithDeadline(absl::Condition(&woken), next);
    retry_wake_ = false;
    if (quit_) return;
    const absl::Time now = absl::Now();
    std::vector<Call*> due, waiting;
    for (Call* c : backoff_) (c->retry_at <= now ? due : waiting).push_back(c);
    backoff_.swap(waiting);
    for (Call* c : due) ArmLocked(c);
    mu_.Unlock();
    for (Call* c : due) Send(c);
    mu_.Lock();
  }
}

}  // namespace ps
