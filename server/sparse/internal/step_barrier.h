// The consistency state of a job's sparse tables (the rules are drawn in
// server/sparse/job_tables.h, the same as the dense chunks' in
// server/internal/consistency.h, with the quorum and the slowest worker
// from server/internal/quorum.h): the tables' version, the membership,
// BSP's pushes buffered for the step being aggregated, and ASP/SSP's
// per-worker clocks. It decides; the caller applies (TableSet).
//
//   if (barrier.StepReady(&order)) {
//     absl::Status s = tables.Apply(order, 1.0f / order.size(),
//                                   barrier.version());
//     barrier.EndStep(s.ok());
//   }
//
// Thread-compatible: JobTables guards it with its mutex.
#ifndef SERVER_SPARSE_INTERNAL_STEP_BARRIER_H_
#define SERVER_SPARSE_INTERNAL_STEP_BARRIER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "proto/job.pb.h"
#include "server/sparse/internal/table_set.h"

namespace ps {
namespace sparse_internal {

class StepBarrier {
 public:
  // What a checkpoint saves (tables_stream.h) and Restore puts back.
  struct State {
    uint64_t version = 0;
    // ASP/SSP: per worker, its highest applied step + 1 (0 = none).
    std::vector<uint64_t> pushed_steps;
    // BSP: per worker, its push buffered for step `version` (null = none).
    std::vector<std::unique_ptr<TablePushes>> pending;
  };

  // Every one of `num_workers` ranks active, nothing pushed.
  StepBarrier(ConsistencyMode mode, uint32_t num_workers,
              uint32_t backup_workers);

  ConsistencyMode mode() const { return mode_; }
  // BSP: the steps applied; ASP/SSP: the pushes applied.
  uint64_t version() const { return version_; }
  bool active(uint32_t w) const { return active_[w] != 0; }
  // How many ranks are active.
  uint32_t active_count() const;
  // The first num_workers flags of `active` (shorter: the rest unchanged).
  void SetActive(const std::vector<uint8_t>& active);

  // ---- BSP ----
  bool HasPushed(uint32_t w) const { return pending_[w] != nullptr; }
  // Buffers w's push for step version(); the caller checked that it is
  // active, the step is version() and w has not pushed it.
  void Buffer(uint32_t w, TablePushes pushed);
  // Bytes of the buffered pushes.
  uint64_t pending_bytes() const { return pending_bytes_; }
  // Whether the quorum of active workers (BspQuorumReached) pushed step
  // version(); if so `order` gets their pushes in rank order. Pushes of
  // ranks no longer active stay out.
  bool StepReady(std::vector<const TablePushes*>* order) const;
  // Drops the step's buffered pushes: applied (the version moves on), or
  // failed (the step stays, to be pushed again).
  void EndStep(bool applied);

  // ---- ASP/SSP ----
  // Claims w's step (a retry of it is a duplicate from now on) and returns
  // true, or false when it is a duplicate already. `claimed_before`: what
  // Unclaim needs.
  bool Claim(uint32_t w, uint64_t step, uint64_t* claimed_before);
  // Whether w's step is claimed already (a push of it is a duplicate).
  bool Claimed(uint32_t w, uint64_t step) const {
    return step < claimed_steps_[w];
  }
  // A claimed step that failed to apply: a retry may try again.
  void Unclaim(uint32_t w, uint64_t step, uint64_t claimed_before);
  // Counts w's applied step (its clock, the version). Returns the slowest
  // clock when it moved past the last TTL eviction (run one at it), else 0.
  uint64_t CountApplied(uint32_t w, uint64_t step);
  // A replica's copy of w's step applied on the primary (in the primary's
  // order, which need not be w's): claimed and counted as there, with no
  // duplicate check (the copy's version orders the forwards). Returns
  // CountApplied's.
  uint64_t CountForwarded(uint32_t w, uint64_t step);
  // The slowest active worker's pushed steps (SSP's clock).
  uint64_t Slowest() const;

  // The active workers a pending step waits for: BSP, those that did not
  // push it; ASP/SSP, the slowest.
  std::vector<uint32_t> MissingWorkers() const;

  // A copy of the saved state (the buffered pushes copied).
  State CopyState() const;
  // Replaces the state (claims = pushed steps) and, with `restarted`,
  // remembers that it was restored from a checkpoint, for RestoredNote
  // (rows moved in by a live re-placement are not).
  void Restore(State state, bool restarted = true);
  // For the error of a BSP push beyond the version: after Restore, a note
  // that the updates after the checkpoint are lost; else "".
  std::string RestoredNote() const;

 private:
  const ConsistencyMode mode_;
  const uint32_t num_workers_;
  const uint32_t backup_workers_;
  uint64_t version_ = 0;
  std::vector<uint8_t> active_;
  // BSP: the pushes buffered for step version_ (null = not pushed).
  std::vector<std::unique_ptr<TablePushes>> pending_;
  uint64_t pending_bytes_ = 0;
  // ASP/SSP: per worker, its highest applied step + 1 (0 = none): the SSP
  // clock; and its highest claimed step + 1 (applied or being applied):
  // what makes a retry a duplicate.
  std::vector<uint64_t> pushed_steps_;
  std::vector<uint64_t> claimed_steps_;
  // ASP/SSP: the slowest clock TTL eviction last ran at.
  uint64_t evicted_at_ = 0;
  // The version Restore set, for the error of a push beyond it.
  uint64_t restored_version_ = 0;
  bool restored_ = false;
};

}  // namespace sparse_internal
}  // namespace ps

#endif  // SERVER_SPARSE_INTERNAL_STEP_BARRIER_H_
