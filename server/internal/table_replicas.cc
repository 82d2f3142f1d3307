#include "server/internal/table_replicas.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "server/sparse/byte_stream.h"
#include "spdlog/spdlog.h"

namespace ps {
namespace internal {
namespace {

// A backup's answer to a forward from a shard its view failed over
// (replica_apply.h, kReplicaFencedCode).
constexpr absl::StatusCode kFencedCode = absl::StatusCode::kAborted;

bool Has(const std::vector<uint32_t>& v, uint32_t x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

}  // namespace

ChunkPlacement TablesCopyPlacement(const Placement& placement, uint32_t shard,
                                   uint32_t k) {
  ChunkPlacement out;
  out.set_shard(shard);
  for (const ChunkPlacement& c : placement.chunks()) {
    if (c.shard() == shard) {
      *out.mutable_backups() = c.backups();
      return out;
    }
  }
  const uint32_t n = placement.num_shards();
  for (uint32_t i = 1; i < k && i < n; ++i) out.add_backups((shard + i) % n);
  return out;
}

TableReplicas::TableReplicas(Options options, std::string job_id,
                             std::shared_ptr<const ReplicaView> view)
    : options_(options),
      job_id_(std::move(job_id)),
      view_(std::move(view)),
      health_({.deadline = options.deadline,
               .max_deadline = options.max_deadline}) {}

absl::StatusOr<std::unique_ptr<TableReplicas>> TableReplicas::Create(
    Options options, std::string job_id, const Placement& placement, uint32_t k,
    std::shared_ptr<const ReplicaView> view, JobTables* own,
    const MakeTables& make) {
  const uint32_t self = view->self();
  std::unique_ptr<TableReplicas> r(
      new TableReplicas(options, std::move(job_id), std::move(view)));
  for (uint32_t s = 0; s < placement.num_shards(); ++s) {
    ChunkPlacement p = TablesCopyPlacement(placement, s, k);
    if (s != self && !Has({p.backups().begin(), p.backups().end()}, self)) {
      continue;
    }
    auto c = std::make_unique<Copy>();
    c->shard = s;
    c->placement = std::move(p);
    if (s == self) {
      c->tables = own;
    } else {
      PS_ASSIGN_OR_RETURN(c->owned, make(s));
      c->tables = c->owned.get();
    }
    c->tables->GateOnReplicas();
    Copy* copy = c.get();
    TableReplicas* replicas = r.get();
    c->tables->SetStepSink([replicas, copy](ReplicaTableStep step) {
      absl::MutexLock l(&replicas->mu_);
      copy->log.push_back(std::move(step));
      if (copy->log.size() > replicas->options_.max_log_steps) {
        copy->log.pop_front();  // a backup that needs it gets the state
      }
      replicas->WakeLocked();
    });
    r->copies_.push_back(std::move(c));
  }
  return r;
}

TableReplicas::~TableReplicas() {
  {
    absl::MutexLock l(&mu_);
    stop_ = true;
    wake_.SignalAll();
  }
  if (thread_.joinable()) {
    // The last reference to the job may go on the thread itself (a fenced
    // forward closes the job): it ends on its own once it sees stop_.
    if (thread_.get_id() == std::this_thread::get_id()) {
      destroyed_->store(true);
      thread_.detach();
    } else {
      thread_.join();
    }
  }
  // The Job's own tables outlive this object: they must not call it.
  for (auto& c : copies_) {
    if (c->owned == nullptr) c->tables->SetStepSink(nullptr);
  }
}

void TableReplicas::SetSender(TablesSender sender) {
  absl::MutexLock l(&mu_);
  sender_ = std::move(sender);
}

void TableReplicas::SetOnFenced(
    std::function<void(const absl::Status&)> on_fenced) {
  absl::MutexLock l(&mu_);
  on_fenced_ = std::move(on_fenced);
}

void TableReplicas::SetOwner(std::weak_ptr<void> owner) {
  absl::MutexLock l(&mu_);
  owner_ = std::move(owner);
  has_owner_ = true;
}

TableReplicas::Copy* TableReplicas::Find(uint32_t shard) const {
  for (const auto& c : copies_) {
    if (c->shard == shard) return c.get();
  }
  return nullptr;
}

absl::StatusOr<JobTables*> TableReplicas::Serving(uint32_t shard) const {
  const Copy* c = Find(shard);
  const uint32_t self = view_->self();
  if (c == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("table_shard: job ", job_id_, " holds no copy of shard ",
                     shard, "'s rows on shard ", self));
  }
  const uint32_t acting = view_->ActingPrimary(c->placement);
  if (acting != self) {
    return absl::UnavailableError(
        absl::StrCat("table_shard: shard ", shard, "'s rows of job ", job_id_,
                     " are served by shard ", acting, ", not shard ", self,
                     " (epoch ", view_->epoch(), "); look the shard up"));
  }
  return c->tables;
}

void TableReplicas::Wake() {
  absl::MutexLock l(&mu_);
  WakeLocked();
}

void TableReplicas::WakeLocked() {
  if (stop_) return;
  woken_ = true;
  wake_.Signal();
  if (!started_) {
    started_ = true;
    thread_ = std::thread([this] { Loop(); });
  }
}

void TableReplicas::Loop() {
  const std::shared_ptr<std::atomic<bool>> destroyed = destroyed_;
  bool failed = false;
  while (true) {
    std::shared_ptr<void> hold;  // the owner, through the round
    {
      absl::MutexLock l(&mu_);
      const absl::Time until =
          failed ? absl::Now() + options_.retry : absl::InfiniteFuture();
      while (!stop_ && !woken_ && absl::Now() < until) {
        wake_.WaitWithDeadline(&mu_, until);
      }
      if (stop_) return;
      woken_ = false;
      hold = owner_.lock();
      // The owner is going: its destructor stops this thread.
      if (has_owner_ && hold == nullptr) return;
    }
    absl::Status fenced;
    failed = !Round(&fenced);
    if (!fenced.ok()) {
      std::function<void(const absl::Status&)> on_fenced;
      {
        absl::MutexLock l(&mu_);
        on_fenced = on_fenced_;
      }
      if (on_fenced) on_fenced(fenced);
    }
    // The owner's last reference may go here, and this object with it.
    hold.reset();
    if (destroyed->load() || !fenced.ok()) return;
  }
}

bool TableReplicas::Round(absl::Status* fenced) {
  const uint32_t self = view_->self();
  bool ok = true;
  for (const auto& c : copies_) {
    if (view_->ActingPrimary(c->placement) != self) continue;
    std::vector<uint32_t> targets = view_->LiveBackups(c->placement);
    for (uint32_t j : view_->JoiningBackups(c->placement)) {
      if (!Has(targets, j)) targets.push_back(j);
    }
    for (uint32_t b : targets) {
      const absl::Status s = Update(*c, b);
      if (s.ok()) continue;
      ok = false;
      if (s.code() == kFencedCode) {
        *fenced = Fenced(b, s);
        return false;
      }
      absl::MutexLock l(&mu_);
      if (logged_epoch_ != view_->epoch()) {
        logged_epoch_ = view_->epoch();
        spdlog::warn(
            "shard {}: job {}: a backup did not take a forward of shard {}'s "
            "table rows (shard {}): {}; retrying until it does or the "
            "coordinator fails it",
            self, job_id_, c->shard, b, s.ToString());
      }
    }
    AfterRound(*c);
  }
  return ok;
}

absl::Status TableReplicas::Fenced(uint32_t backup, const absl::Status& s) {
  {
    absl::MutexLock l(&mu_);
    stop_ = true;
  }
  spdlog::warn(
      "shard {}: job {}: shard {} refused a table forward: {}; this shard "
      "stops serving the job so that its workers find the successor",
      view_->self(), job_id_, backup, s.ToString());
  return absl::UnavailableError(s.message());
}

absl::Status TableReplicas::Update(Copy& c, uint32_t backup) {
  // At most: the state, then the steps (twice if the log moved past it).
  for (int attempt = 0; attempt < 3; ++attempt) {
    bool known = false;
    {
      absl::MutexLock l(&mu_);
      known = c.backups[backup].known;
    }
    if (!known) PS_RETURN_IF_ERROR(SendState(c, backup));
    bool done = false;
    absl::Status s;
    while (!done && s.ok()) s = SendSteps(c, backup, &done);
    if (absl::IsOutOfRange(s)) {
      absl::MutexLock l(&mu_);
      c.backups[backup].known = false;
      continue;
    }
    PS_RETURN_IF_ERROR(s);
    if (!done) continue;  // the log no longer covers it: the state
    const uint64_t version = c.tables->version();
    absl::MutexLock l(&mu_);
    BackupState& st = c.backups[backup];
    if (st.known && st.acked >= version) st.synced = true;
    return absl::OkStatus();
  }
  return absl::UnavailableError("the copy moved on during the forward");
}

absl::Status TableReplicas::SendState(Copy& c, uint32_t backup) {
  // One instant of the copy (no apply runs meanwhile); the steps after it
  // are logged from then on.
  JobTables::Snapshot snap = c.tables->TakeSnapshot();
  const uint64_t version = snap.version();
  std::string bytes;
  StringSink sink(&bytes);
  PS_RETURN_IF_ERROR(std::move(snap).WriteTo(sink));
  PS_RETURN_IF_ERROR(SendPieces(c, backup, bytes, version, false));
  absl::MutexLock l(&mu_);
  BackupState& st = c.backups[backup];
  st.known = true;
  st.acked = version;
  return absl::OkStatus();
}

absl::Status TableReplicas::SendPieces(Copy& c, uint32_t backup,
                                       const std::string& bytes,
                                       uint64_t version, bool step) {
  size_t offset = 0;
  do {
    const size_t n = std::min(options_.piece_bytes, bytes.size() - offset);
    ReplicateRequest req;
    ReplicaTables* t = req.mutable_tables();
    t->set_table_shard(c.shard);
    t->set_has_snapshot(true);
    t->set_step_pieces(step);
    t->set_snapshot_version(version);
    t->set_snapshot_bytes(bytes.size());
    t->set_offset(offset);
    t->set_snapshot(bytes.substr(offset, n));
    PS_RETURN_IF_ERROR(Send(backup, req, options_.max_deadline));
    offset += n;
  } while (offset < bytes.size());
  return absl::OkStatus();
}

absl::Status TableReplicas::SendSteps(Copy& c, uint32_t backup, bool* done) {
  const uint64_t version = c.tables->version();
  ReplicateRequest req;
  ReplicaTables* t = req.mutable_tables();
  t->set_table_shard(c.shard);
  uint64_t next = 0;
  {
    absl::MutexLock l(&mu_);
    BackupState& st = c.backups[backup];
    if (!st.known) return absl::OkStatus();  // *done stays false
    next = st.acked;
    size_t bytes = 0;
    for (const ReplicaTableStep& step : c.log) {
      if (step.version_before() < next) continue;
      const size_t size = step.ByteSizeLong();
      if (step.version_before() != next ||
          (t->steps_size() > 0 && bytes + size > options_.piece_bytes)) {
        break;
      }
      *t->add_steps() = step;
      bytes += size;
      ++next;
    }
    if (t->steps_size() == 0) {
      if (st.acked < version) {
        st.known = false;  // the log no longer covers it
      } else {
        *done = true;
      }
      return absl::OkStatus();
    }
  }
  if (t->steps_size() == 1 && t->ByteSizeLong() > options_.piece_bytes) {
    // One step over the message bound: its bytes in pieces.
    PS_RETURN_IF_ERROR(
        SendPieces(c, backup, t->steps(0).SerializeAsString(), next - 1, true));
  } else {
    PS_RETURN_IF_ERROR(Send(backup, req, DeadlineFor(backup)));
  }
  absl::MutexLock l(&mu_);
  BackupState& st = c.backups[backup];
  if (st.known) st.acked = std::max(st.acked, next);
  return absl::OkStatus();
}

absl::Status TableReplicas::Send(uint32_t backup, ReplicateRequest& req,
                                 absl::Duration deadline) {
  TablesSender sender;
  {
    absl::MutexLock l(&mu_);
    sender = sender_;
  }
  if (!sender) return absl::UnavailableError("no sender to the backups");
  req.set_job_id(job_id_);
  req.set_epoch(view_->epoch());
  req.set_from_shard(view_->self());
  const absl::Status s =
      sender(view_->Address(backup), req, absl::Now() + deadline);
  Record(backup, s, deadline);
  return s;
}

absl::Duration TableReplicas::DeadlineFor(uint32_t backup) const {
  absl::MutexLock l(&mu_);
  return health_.DeadlineFor(backup);
}

void TableReplicas::Record(uint32_t backup, const absl::Status& s,
                           absl::Duration used) {
  const absl::Time now = absl::Now();
  absl::MutexLock l(&mu_);
  // A base it lacks is an answer, not a failure: it gets the state.
  if (s.ok() || absl::IsOutOfRange(s)) {
    health_.Answered(backup);
  } else {
    health_.Failed(backup, s, used, now);
  }
}

std::vector<uint32_t> TableReplicas::Lagging(absl::Duration lag,
                                             absl::Time now) const {
  absl::MutexLock l(&mu_);
  return health_.Lagging(lag, now, *view_);
}

void TableReplicas::AfterRound(Copy& c) {
  uint64_t limit = UINT64_MAX;
  {
    absl::MutexLock l(&mu_);
    uint64_t needed = UINT64_MAX;
    for (const auto& [b, st] : c.backups) {
      if (st.known && !view_->Failed(b)) needed = std::min(needed, st.acked);
    }
    while (!c.log.empty() && c.log.front().version_before() < needed) {
      c.log.pop_front();
    }
    for (uint32_t b : view_->LiveBackups(c.placement)) {
      const BackupState& st = c.backups[b];
      limit = std::min(limit, st.known ? st.acked : 0);
    }
    for (uint32_t b : view_->JoiningBackups(c.placement)) {
      const BackupState& st = c.backups[b];
      if (st.synced) limit = std::min(limit, st.acked);
    }
  }
  c.tables->SetReplicatedVersion(limit);
}

void TableReplicas::ForgetAcks(uint32_t shard) {
  {
    absl::MutexLock l(&mu_);
    for (auto& c : copies_) c->backups[shard] = BackupState();
    health_.Forget(shard, view_->self());
  }
  Wake();
}

std::vector<uint32_t> TableReplicas::Behind() const {
  const uint32_t self = view_->self();
  std::vector<uint32_t> behind;
  for (const auto& c : copies_) {
    if (view_->ActingPrimary(c->placement) != self) continue;
    const uint64_t version = c->tables->version();
    absl::MutexLock l(&mu_);
    for (uint32_t j : view_->JoiningBackups(c->placement)) {
      auto it = c->backups.find(j);
      const bool caught_up = it != c->backups.end() && it->second.synced &&
                             it->second.acked >= version;
      if (!caught_up && !Has(behind, j)) behind.push_back(j);
    }
  }
  return behind;
}

bool TableReplicas::AllCopied() const {
  const uint32_t self = view_->self();
  absl::MutexLock l(&mu_);
  for (const auto& c : copies_) {
    if (view_->ActingPrimary(c->placement) != self && !c->copied) return false;
  }
  return true;
}

absl::Status TableReplicas::ApplyState(Copy& c, const ReplicaTables& t) {
  absl::MutexLock l(&c.apply_mu);
  if (t.offset() == 0) {
    c.pieces.clear();
    c.pieces_version = t.snapshot_version();
  }
  if (t.offset() != c.pieces.size() ||
      t.snapshot_version() != c.pieces_version ||
      t.offset() + t.snapshot().size() > t.snapshot_bytes()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tables.offset: ", t.offset(), " of version ", t.snapshot_version(),
        " does not follow the ", c.pieces.size(), " bytes held of version ",
        c.pieces_version));
  }
  c.pieces.append(t.snapshot());
  if (c.pieces.size() < t.snapshot_bytes()) return absl::OkStatus();
  if (t.step_pieces()) {
    ReplicaTableStep step;
    const bool parsed = step.ParseFromString(c.pieces);
    c.pieces.clear();
    if (!parsed) {
      return absl::InvalidArgumentError(
          "tables.snapshot: the pieces are not a ReplicaTableStep");
    }
    return c.tables->ApplyForwardedStep(step);
  }
  StringSource source(c.pieces);
  const absl::Status s = c.tables->Restore(source);
  c.pieces.clear();
  c.pieces.shrink_to_fit();
  if (!s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("tables.snapshot: ", s.message()));
  }
  absl::MutexLock copied(&mu_);
  c.copied = true;
  return absl::OkStatus();
}

absl::Status TableReplicas::Apply(const ReplicateRequest& req) {
  const ReplicaTables& t = req.tables();
  const uint32_t self = view_->self();
  Copy* c = Find(t.table_shard());
  if (c == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("tables.table_shard: job ", job_id_, " holds no copy of ",
                     "shard ", t.table_shard(), "'s rows on shard ", self));
  }
  if (req.from_shard() == self ||
      view_->ActingPrimary(c->placement) != req.from_shard()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "tables: shard ", req.from_shard(), " is not the acting primary of ",
        "shard ", t.table_shard(), "'s rows at epoch ", view_->epoch()));
  }
  if (t.has_snapshot()) return ApplyState(*c, t);
  for (int i = 0; i < t.steps_size(); ++i) {
    PS_RETURN_IF_ERROR(c->tables->ApplyForwardedStep(t.steps(i)));
  }
  absl::MutexLock l(&mu_);
  c->copied = true;
  return absl::OkStatus();
}

void TableReplicas::SetMembership(const std::vector<uint8_t>& active) {
  for (auto& c : copies_) {
    if (c->owned != nullptr) c->tables->SetMembership(active);
  }
}

void TableReplicas::CheckDeadlines(absl::Time now) {
  for (auto& c : copies_) {
    if (c->owned != nullptr) c->tables->CheckDeadlines(now);
  }
}

void TableReplicas::Close(const absl::Status& why) {
  for (auto& c : copies_) {
    if (c->owned != nullptr) c->tables->Close(why);
  }
  absl::MutexLock l(&mu_);
  stop_ = true;
  wake_.SignalAll();
}

}  // namespace internal
}  // namespace ps
