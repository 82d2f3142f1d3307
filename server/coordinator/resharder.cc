#include "server/coordinator/resharder.h"

#include <algorithm>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
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

absl::Status Resharder::OnEveryShard(const ReshardRequest& request,
                                     std::vector<ReshardResponse>* responses) {
  const uint32_t n = options_.num_shards;
  std::vector<absl::Status> results(n);
  responses->assign(n, ReshardResponse());
  const absl::Time deadline = hooks_.clock() + options_.call_deadline;
  std::vector<std::thread> calls;
  calls.reserve(n);
  for (uint32_t s = 0; s < n; ++s) {
    calls.emplace_back([&, s] {
      results[s] = hooks_.reshard(s, request, deadline, &(*responses)[s]);
    });
  }
  for (std::thread& t : calls) t.join();
  for (uint32_t s = 0; s < n; ++s) {
    if (!results[s].ok()) {
      return absl::Status(
          results[s].code(),
          absl::StrCat("shard ", s, " ",
                       ReshardRequest::Phase_Name(request.phase()), ": ",
                       results[s].message()));
    }
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
  auto abort = [&](const absl::Status& why) {
    AbortAll(job_id, epoch).IgnoreError();
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
  if (absl::Status st = CommitAll(job_id, epoch); !st.ok()) {
    status.set_phase(absl::StrCat("failed: ", st.message()));
    hooks_.update(status);
    return status;
  }
  const absl::Time done = hooks_.clock();
  status.set_pause_ms(absl::ToDoubleMilliseconds(done - quiesced));
  status.set_reached_s(UnixSeconds(done));
  status.set_phase("done");
  spdlog::info(
      "job {}: re-placed on {} shards at step {} (placement epoch {}): {} "
      "chunks, {:.1f} MB moved; paused {:.1f} ms",
      job_id, status.target_shards(), status.pause_step(), epoch, chunks,
      bytes / 1e6, status.pause_ms());
  hooks_.update(status);
  return status;
}

absl::Status Resharder::CommitAll(const std::string& job_id, uint64_t epoch) {
  const ReshardRequest commit = Request(job_id, epoch, ReshardRequest::COMMIT);
  const absl::Time deadline = hooks_.clock() + options_.commit_deadline;
  for (;;) {
    std::vector<ReshardResponse> answers;
    absl::Status st = OnEveryShard(commit, &answers);
    if (st.ok() || hooks_.clock() > deadline) return st;
    spdlog::warn("job {}: commit of placement epoch {}: {}; trying again",
                 job_id, epoch, std::string(st.message()));
    absl::SleepFor(absl::Milliseconds(200));
  }
}

absl::Status Resharder::AbortAll(const std::string& job_id, uint64_t epoch) {
  std::vector<ReshardResponse> answers;
  absl::Status st =
      OnEveryShard(Request(job_id, epoch, ReshardRequest::ABORT), &answers);
  if (!st.ok()) spdlog::warn("job {}: {}", job_id, std::string(st.message()));
  return st;
}

}  // namespace ps
