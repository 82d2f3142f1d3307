#include "worker/sparse_client.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/defaults.h"
#include "common/grpc_status.h"
#include "common/status_macros.h"
#include "core/sparse_ids.h"
#include "spdlog/spdlog.h"

namespace ps {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "ids and values travel as little-endian bytes, copied as is");

namespace {

// Backoff doubles per attempt up to this many doublings (then max_backoff).
constexpr int kMaxBackoffDoublings = 16;
// Calls that wait for other workers outlive the job's step deadline by this
// much, so the shard's error naming the missing workers arrives first (as
// worker/async_ps_client.cc).
constexpr absl::Duration kStepDeadlineMargin = absl::Seconds(5);
// A reply's bytes beyond its ids and values, per SparseRows (tags, lengths).
constexpr size_t kRowsOverheadBytes = 32;

int FindTable(const JobSpec& spec, const std::string& name) {
  for (int i = 0; i < spec.tables_size(); ++i) {
    if (spec.tables(i).name() == name) return i;
  }
  return -1;
}

absl::Status CheckIds(absl::Span<const uint64_t> ids, uint64_t num_ids,
                      const std::string& at) {
  if (num_ids == 0) return absl::OkStatus();
  for (size_t k = 0; k < ids.size(); ++k) {
    if (ids[k] >= num_ids) {
      return absl::InvalidArgumentError(absl::StrCat(
          at, "[", k, "]: id ", ids[k], " is not below num_ids ", num_ids));
    }
  }
  return absl::OkStatus();
}

// The deadline of one attempt (see the class comment).
absl::Duration AttemptDeadline(const PsClientOptions& options,
                               const JobSpec& spec) {
  if (spec.consistency().mode() == ASP) return options.rpc_deadline;
  const uint32_t step_ms = spec.consistency().step_deadline_ms() > 0
                               ? spec.consistency().step_deadline_ms()
                               : kDefaultStepDeadlineMs;
  return std::max(options.rpc_deadline,
                  absl::Milliseconds(step_ms) + kStepDeadlineMargin);
}

}  // namespace

absl::StatusOr<std::vector<int>> CheckSparseStep(
    const JobSpec& spec, bool push, absl::Span<const SparseTableStep> tables) {
  std::vector<int> index(tables.size(), -1);
  for (size_t i = 0; i < tables.size(); ++i) {
    const SparseTableStep& t = tables[i];
    const std::string at = absl::StrCat("tables[", i, "]");
    const int k = FindTable(spec, t.table);
    if (k < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          at, ".table: \"", t.table, "\" is not a table of the job"));
    }
    for (size_t j = 0; j < i; ++j) {
      if (index[j] == k) {
        return absl::InvalidArgumentError(absl::StrCat(
            at, ".table: \"", t.table, "\" is also tables[", j, "]"));
      }
    }
    index[i] = k;
    const uint64_t dim = spec.tables(k).dim();
    if (!push && !t.push_ids.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          at, ".push_ids: ", t.push_ids.size(), " ids in a step without push"));
    }
    if (t.push_grads.size() != t.push_ids.size() * dim) {
      return absl::InvalidArgumentError(absl::StrCat(
          at, ".push_grads: ", t.push_grads.size(), " floats, expected ",
          t.push_ids.size(), " ids x dim ", dim));
    }
    if (t.pull_rows.size() != t.pull_ids.size() * dim) {
      return absl::InvalidArgumentError(absl::StrCat(
          at, ".pull_rows: ", t.pull_rows.size(), " floats, expected ",
          t.pull_ids.size(), " ids x dim ", dim));
    }
    if (t.pull_ids.size() > std::numeric_limits<uint32_t>::max()) {
      return absl::InvalidArgumentError(absl::StrCat(
          at, ".pull_ids: ", t.pull_ids.size(), " ids, over 2^32"));
    }
    const uint64_t num_ids = spec.tables(k).num_ids();
    PS_RETURN_IF_ERROR(CheckIds(t.push_ids, num_ids, at + ".push_ids"));
    PS_RETURN_IF_ERROR(CheckIds(t.pull_ids, num_ids, at + ".pull_ids"));
  }
  return index;
}

absl::Status SparseClient::Exchange(uint64_t step, bool push,
                                    absl::Span<const SparseTableStep> tables) {
  absl::Notification over;
  absl::Status status;
  SparseStep s;
  s.step = step;
  s.push = push;
  s.tables.assign(tables.begin(), tables.end());
  s.done = [&](const absl::Status& st) {
    status = st;
    over.Notify();
  };
  Start(std::move(s));
  // Bounded: every attempt has a deadline and the attempts are bounded.
  over.WaitForNotification();
  return status;
}

// ---------------------------------------------------------------------------
// GrpcSparseClient

// One Start. Owned by steps_ while its calls run, then by Finish.
struct GrpcSparseClient::Step {
  uint64_t id = 0;
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
  // request.pull(j) asks for the ids at `positions` of step entry `entry`.
  struct Pull {
    size_t entry = 0;
    std::vector<uint32_t> positions;
  };

  Step* step = nullptr;
  uint32_t shard = 0;
  uint32_t channel = 0;
  // The attempt's stub (set by ArmLocked: the shard's may change after).
  ParameterServer::Stub* stub = nullptr;
  State state = State::kOnWire;  // (mu_)
  int attempt = 0;
  absl::Time retry_at;
  SparseExchangeRequest request;
  size_t request_bytes = 0;
  SparseExchangeResponse response;
  // Shared with a sibling that cancels it outside mu_.
  std::shared_ptr<grpc::ClientContext> context;
  std::vector<Pull> pulls;
  uint64_t rows_pushed = 0;
  uint64_t rows_pulled = 0;
};

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
      attempt_deadline_(AttemptDeadline(options, assignment.spec())),
      num_shards_(static_cast<uint32_t>(assignment.shard_addresses_size())) {
  std::vector<std::string> addresses;
  {
    absl::MutexLock lock(&mu_);
    for (const std::string& address : assignment.shard_addresses()) {
      addresses_.push_back(address);
      stubs_.push_back(StubsTo(address));
    }
    suspect_.assign(num_shards_, false);
    addresses = addresses_;
  }
  retry_thread_ = std::thread([this] { RetryLoop(); });
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

std::vector<std::unique_ptr<ParameterServer::Stub>> GrpcSparseClient::StubsTo(
    const std::string& address) const {
  std::vector<std::unique_ptr<ParameterServer::Stub>> stubs;
  for (int c = 0; c < std::max(1, options_.channels_per_shard); ++c) {
    stubs.push_back(ParameterServer::NewStub(
        security_->NewChannel(address, options_.max_message_bytes)));
  }
  return stubs;
}

void GrpcSparseClient::OnShardMoved(uint32_t shard,
                                    const std::string& address) {
  std::vector<std::unique_ptr<ParameterServer::Stub>> stubs = StubsTo(address);
  absl::MutexLock lock(&mu_);
  spdlog::warn("job {}: shard {} moved from {} to {}; sparse retries go there",
               job_id_, shard, addresses_[shard], address);
  addresses_[shard] = address;
  retired_stubs_.push_back(std::move(stubs_[shard]));
  stubs_[shard] = std::move(stubs);
  const absl::Time now = absl::Now();
  for (Call* call : backoff_) {
    if (call->shard == shard) call->retry_at = now;
  }
  retry_wake_ = true;
}

void GrpcSparseClient::NoteShardHealthLocked(uint32_t shard,
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
  relocator_.reset();
}

SparseClientStats GrpcSparseClient::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

absl::Status GrpcSparseClient::Plan(Step* step,
                                    const std::vector<int>& table_index) const {
  const SparseStep& a = step->args;
  const uint32_t n = num_shards();
  std::vector<Call*> by_shard(n, nullptr);
  auto call_of = [&](uint32_t s) {
    if (by_shard[s] == nullptr) {
      step->calls.push_back(std::make_unique<Call>());
      Call* c = step->calls.back().get();
      c->step = step;
      c->shard = s;
      c->request.set_job_id(job_id_);
      c->request.set_worker(rank_);
      c->request.set_step(a.step);
      c->request.set_push(a.push);
      by_shard[s] = c;
    }
    return by_shard[s];
  };
  if (a.push) {
    for (uint32_t s = 0; s < n; ++s) call_of(s);
  }
  std::vector<uint32_t> shard_of;
  std::vector<size_t> count(n);
  std::vector<char*> id_out(n), value_out(n);
  for (size_t e = 0; e < a.tables.size(); ++e) {
    const SparseTableStep& t = a.tables[e];
    const uint32_t dim = spec_.tables(table_index[e]).dim();
    const size_t row_bytes = dim * sizeof(float);
    step->dims.push_back(dim);
    // Pushed rows: one SparseRows per shard that owns some.
    if (!t.push_ids.empty()) {
      shard_of.resize(t.push_ids.size());
      std::fill(count.begin(), count.end(), 0);
      for (size_t k = 0; k < t.push_ids.size(); ++k) {
        shard_of[k] = ShardForId(t.push_ids[k], n);
        ++count[shard_of[k]];
      }
      for (uint32_t s = 0; s < n; ++s) {
        if (count[s] == 0) continue;
        Call* c = call_of(s);
        SparseRows* rows = c->request.add_gradients();
        rows->set_table(t.table);
        rows->mutable_ids()->resize(count[s] * sizeof(uint64_t));
        rows->mutable_values()->resize(count[s] * row_bytes);
        id_out[s] = rows->mutable_ids()->data();
        value_out[s] = rows->mutable_values()->data();
        c->rows_pushed += count[s];
      }
      for (size_t k = 0; k < t.push_ids.size(); ++k) {
        const uint32_t s = shard_of[k];
        std::memcpy(id_out[s], &t.push_ids[k], sizeof(uint64_t));
        std::memcpy(value_out[s], t.push_grads.data() + k * dim, row_bytes);
        id_out[s] += sizeof(uint64_t);
        value_out[s] += row_bytes;
      }
    }
    // Pulled ids: one SparseRows per shard, and where each goes back.
    if (!t.pull_ids.empty()) {
      shard_of.resize(t.pull_ids.size());
      std::fill(count.begin(), count.end(), 0);
      for (size_t k = 0; k < t.pull_ids.size(); ++k) {
        shard_of[k] = ShardForId(t.pull_ids[k], n);
        ++count[shard_of[k]];
      }
      std::vector<Call::Pull*> pull_of(n, nullptr);
      for (uint32_t s = 0; s < n; ++s) {
        if (count[s] == 0) continue;
        Call* c = call_of(s);
        SparseRows* rows = c->request.add_pull();
        rows->set_table(t.table);
        rows->mutable_ids()->resize(count[s] * sizeof(uint64_t));
        id_out[s] = rows->mutable_ids()->data();
        c->pulls.emplace_back();
        c->pulls.back().entry = e;
        c->pulls.back().positions.reserve(count[s]);
        c->rows_pulled += count[s];
        pull_of[s] = &c->pulls.back();
      }
      for (size_t k = 0; k < t.pull_ids.size(); ++k) {
        const uint32_t s = shard_of[k];
        std::memcpy(id_out[s], &t.pull_ids[k], sizeof(uint64_t));
        id_out[s] += sizeof(uint64_t);
        pull_of[s]->positions.push_back(static_cast<uint32_t>(k));
      }
    }
  }
  // Both directions must fit one message.
  const size_t limit = static_cast<size_t>(options_.max_message_bytes);
  for (const auto& c : step->calls) {
    c->request_bytes = c->request.ByteSizeLong();
    size_t reply_bytes = 0;
    for (const Call::Pull& p : c->pulls) {
      const SparseTableStep& t = a.tables[p.entry];
      reply_bytes +=
          p.positions.size() * (sizeof(uint64_t) + step->dims[p.entry] * 4) +
          t.table.size() + kRowsOverheadBytes;
    }
    if (c->request_bytes > limit || reply_bytes > limit) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tables: step ", a.step, " needs a request of ", c->request_bytes,
          " bytes and a reply of about ", reply_bytes, " bytes with shard ",
          c->shard, ", over max_message_bytes ", limit,
          " (fewer ids per step, or a larger limit on workers and shards)"));
    }
  }
  return absl::OkStatus();
}

void GrpcSparseClient::Start(SparseStep s) {
  auto finish_now = [&s](const absl::Status& status) {
    if (s.done) s.done(status);
  };
  absl::StatusOr<std::vector<int>> index =
      CheckSparseStep(spec_, s.push, s.tables);
  if (!index.ok()) return finish_now(index.status());
  auto step = std::make_unique<Step>();
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
      step->id = next_step_id_++;
      step->open = static_cast<int>(step->calls.size());
      for (auto& c : step->calls) {
        ArmLocked(c.get());
        calls.push_back(c.get());
      }
      ++active_;
      steps_[step->id] = std::move(step);
    }
  }
  if (calls.empty()) {
    s.done = std::move(step->args.done);
    return finish_now(absl::CancelledError("sparse client shutting down"));
  }
  // Once the last is sent the step may be over and gone: touch only calls.
  for (Call* c : calls) Send(c);
}

void GrpcSparseClient::ArmLocked(Call* call) {
  call->attempt++;
  call->state = Call::State::kOnWire;
  call->request.set_attempt(static_cast<uint32_t>(call->attempt));
  call->response.Clear();
  call->context = std::make_shared<grpc::ClientContext>();
  call->context->set_deadline(
      absl::ToChronoTime(absl::Now() + attempt_deadline_));
  security_->Authorize(call->context.get());
  // Successive attempts and steps alternate over the shard's channels.
  call->channel =
      static_cast<uint32_t>(stats_.requests % stubs_[call->shard].size());
  call->stub = stubs_[call->shard][call->channel].get();
  stats_.requests++;
  if (call->attempt > 1) stats_.retries++;
  stats_.bytes_sent += call->request_bytes;
}

void GrpcSparseClient::Send(Call* call) {
  call->stub->async()->SparseExchange(
      call->context.get(), &call->request, &call->response,
      [this, call](grpc::Status s) { OnDone(call, s); });
}

absl::Status GrpcSparseClient::Scatter(Call* call) const {
  const SparseExchangeResponse& resp = call->response;
  const Step& step = *call->step;
  if (resp.rows_size() != static_cast<int>(call->pulls.size())) {
    return absl::InternalError(absl::StrCat("reply has ", resp.rows_size(),
                                            " rows entries for ",
                                            call->pulls.size(), " pulled"));
  }
  for (size_t j = 0; j < call->pulls.size(); ++j) {
    const Call::Pull& p = call->pulls[j];
    const SparseRows& rows = resp.rows(static_cast<int>(j));
    const SparseTableStep& t = step.args.tables[p.entry];
    const size_t row_bytes = step.dims[p.entry] * sizeof(float);
    if (rows.table() != t.table ||
        rows.ids() != call->request.pull(static_cast<int>(j)).ids() ||
        rows.values().size() != p.positions.size() * row_bytes) {
      return absl::InternalError(
          absl::StrCat("reply rows[", j, "] (table \"", rows.table(), "\", ",
                       rows.ids().size(), " id bytes, ", rows.values().size(),
                       " value bytes) does not answer pull of ",
                       p.positions.size(), " ids of \"", t.table, "\""));
    }
    const char* in = rows.values().data();
    float* out = t.pull_rows.data();
    const size_t dim = step.dims[p.entry];
    for (uint32_t pos : p.positions) {
      std::memcpy(out + pos * dim, in, row_bytes);
      in += row_bytes;
    }
  }
  return absl::OkStatus();
}

// Runs on a gRPC callback thread. Rows are copied outside the lock: each
// call owns its positions of pull_rows.
void GrpcSparseClient::OnDone(Call* call, const grpc::Status& grpc_status) {
  absl::Status status = FromGrpcStatus(grpc_status);
  if (status.ok()) status = Scatter(call);
  const size_t reply_bytes = status.ok() ? call->response.ByteSizeLong() : 0;
  Outcome outcome;
  {
    absl::MutexLock lock(&mu_);
    Step* step = call->step;
    NoteShardHealthLocked(call->shard, status);
    if (status.ok()) {
      stats_.bytes_received += reply_bytes;
      stats_.rows_pushed += call->rows_pushed;
      stats_.rows_pulled += call->rows_pulled;
      if (call->response.duplicate()) stats_.duplicates++;
      if (call->response.stale()) stats_.stale++;
    } else if (status.code() == absl::StatusCode::kUnavailable &&
               call->attempt < options_.max_attempts && step->status.ok()) {
      const absl::Duration backoff =
          options_.initial_backoff *
          (int64_t{1} << std::min(call->attempt - 1, kMaxBackoffDoublings));
      call->retry_at = absl::Now() + std::min(backoff, options_.max_backoff);
      call->state = Call::State::kBackoff;
      backoff_.push_back(call);
      retry_wake_ = true;
      return;
    } else {
      // Where the relocator looked, for a shard that stayed unreachable.
      const std::string note =
          relocator_ != nullptr &&
                  status.code() == absl::StatusCode::kUnavailable
              ? relocator_->Note(call->shard)
              : "";
      status = absl::Status(
          status.code(),
          absl::StrCat("sparse step ", step->args.step, ": shard ", call->shard,
                       " at ", addresses_[call->shard], " (attempt ",
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
  auto it = steps_.find(step->id);
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
