#include "server/sparse/job_tables.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "core/float_bytes.h"
#include "core/sparse_ids.h"
#include "server/optimizer.h"  // ScopedFlushDenormals

namespace ps {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "ids and values travel as little-endian bytes, copied as is");

struct JobTables::Table {
  TableSpec spec;
  std::unique_ptr<RowOptimizer> optimizer;
  std::unique_ptr<SparseTable> rows;
  SparseTable::Options options;
};

// A pending SparseExchange: answered once SatisfiedLocked() holds.
struct JobTables::Waiter {
  const SparseExchangeRequest* req = nullptr;
  SparseExchangeResponse* resp = nullptr;
  std::function<void(absl::Status)> done;
  uint64_t step = 0;
  uint64_t need_version = 0;  // BSP
  uint64_t need_clock = 0;    // SSP
  absl::Time deadline;
  uint64_t answered_version = 0;  // set when it becomes ready
};

namespace {

constexpr char kMagic[] = "PSJT";
// TTL eviction scans a table this many times per evict_after_steps.
constexpr uint64_t kEvictionScansPerTtl = 16;
constexpr uint32_t kFormat = 1;

// A table's name into its initializer's seed, the same everywhere: FNV-1a's
// loop, with tests/checksum.h's offset basis (not core/init.cc's Fnv1a, whose
// basis differs: switching would change every table's initial rows).
uint64_t NameHash(absl::string_view name) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : name) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

RowOptimizerKind RowKind(OptimizerKind kind) {
  switch (kind) {
    case SGD:
      return RowOptimizerKind::kSgd;
    case ADAGRAD:
      return RowOptimizerKind::kAdagrad;
    case ADAM:
      return RowOptimizerKind::kAdam;
    case FTRL:
      return RowOptimizerKind::kFtrl;
    default:
      return RowOptimizerKind::kUnspecified;
  }
}

RowOptimizerOptions RowOptions(const OptimizerSpec& o) {
  RowOptimizerOptions r;
  r.kind = RowKind(o.kind());
  r.learning_rate = o.learning_rate();
  r.weight_decay = o.weight_decay();
  r.initial_accumulator = o.initial_accumulator();
  if (o.has_epsilon()) r.epsilon = o.epsilon();
  if (o.has_beta1()) r.beta1 = o.beta1();
  if (o.has_beta2()) r.beta2 = o.beta2();
  if (o.has_ftrl_beta()) r.ftrl_beta = o.ftrl_beta();
  r.l1 = o.l1();
  r.l2 = o.l2();
  return r;
}

RowInitializer Initializer(const TableSpec& t, uint64_t job_seed) {
  RowInitializer init;
  switch (t.init().kind()) {
    case CONSTANT:
      init.kind = RowInitializer::Kind::kConstant;
      init.value = t.init().value();
      break;
    case UNIFORM:
      init.kind = RowInitializer::Kind::kUniform;
      init.scale = t.init().scale();
      break;
    case NORMAL:
      init.kind = RowInitializer::Kind::kNormal;
      init.scale = t.init().scale();
      break;
    default:
      init.kind = RowInitializer::Kind::kZeros;
  }
  init.seed = MixId64(job_seed ^ NameHash(t.name()));
  return init;
}

// Prefixes a table's or optimizer's own error with the spec field it came
// from.
absl::Status InField(const absl::Status& s, absl::string_view at) {
  return absl::Status(s.code(), absl::StrCat(at, ": ", s.message()));
}

size_t IdCount(const SparseRows& r) { return r.ids().size() / 8; }

uint64_t IdAt(const std::string& bytes, size_t i) {
  uint64_t id;
  std::memcpy(&id, bytes.data() + i * sizeof(id), sizeof(id));
  return id;
}

std::vector<uint64_t> DecodeIds(const std::string& bytes) {
  std::vector<uint64_t> ids(bytes.size() / 8);
  if (!ids.empty()) std::memcpy(ids.data(), bytes.data(), ids.size() * 8);
  return ids;
}

// Little-endian fixed-width fields of the save stream.
template <typename T>
absl::Status Put(ByteSink& sink, T v) {
  return sink.Write(
      absl::string_view(reinterpret_cast<const char*>(&v), sizeof(v)));
}
template <typename T>
absl::Status Get(ByteSource& source, T* v) {
  return source.Read(sizeof(T), reinterpret_cast<char*>(v));
}
template <typename T>
absl::Status PutVector(ByteSink& sink, const std::vector<T>& v) {
  PS_RETURN_IF_ERROR(Put<uint64_t>(sink, v.size()));
  return sink.Write(absl::string_view(reinterpret_cast<const char*>(v.data()),
                                      v.size() * sizeof(T)));
}
template <typename T>
absl::Status GetVector(ByteSource& source, uint64_t max, std::vector<T>* v) {
  uint64_t n = 0;
  PS_RETURN_IF_ERROR(Get(source, &n));
  if (n > max) {
    return absl::DataLossError(
        absl::StrCat("sparse tables checkpoint: a list of ", n,
                     " entries, more than the ", max, " possible"));
  }
  v->resize(n);
  return source.Read(n * sizeof(T), reinterpret_cast<char*>(v->data()));
}

}  // namespace

JobTables::JobTables(const JobSpec& spec, Placement where)
    : job_id_(spec.name()),
      where_(where),
      mode_(spec.consistency().mode() == CONSISTENCY_UNSPECIFIED
                ? BSP
                : spec.consistency().mode()),
      staleness_(spec.consistency().staleness()),
      backup_workers_(spec.consistency().backup_workers()),
      step_deadline_(
          absl::Milliseconds(spec.consistency().step_deadline_ms() > 0
                                 ? spec.consistency().step_deadline_ms()
                                 : kDefaultStepDeadlineMs)),
      created_(absl::Now()) {
  absl::MutexLock l(&mu_);
  active_.assign(where.num_workers, 1);
  pending_.resize(where.num_workers);
  pushed_steps_.assign(where.num_workers, 0);
  claimed_steps_.assign(where.num_workers, 0);
}

JobTables::~JobTables() { Close(absl::UnavailableError("shutting down")); }

absl::StatusOr<std::unique_ptr<JobTables>> JobTables::Create(
    const JobSpec& spec, Placement where) {
  if (where.num_workers == 0 || where.num_shards == 0 ||
      where.shard_id >= where.num_shards) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "sparse tables: bad placement (shard %d of %d, %d workers)",
        where.shard_id, where.num_shards, where.num_workers));
  }
  std::unique_ptr<JobTables> t(new JobTables(spec, where));
  for (int i = 0; i < spec.tables_size(); ++i) {
    const TableSpec& ts = spec.tables(i);
    const std::string at = absl::StrCat("tables[", i, "]");
    auto table = std::make_unique<Table>();
    table->spec = ts;
    absl::StatusOr<std::unique_ptr<RowOptimizer>> opt =
        RowOptimizer::Create(RowOptions(ts.optimizer()));
    if (!opt.ok()) return InField(opt.status(), at);
    table->optimizer = std::move(*opt);
    SparseTable::Options& o = table->options;
    o.name = ts.name();
    o.dim = ts.dim();
    o.state_floats_per_row = table->optimizer->StateFloatsPerRow(ts.dim());
    o.init = Initializer(ts, spec.seed());
    o.id_bound = ts.num_ids();
    o.admission_count = std::max<uint32_t>(ts.admit_after(), 1);
    o.ttl_steps = ts.evict_after_steps();
    o.lru = ts.evict_lru();
    o.memory_budget_bytes = ts.memory_budget_bytes();
    o.hot_ids = ts.has_hot_ids() ? ts.hot_ids() : kDefaultTableHotIds;
    absl::StatusOr<std::unique_ptr<SparseTable>> rows = SparseTable::Create(o);
    if (!rows.ok()) return InField(rows.status(), at);
    table->rows = std::move(*rows);
    if (!t->table_index_.emplace(ts.name(), t->tables_.size()).second) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s.name: \"%s\" is used by another table", at, ts.name()));
    }
    t->tables_.push_back(std::move(table));
  }
  return t;
}

const JobTables::Table* JobTables::FindTable(const std::string& name) const {
  auto it = table_index_.find(name);
  return it == table_index_.end() ? nullptr : tables_[it->second].get();
}

absl::Status JobTables::CheckRows(const SparseRows& rows, bool push,
                                  const std::string& at) const {
  const Table* t = FindTable(rows.table());
  if (t == nullptr) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s.table: unknown table \"%s\" in job %s", at, rows.table(), job_id_));
  }
  if (rows.ids().size() % 8 != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s.ids: %d bytes, not a whole number of uint64 ids (table %s)", at,
        rows.ids().size(), rows.table()));
  }
  const size_t n = IdCount(rows);
  const size_t want = push ? n * t->spec.dim() * sizeof(float) : 0;
  if (rows.values().size() != want) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s.values: %d bytes, want %d (%d ids x dim %d%s; table %s)", at,
        rows.values().size(), want, n, t->spec.dim(),
        push ? "" : ", none in a pull", rows.table()));
  }
  // Read in place: the push and the reply decode the ids once each.
  for (size_t i = 0; i < n; ++i) {
    const uint64_t id = IdAt(rows.ids(), i);
    if (t->spec.num_ids() != 0 && id >= t->spec.num_ids()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s.ids[%d]: id %d is outside table %s (num_ids %d)",
                          at, i, id, rows.table(), t->spec.num_ids()));
    }
    const uint32_t shard = ShardForId(id, where_.num_shards);
    if (shard != where_.shard_id) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s.ids[%d]: id %d belongs to shard %d, not %d (table %s)", at, i, id,
          shard, where_.shard_id, rows.table()));
    }
  }
  const int64_t bad = push ? FirstNonFinite(rows.values()) : -1;
  if (bad >= 0) {
    float v;
    std::memcpy(&v, rows.values().data() + bad * sizeof(float), sizeof(v));
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s.values[%d]: %g for id %d is not finite (table %s)", at, bad, v,
        IdAt(rows.ids(), bad / t->spec.dim()), rows.table()));
  }
  return absl::OkStatus();
}

absl::Status JobTables::CheckRequest(const SparseExchangeRequest& req) const {
  if (req.worker() >= where_.num_workers) {
    return absl::InvalidArgumentError(
        absl::StrFormat("worker: %d is out of range [0, %d) for job %s",
                        req.worker(), where_.num_workers, job_id_));
  }
  if (!req.push() && req.gradients_size() > 0) {
    return absl::InvalidArgumentError(
        "gradients: set without push (set push: true to push them)");
  }
  std::vector<bool> seen(tables_.size(), false);
  for (int i = 0; i < req.gradients_size(); ++i) {
    const std::string at = absl::StrCat("gradients[", i, "]");
    PS_RETURN_IF_ERROR(CheckRows(req.gradients(i), true, at));
    const size_t k = table_index_.at(req.gradients(i).table());
    if (seen[k]) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s.table: table %s appears twice in one push", at,
                          req.gradients(i).table()));
    }
    seen[k] = true;
  }
  for (int i = 0; i < req.pull_size(); ++i) {
    PS_RETURN_IF_ERROR(
        CheckRows(req.pull(i), false, absl::StrCat("pull[", i, "]")));
  }
  return absl::OkStatus();
}

absl::StatusOr<JobTables::Pushed> JobTables::DecodePush(
    const SparseExchangeRequest& req) const {
  Pushed p;
  p.ids.resize(tables_.size());
  p.grads.resize(tables_.size());
  for (const SparseRows& rows : req.gradients()) {
    const size_t k = table_index_.at(rows.table());
    p.ids[k] = DecodeIds(rows.ids());
    p.grads[k].resize(rows.values().size() / sizeof(float));
    if (!p.grads[k].empty()) {
      std::memcpy(p.grads[k].data(), rows.values().data(),
                  rows.values().size());
    }
    p.bytes += rows.ids().size() + rows.values().size();
  }
  return p;
}

absl::Status JobTables::Apply(const std::vector<const Pushed*>& pushes,
                              float scale, uint64_t step) {
  for (size_t k = 0; k < tables_.size(); ++k) {
    Table& t = *tables_[k];
    // One push is applied from its own buffers; several concatenated.
    std::vector<uint64_t> joined_ids;
    std::vector<float> joined_grads;
    absl::Span<const uint64_t> ids;
    absl::Span<const float> grads;
    if (pushes.size() == 1) {
      ids = pushes[0]->ids[k];
      grads = pushes[0]->grads[k];
    } else {
      for (const Pushed* p : pushes) {
        joined_ids.insert(joined_ids.end(), p->ids[k].begin(), p->ids[k].end());
        joined_grads.insert(joined_grads.end(), p->grads[k].begin(),
                            p->grads[k].end());
      }
      ids = joined_ids;
      grads = joined_grads;
    }
    if (ids.empty()) continue;
    const int dim = static_cast<int>(t.spec.dim());
    std::vector<float> scaled(dim);
    const RowOptimizer& opt = *t.optimizer;
    ScopedFlushDenormals flush;
    PS_RETURN_IF_ERROR(t.rows->Push(
        ids, grads, step,
        [&](float* row, float* state, const float* grad, uint64_t) {
          const float* g = grad;
          if (scale != 1.0f) {
            for (int e = 0; e < dim; ++e) scaled[e] = grad[e] * scale;
            g = scaled.data();
          }
          opt.UpdateInFlushScope(row, state, g, dim);
        }));
  }
  return absl::OkStatus();
}

absl::Status JobTables::MaybeCompleteStepLocked() {
  uint32_t active = 0, pushed = 0;
  std::vector<const Pushed*> order;
  for (uint32_t w = 0; w < where_.num_workers; ++w) {
    if (!active_[w]) continue;
    ++active;
    if (pending_[w] != nullptr) {
      ++pushed;
      order.push_back(pending_[w].get());
    }
  }
  const uint32_t quorum =
      active > backup_workers_ ? active - backup_workers_ : 1;
  if (active == 0 || pushed < quorum) return absl::OkStatus();
  // Pushes of ranks no longer active stay out of the sum.
  const absl::Status s =
      Apply(order, 1.0f / static_cast<float>(pushed), version_);
  // Either way the step's pushes are done with: applied, or dropped when
  // the step cannot complete (the tables are as before it).
  for (auto& p : pending_) p.reset();
  pending_bytes_ = 0;
  if (!s.ok()) return s;
  ++version_;
  EvictExpired(version_);
  return absl::OkStatus();
}

void JobTables::TakeWaitsBeyondLocked(
    uint64_t version, std::vector<std::shared_ptr<Waiter>>* out) {
  auto keep = std::remove_if(waiters_.begin(), waiters_.end(),
                             [&](const std::shared_ptr<Waiter>& w) {
                               if (w->need_version <= version) return false;
                               out->push_back(w);
                               return true;
                             });
  waiters_.erase(keep, waiters_.end());
}

absl::Status JobTables::PushLocked(const SparseExchangeRequest& req,
                                   Pushed pushed,
                                   SparseExchangeResponse* resp) {
  const uint32_t w = req.worker();
  if (!active_[w]) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "worker %d is not an active member of job %s", w, job_id_));
  }
  if (mode_ == BSP) {
    if (req.step() < version_) {
      resp->set_stale(true);
      return absl::OkStatus();
    }
    if (req.step() > version_) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "step: %d is ahead of the sparse tables' step %d on shard %d%s",
          req.step(), version_, where_.shard_id,
          restored_
              ? absl::StrFormat(" (the shard restarted and restored the tables "
                                "from their checkpoint of step %d; the updates "
                                "after it are lost)",
                                restored_version_)
              : ""));
    }
    if (pending_[w] != nullptr) {
      resp->set_duplicate(true);
      return absl::OkStatus();
    }
    pending_bytes_ += pushed.bytes;
    pending_[w] = std::make_unique<Pushed>(std::move(pushed));
    return MaybeCompleteStepLocked();
  }
  return absl::InternalError("PushLocked is for BSP");
}

absl::Status JobTables::PushUnordered(
    const SparseExchangeRequest& req, Pushed pushed,
    SparseExchangeResponse* resp, const std::shared_ptr<Waiter>& waiter,
    std::vector<std::shared_ptr<Waiter>>* ready) {
  const uint32_t w = req.worker();
  const uint64_t next = req.step() + 1;
  absl::ReaderMutexLock applying(&apply_mu_);
  uint64_t claimed_before = 0;
  {
    absl::MutexLock l(&mu_);
    PS_RETURN_IF_ERROR(closed_);
    if (!active_[w]) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "worker %d is not an active member of job %s", w, job_id_));
    }
    if (req.step() < claimed_steps_[w]) {
      resp->set_duplicate(true);
      waiters_.push_back(waiter);
      CollectReadyLocked(ready);
      return absl::OkStatus();
    }
    claimed_before = claimed_steps_[w];
    claimed_steps_[w] = next;
  }
  const absl::Status applied = Apply({&pushed}, 1.0f, req.step());
  uint64_t evict_at = 0;
  {
    absl::MutexLock l(&mu_);
    if (!applied.ok()) {
      // Not applied: a retry of this step may try again.
      if (claimed_steps_[w] == next) claimed_steps_[w] = claimed_before;
      return applied;
    }
    pushed_steps_[w] = std::max(pushed_steps_[w], next);
    ++version_;
    const uint64_t slowest = SlowestLocked();
    if (slowest > evicted_at_) evict_at = evicted_at_ = slowest;
    waiters_.push_back(waiter);
    CollectReadyLocked(ready);
  }
  // Once per advance of the slowest clock, not per push.
  if (evict_at > 0) EvictExpired(evict_at);
  return absl::OkStatus();
}

void JobTables::EvictExpired(uint64_t now) {
  for (const auto& t : tables_) {
    // A scan of the table: every T / 16 steps, so a row idle for T steps
    // goes within T + T / 16.
    const uint64_t period = std::max<uint64_t>(
        1, t->spec.evict_after_steps() / kEvictionScansPerTtl);
    if (t->spec.evict_after_steps() > 0 && now % period == 0) {
      t->rows->EvictExpired(now);
    }
  }
}

uint64_t JobTables::SlowestLocked() const {
  uint64_t slowest = UINT64_MAX;
  for (uint32_t w = 0; w < where_.num_workers; ++w) {
    if (active_[w]) slowest = std::min(slowest, pushed_steps_[w]);
  }
  return slowest == UINT64_MAX ? 0 : slowest;
}

bool JobTables::SatisfiedLocked(const Waiter& w) const {
  switch (mode_) {
    case ASP:
      return true;
    case SSP:
      return SlowestLocked() >= w.need_clock;
    default:
      return version_ >= w.need_version;
  }
}

void JobTables::CollectReadyLocked(
    std::vector<std::shared_ptr<Waiter>>* ready) {
  auto keep = std::remove_if(waiters_.begin(), waiters_.end(),
                             [&](const std::shared_ptr<Waiter>& w) {
                               if (!SatisfiedLocked(*w)) return false;
                               w->answered_version = version_;
                               ready->push_back(w);
                               return true;
                             });
  waiters_.erase(keep, waiters_.end());
}

void JobTables::Answer(Waiter& w) {
  w.resp->set_version(w.answered_version);
  for (const SparseRows& pull : w.req->pull()) {
    const Table& t = *FindTable(pull.table());
    SparseRows* out = w.resp->add_rows();
    out->set_table(pull.table());
    out->set_ids(pull.ids());
    const std::vector<uint64_t> ids = DecodeIds(pull.ids());
    std::string* values = out->mutable_values();
    values->resize(ids.size() * t.spec.dim() * sizeof(float));
    absl::Span<float> rows(reinterpret_cast<float*>(values->data()),
                           ids.size() * t.spec.dim());
    absl::Status s = t.rows->Pull(ids, rows);
    if (!s.ok()) {
      w.done(s);
      return;
    }
  }
  w.done(absl::OkStatus());
}

void JobTables::Exchange(const SparseExchangeRequest& req,
                         SparseExchangeResponse* resp,
                         std::function<void(absl::Status)> done) {
  absl::Status valid = CheckRequest(req);
  if (!valid.ok()) {
    done(valid);
    return;
  }
  absl::StatusOr<Pushed> pushed = DecodePush(req);
  auto waiter = std::make_shared<Waiter>();
  waiter->req = &req;
  waiter->resp = resp;
  waiter->done = std::move(done);
  waiter->step = req.step();
  const uint64_t next = req.push() ? req.step() + 1 : req.step();
  waiter->need_version = next;
  waiter->need_clock = next > staleness_ ? next - staleness_ : 0;
  waiter->deadline = absl::Now() + step_deadline_;
  std::vector<std::shared_ptr<Waiter>> ready, failed_waits;
  absl::Status failed;
  if (req.push() && mode_ != BSP) {
    failed = PushUnordered(req, std::move(*pushed), resp, waiter, &ready);
    if (!failed.ok()) {
      waiter->done(failed);
      return;
    }
    for (auto& w : ready) Answer(*w);
    return;
  }
  {
    absl::MutexLock l(&mu_);
    if (!closed_.ok()) {
      failed = closed_;
    } else {
      if (req.push()) failed = PushLocked(req, std::move(*pushed), resp);
      if (failed.ok()) {
        waiters_.push_back(waiter);
        CollectReadyLocked(&ready);
      } else if (mode_ == BSP) {
        // A step that failed to apply: its other pushes wait for a version
        // that will not come.
        TakeWaitsBeyondLocked(version_, &failed_waits);
      }
    }
  }
  for (auto& w : failed_waits) w->done(failed);
  if (!failed.ok()) {
    waiter->done(failed);
    return;
  }
  for (auto& w : ready) Answer(*w);
}

void JobTables::SetMembership(const std::vector<uint8_t>& active) {
  std::vector<std::shared_ptr<Waiter>> ready, failed_waits;
  absl::Status failed;
  {
    absl::MutexLock l(&mu_);
    for (uint32_t w = 0; w < where_.num_workers && w < active.size(); ++w) {
      active_[w] = active[w];
    }
    if (mode_ == BSP) failed = MaybeCompleteStepLocked();
    if (!failed.ok()) TakeWaitsBeyondLocked(version_, &failed_waits);
    CollectReadyLocked(&ready);
  }
  for (auto& w : failed_waits) w->done(failed);
  for (auto& w : ready) Answer(*w);
}

std::vector<uint32_t> JobTables::MissingWorkersLocked() const {
  std::vector<uint32_t> missing;
  const uint64_t slowest = SlowestLocked();
  for (uint32_t w = 0; w < where_.num_workers; ++w) {
    if (!active_[w]) continue;
    if (mode_ == BSP ? pending_[w] == nullptr : pushed_steps_[w] == slowest) {
      missing.push_back(w);
    }
  }
  return missing;
}

void JobTables::CheckDeadlines(absl::Time now) {
  std::vector<std::shared_ptr<Waiter>> late;
  std::string missing;
  uint64_t version = 0;
  {
    absl::MutexLock l(&mu_);
    auto keep = std::remove_if(waiters_.begin(), waiters_.end(),
                               [&](const std::shared_ptr<Waiter>& w) {
                                 if (w->deadline > now) return false;
                                 late.push_back(w);
                                 return true;
                               });
    waiters_.erase(keep, waiters_.end());
    if (late.empty()) return;
    missing = absl::StrJoin(MissingWorkersLocked(), ", ");
    version = version_;
  }
  for (auto& w : late) {
    w->done(absl::DeadlineExceededError(absl::StrFormat(
        "job %s sparse tables on shard %d, step %d: no answer within %s "
        "(tables at version %d; waiting for workers [%s])",
        job_id_, where_.shard_id, w->step, absl::FormatDuration(step_deadline_),
        version, missing)));
  }
}

void JobTables::Close(const absl::Status& why) {
  std::vector<std::shared_ptr<Waiter>> waiters;
  {
    absl::MutexLock l(&mu_);
    if (closed_.ok()) closed_ = why;
    waiters.swap(waiters_);
  }
  for (auto& w : waiters) w->done(why);
}

uint64_t JobTables::bytes_used() const {
  uint64_t bytes = 0;
  for (const auto& t : tables_) bytes += t->rows->bytes_used();
  absl::MutexLock l(&mu_);
  return bytes + pending_bytes_;
}

uint64_t JobTables::version() const {
  absl::MutexLock l(&mu_);
  return version_;
}

void JobTables::FillStats(JobStats* out) const {
  const double seconds =
      std::max(absl::ToDoubleSeconds(absl::Now() - created_), 1e-9);
  for (const auto& t : tables_) {
    const SparseTable::Stats s = t->rows->GetStats();
    TableStats* ts = out->add_tables();
    ts->set_name(t->spec.name());
    ts->set_rows(s.rows);
    ts->set_bytes_used(s.bytes_used);
    ts->set_memory_budget_bytes(s.budget_bytes);
    ts->set_admissions(s.admissions);
    ts->set_pending_admission(s.pending_admission);
    ts->set_evicted_ttl(s.ttl_evictions);
    ts->set_evicted_lru(s.lru_evictions);
    ts->set_rows_pulled(s.rows_pulled);
    ts->set_rows_pushed(s.rows_pushed);
    ts->set_rows_pulled_per_s(s.rows_pulled / seconds);
    ts->set_rows_pushed_per_s(s.rows_pushed / seconds);
    for (const HotId& h : s.hottest) {
      TableHotId* out_h = ts->add_hottest();
      out_h->set_id(h.id);
      out_h->set_pushes(h.pushes);
    }
  }
  out->set_tables_version(version());
}

struct JobTables::Snapshot::Data {
  const JobTables* owner = nullptr;
  uint64_t version = 0;
  std::vector<uint64_t> pushed_steps;
  std::vector<std::unique_ptr<Pushed>> pending;  // copies
  std::vector<SparseTable::Snapshot> tables;
};

JobTables::Snapshot::Snapshot(std::unique_ptr<Data> data)
    : data_(std::move(data)) {}
JobTables::Snapshot::Snapshot(Snapshot&&) noexcept = default;
JobTables::Snapshot& JobTables::Snapshot::operator=(Snapshot&&) noexcept =
    default;
JobTables::Snapshot::~Snapshot() = default;

uint64_t JobTables::Snapshot::version() const { return data_->version; }

JobTables::Snapshot JobTables::TakeSnapshot() const {
  auto d = std::make_unique<Snapshot::Data>();
  d->owner = this;
  absl::WriterMutexLock no_applies(&apply_mu_);
  absl::MutexLock l(&mu_);
  d->version = version_;
  d->pushed_steps = pushed_steps_;
  d->pending.resize(pending_.size());
  for (size_t w = 0; w < pending_.size(); ++w) {
    if (pending_[w] != nullptr) {
      d->pending[w] = std::make_unique<Pushed>(*pending_[w]);
    }
  }
  // Under mu_ no apply runs (pulls may): every table is at version_.
  for (const auto& t : tables_) d->tables.push_back(t->rows->TakeSnapshot());
  return Snapshot(std::move(d));
}

absl::Status JobTables::Snapshot::WriteTo(ByteSink& sink) && {
  Data& d = *data_;
  const JobTables& owner = *d.owner;
  const size_t num_tables = owner.tables_.size();
  PS_RETURN_IF_ERROR(sink.Write(absl::string_view(kMagic, 4)));
  PS_RETURN_IF_ERROR(Put<uint32_t>(sink, kFormat));
  PS_RETURN_IF_ERROR(Put<uint64_t>(sink, d.version));
  PS_RETURN_IF_ERROR(Put<uint32_t>(sink, owner.where_.num_workers));
  PS_RETURN_IF_ERROR(Put<uint32_t>(sink, num_tables));
  PS_RETURN_IF_ERROR(PutVector(sink, d.pushed_steps));
  for (const auto& p : d.pending) {
    PS_RETURN_IF_ERROR(Put<uint8_t>(sink, p != nullptr));
    if (p == nullptr) continue;
    for (size_t k = 0; k < num_tables; ++k) {
      PS_RETURN_IF_ERROR(PutVector(sink, p->ids[k]));
      PS_RETURN_IF_ERROR(PutVector(sink, p->grads[k]));
    }
  }
  for (size_t k = 0; k < num_tables; ++k) {
    PS_RETURN_IF_ERROR(
        owner.tables_[k]->rows->WriteSnapshot(std::move(d.tables[k]), sink));
  }
  return absl::OkStatus();
}

absl::Status JobTables::Save(ByteSink& sink) const {
  return TakeSnapshot().WriteTo(sink);
}

absl::Status JobTables::Restore(ByteSource& source) {
  char magic[4];
  PS_RETURN_IF_ERROR(source.Read(4, magic));
  uint32_t format = 0, workers = 0, tables = 0;
  uint64_t version = 0;
  PS_RETURN_IF_ERROR(Get(source, &format));
  if (std::memcmp(magic, kMagic, 4) != 0 || format != kFormat) {
    return absl::DataLossError(
        "sparse tables checkpoint: not a version-1 JobTables stream");
  }
  PS_RETURN_IF_ERROR(Get(source, &version));
  PS_RETURN_IF_ERROR(Get(source, &workers));
  PS_RETURN_IF_ERROR(Get(source, &tables));
  if (workers != where_.num_workers || tables != tables_.size()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "sparse tables checkpoint: %d workers and %d tables, the job has %d "
        "and %d",
        workers, tables, where_.num_workers, tables_.size()));
  }
  std::vector<uint64_t> pushed_steps;
  PS_RETURN_IF_ERROR(GetVector(source, workers, &pushed_steps));
  if (pushed_steps.size() != workers) {
    return absl::DataLossError("sparse tables checkpoint: bad pushed steps");
  }
  std::vector<std::unique_ptr<Pushed>> pending(workers);
  uint64_t pending_bytes = 0;
  constexpr uint64_t kMaxList = uint64_t{1} << 32;
  for (uint32_t w = 0; w < workers; ++w) {
    uint8_t has = 0;
    PS_RETURN_IF_ERROR(Get(source, &has));
    if (has == 0) continue;
    auto p = std::make_unique<Pushed>();
    p->ids.resize(tables);
    p->grads.resize(tables);
    for (uint32_t k = 0; k < tables; ++k) {
      PS_RETURN_IF_ERROR(GetVector(source, kMaxList, &p->ids[k]));
      PS_RETURN_IF_ERROR(GetVector(source, kMaxList, &p->grads[k]));
      if (p->grads[k].size() != p->ids[k].size() * tables_[k]->spec.dim()) {
        return absl::DataLossError(
            "sparse tables checkpoint: a buffered push of the wrong size");
      }
      p->bytes += p->ids[k].size() * 8 + p->grads[k].size() * 4;
    }
    pending_bytes += p->bytes;
    pending[w] = std::move(p);
  }
  // Every table into a fresh one first, so an error changes nothing.
  std::vector<std::unique_ptr<SparseTable>> restored;
  for (const auto& t : tables_) {
    PS_ASSIGN_OR_RETURN(std::unique_ptr<SparseTable> fresh,
                        SparseTable::Create(t->options));
    PS_RETURN_IF_ERROR(fresh->Restore(source));
    restored.push_back(std::move(fresh));
  }
  absl::WriterMutexLock no_applies(&apply_mu_);
  absl::MutexLock l(&mu_);
  for (size_t k = 0; k < tables_.size(); ++k) {
    tables_[k]->rows = std::move(restored[k]);
  }
  version_ = version;
  restored_version_ = version;
  restored_ = true;
  claimed_steps_ = pushed_steps;
  pushed_steps_ = std::move(pushed_steps);
  pending_ = std::move(pending);
  pending_bytes_ = pending_bytes;
  return absl::OkStatus();
}

}  // namespace ps
