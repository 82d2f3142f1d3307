#include "server/coordinator/resharder.h"

#include <algorithm>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "server/coordinator/job_table.h"
#include "spdlog/spdlog.h"

namespace ps {

void CountMoves(const Placement& from, const Placement& to, uint32_t* chunks,
                uint64_t* bytes) {
  *chunks = 0;
  *bytes = 0;
  const int n = std::min(from.chunks_size(), to.chunks_size());
  for (int i = 0; i < n; ++i) {
    const ChunkPlacement& a = from.chunks(i);
    const ChunkPlacement& b = to.chunks(i);
    auto held = [&a](uint32_t s) {
      return s == a.shard() || std::find(a.backups().begin(), a.backups().end(),
                                         s) != a.backups().end();
    };
    // Each copy (primary or backup) on a shard that held none is fetched.
    uint32_t gained = held(b.shard()) ? 0 : 1;
    for (uint32_t s : b.backups()) gained += held(s) ? 0 : 1;
    *chunks += gained;
    *bytes += gained * b.length() * 4;
  }
}

ReshardRequest Resharder::Request(const std::string& job_id, uint64_t epoch,
                                  ReshardRequest::Phase phase) const {
  ReshardRequest r;
  r.set_job_id(job_id);
  r.set_epoch(epoch);
  r.set_phase(phase);
  return r;
}

namespace {

// `st` of `request` on `shard`, naming both.
absl::Status OfShard(uint32_t shard, const ReshardRequest& request,
                     const absl::Status& st) {
  return absl::Status(
      st.code(), absl::StrCat("shard ", shard, " ",
                              ReshardRequest::Phase_Name(request.phase()), ": ",
                              st.message()));
}

// An answer that trying again cannot change: the shard does not hold the
// job, or (COMMIT) holds no prepared state of this move (restarted without
// it).
bool Settled(const absl::Status& st) {
  return absl::IsNotFound(st) || absl::IsFailedPrecondition(st) ||
         absl::IsInvalidArgument(st);
}

}  // namespace

std::vector<absl::Status> Resharder::OnShards(
    const ReshardRequest& request, const std::vector<uint32_t>& shards,
    std::vector<ReshardResponse>* responses) {
  const uint32_t n = options_.num_shards;
  std::vector<absl::Status> results(n);
  responses->assign(n, ReshardResponse());
  const absl::Time deadline = hooks_.clock() + options_.call_deadline;
  std::vector<std::thread> calls;
  calls.reserve(shards.size());
  for (uint32_t s : shards) {
    calls.emplace_back([&, s] {
      results[s] = hooks_.reshard(s, request, deadline, &(*responses)[s]);
    });
  }
  for (std::thread& t : calls) t.join();
  return results;
}

absl::Status Resharder::OnEveryShard(const ReshardRequest& request,
                                     std::vector<ReshardResponse>* responses) {
  std::vector<uint32_t> all(options_.num_shards);
  for (uint32_t s = 0; s < all.size(); ++s) all[s] = s;
  const std::vector<absl::Status> results = OnShards(request, all, responses);
  for (uint32_t s = 0; s < results.size(); ++s) {
    if (!results[s].ok()) return OfShard(s, request, results[s]);
  }
  return absl::OkStatus();
}

absl::Status Resharder::AwaitQuiesced(const ReshardRequest& pause,
                                      uint64_t steps) {
  const absl::Duration allowed =
      options_.quiesce_deadline +
      2 * static_cast<int64_t>(steps + 1) * options_.step_time;
  const absl::Time deadline = hooks_.clock() + allowed;
  for (;;) {
    std::vector<ReshardResponse> answers;
    absl::Status st = OnEveryShard(pause, &answers);
    if (!st.ok()) return st;
    std::string behind;
    for (uint32_t s = 0; s < answers.size(); ++s) {
      if (!answers[s].quiesced()) {
        absl::StrAppend(&behind, behind.empty() ? "shard " : ", ", s);
      }
    }
    if (behind.empty()) return absl::OkStatus();
    if (hooks_.stopping && hooks_.stopping()) {
      return absl::CancelledError("the coordinator is shutting down");
    }
    if (hooks_.clock() > deadline) {
      return absl::DeadlineExceededError(absl::StrFormat(
          "not every chunk reached step %d within %s (%s still behind): a "
          "worker missing?",
          pause.pause_step(), absl::FormatDuration(allowed), behind));
    }
    absl::SleepFor(options_.poll);
  }
}

absl::Status Resharder::Pause(const std::string& job_id, uint64_t epoch,
                              ReshardStatus& status) {
  ReshardRequest probe = Request(job_id, epoch, ReshardRequest::PAUSE);
  uint64_t margin = options_.first_margin;
  absl::Status last;
  for (int attempt = 0; attempt < options_.pause_tries; ++attempt) {
    std::vector<ReshardResponse> answers;
    absl::Status st = OnEveryShard(probe, &answers);
    if (!st.ok()) return st;
    uint64_t highest = 0;
    for (const ReshardResponse& a : answers) {
      highest = std::max(highest, a.max_version());
    }
    ReshardRequest pause = probe;
    pause.set_pause_step(highest + margin);
    last = OnEveryShard(pause, &answers);
    if (last.ok()) {
      status.set_pause_step(pause.pause_step());
      status.set_phase("pausing");
      hooks_.update(status);
      spdlog::info("job {}: pausing at step {} for placement epoch {}", job_id,
                   pause.pause_step(), epoch);
      return AwaitQuiesced(pause, margin);
    }
    if (last.code() != absl::StatusCode::kFailedPrecondition) return last;
    // Some chunk was past the step already: lift the pause, go further.
    AbortAll(job_id, epoch).IgnoreError();
    margin *= 4;
  }
  return last;
}

ReshardStatus Resharder::Run(const std::string& job_id, const Placement& from,
                             const Placement& to, ReshardStatus status) {
  const uint64_t epoch = to.epoch();
  uint32_t chunks = 0;
  uint64_t bytes = 0;
  CountMoves(from, to, &chunks, &bytes);
  status.set_epoch(epoch);
  status.set_moved_chunks(chunks);
  status.set_moved_bytes(bytes);
  bool prepare_sent = false;
  auto abort = [&](const absl::Status& why) {
    // After a PREPARE a shard may die with what it prepared on disk, and
    // come back paused with it: it needs its ABORT too.
    (prepare_sent ? AbortPrepared(job_id, epoch) : AbortAll(job_id, epoch))
        .IgnoreError();
    status.set_phase(absl::StrCat("aborted: ", why.message()));
    spdlog::warn("job {}: re-placement to {} shards aborted: {}", job_id,
                 status.target_shards(), std::string(why.message()));
    hooks_.update(status);
    return status;
  };
  if (absl::Status st = Pause(job_id, epoch, status); !st.ok()) {
    return abort(st);
  }
  const absl::Time quiesced = hooks_.clock();
  status.set_phase("copying");
  hooks_.update(status);
  ReshardRequest prepare = Request(job_id, epoch, ReshardRequest::PREPARE);
  *prepare.mutable_placement() = to;
  for (std::string& a : hooks_.addresses()) {
    prepare.add_shard_addresses(std::move(a));
  }
  std::vector<ReshardResponse> answers;
  prepare_sent = true;
  if (absl::Status st = OnEveryShard(prepare, &answers); !st.ok()) {
    return abort(st);
  }
  for (const ReshardResponse& a : answers) {
    status.set_fetched_bytes(status.fetched_bytes() + a.bytes_fetched());
  }
  status.set_phase("committing");
  if (absl::Status st = hooks_.commit(to, status); !st.ok()) {
    return abort(st);
  }
  // Committed in the store: from here the move only goes forward.
  std::vector<uint32_t> late;
  if (absl::Status st = CommitAll(job_id, to, status.pause_step(), &late);
      !st.ok()) {
    status.set_phase(absl::StrCat("failed: ", st.message()));
    hooks_.update(status);
    return status;
  }
  const absl::Time done = hooks_.clock();
  status.set_pause_ms(absl::ToDoubleMilliseconds(done - quiesced));
  status.set_reached_s(UnixSeconds(done));
  status.set_phase("done");
  for (uint32_t s : late) status.add_late_shards(s);
  spdlog::info(
      "job {}: re-placed on {} shards at step {} (placement epoch {}): {} "
      "chunks, {:.1f} MB moved; paused {:.1f} ms{}",
      job_id, status.target_shards(), status.pause_step(), epoch, chunks,
      bytes / 1e6, status.pause_ms(),
      late.empty() ? ""
                   : absl::StrCat("; shards ", absl::StrJoin(late, ", "),
                                  " committed late"));
  hooks_.update(status);
  return status;
}

absl::Status Resharder::UntilAnswered(const ReshardRequest& request,
                                      bool settled_fails,
                                      std::vector<uint32_t>* late) {
  const std::string phase = ReshardRequest::Phase_Name(request.phase());
  late->clear();
  std::vector<uint32_t> pending(options_.num_shards);
  for (uint32_t s = 0; s < pending.size(); ++s) pending[s] = s;
  const absl::Time deadline = hooks_.clock() + options_.commit_deadline;
  for (bool first = true;; first = false) {
    std::vector<ReshardResponse> answers;
    const std::vector<absl::Status> results =
        OnShards(request, pending, &answers);
    std::vector<uint32_t> failing;
    absl::Status last;
    for (uint32_t s : pending) {
      const absl::Status& st = results[s];
      if (st.ok() || (!settled_fails && Settled(st))) {
        if (!first) {
          late->push_back(s);
          spdlog::info(
              "job {}: shard {} answered the {} of placement epoch "
              "{} late: {}",
              request.job_id(), s, phase, request.epoch(),
              st.ok() ? "OK" : std::string(st.message()));
        }
        continue;
      }
      if (Settled(st)) return OfShard(s, request, st);
      failing.push_back(s);
      last = OfShard(s, request, st);
    }
    if (failing.empty()) {
      std::sort(late->begin(), late->end());
      return absl::OkStatus();
    }
    if (hooks_.clock() > deadline) {
      return absl::DeadlineExceededError(absl::StrFormat(
          "shards %s did not answer the %s of placement epoch %d within %s "
          "(%s)",
          absl::StrJoin(failing, ", "), phase, request.epoch(),
          absl::FormatDuration(options_.commit_deadline), last.message()));
    }
    if (first) {
      spdlog::warn(
          "job {}: the {} of placement epoch {} again on shards {} "
          "until they answer: {}",
          request.job_id(), phase, request.epoch(),
          absl::StrJoin(failing, ", "), std::string(last.message()));
    }
    pending = std::move(failing);
    absl::SleepFor(options_.commit_retry);
  }
}

absl::Status Resharder::CommitAll(const std::string& job_id,
                                  const Placement& to, uint64_t pause_step,
                                  std::vector<uint32_t>* late) {
  ReshardRequest commit = Request(job_id, to.epoch(), ReshardRequest::COMMIT);
  *commit.mutable_placement() = to;
  commit.set_pause_step(pause_step);
  return UntilAnswered(commit, /*settled_fails=*/true, late);
}

absl::Status Resharder::AbortPrepared(const std::string& job_id,
                                      uint64_t epoch) {
  std::vector<uint32_t> late;
  absl::Status st = UntilAnswered(Request(job_id, epoch, ReshardRequest::ABORT),
                                  /*settled_fails=*/false, &late);
  if (!st.ok()) spdlog::warn("job {}: {}", job_id, std::string(st.message()));
  return st;
}

absl::Status Resharder::AbortAll(const std::string& job_id, uint64_t epoch) {
  std::vector<ReshardResponse> answers;
  absl::Status st =
      OnEveryShard(Request(job_id, epoch, ReshardRequest::ABORT), &answers);
  if (!st.ok()) spdlog::warn("job {}: {}", job_id, std::string(st.message()));
  return st;
}

}  // namespace ps
