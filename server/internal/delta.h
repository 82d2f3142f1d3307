// Delta pulls (proto/ps.proto HeldChunk): per chunk, exactly which entries
// changed since a version, and the reply that carries only those. Internal
// to the shard; jobs whose spec asks for top-k pushes (wire.topk_fraction
// < 1) track their chunks, others pay nothing.
//
//   ChangeLog& log = c.changes;                   // under the chunk's mutex
//   log.Start(c.state.version, c.length, job.num_workers);
//   ... before = values; optimizer applies; version + 1 ...
//   log.Record(before.data(), values, version);   // bitwise comparison
//   std::shared_ptr<const DeltaEncoding> d =
//       EncodeDelta(log, worker, values, base, version, job.wire_format);
//   if (d == nullptr) ... answer in full ...
//
// Exact by construction: an entry is in a delta when its bits changed in
// some update after `base`, whatever the optimizer did (momentum, weight
// decay and Adam change entries that got no gradient; they simply make the
// delta too big, and the reply goes dense). A delta is only built on a
// base that this shard itself last answered to the asking worker in the
// job's format, so it never lands on a copy the worker does not hold: a
// reply lost on the wire, a restarted shard (a fresh log) or a narrow
// format's FP32 fallback each make the next reply dense.
//
// Not synchronized: the shard guards each ChangeLog with its chunk's mutex.
#ifndef SERVER_INTERNAL_DELTA_H_
#define SERVER_INTERNAL_DELTA_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/types/span.h"
#include "proto/job.pb.h"

namespace ps {
namespace internal {

// No version: the worker holds none / was answered none in the job format.
inline constexpr uint64_t kNoBase = UINT64_MAX;

// Whether a job's chunks track their changes (its workers push top-k).
bool WantsDeltaPulls(const JobSpec& spec);

class ChangeLog {
 public:
  // Bytes a log of `length` entries for `num_workers` workers holds, plus
  // its largest cached delta: what the memory budget counts.
  static uint64_t Bytes(uint64_t length, uint32_t num_workers);

  // Tracks the `length` entries from `version` on (earlier changes are
  // unknown: bases before it are never served).
  void Start(uint64_t version, uint64_t length, uint32_t num_workers);
  bool enabled() const { return !changed_at_.empty(); }

  // The values went from `before` to `after` in the update that made
  // `version` (the previous one + 1).
  void Record(const float* before, absl::Span<const float> after,
              uint64_t version);

  // What `worker` was last answered in the job's format: the version, or
  // kNoBase (never, or a reply in another format).
  void SetAnswered(uint32_t worker, uint64_t version);
  uint64_t answered(uint32_t worker) const { return answered_[worker]; }

  // True when a delta from `base` to `version` (the chunk's current one)
  // can be built for `worker`: `base` is what it was last answered and the
  // log knows every change since.
  bool CanServe(uint32_t worker, uint64_t base, uint64_t version) const;

  // Appends the offsets (ascending) of the entries changed after `base`;
  // false, with `*offsets` unspecified, when there are more than `max`.
  bool ChangedSince(uint64_t base, size_t max,
                    std::vector<uint32_t>* offsets) const;

 private:
  uint64_t since_ = 0;
  // Per entry: the version of its last change - since_ (0: none since
  // since_). Past 2^32 - 1 versions the log stops (`overflow_`): dense.
  std::vector<uint32_t> changed_at_;
  bool overflow_ = false;
  std::vector<uint64_t> answered_;  // by worker rank
};

// A delta reply of one chunk, shared by every reply of the same (base,
// version) (BSP: each worker's).
struct DeltaEncoding {
  uint64_t base = 0;
  uint64_t version = 0;
  WireFormat format = WIRE_FORMAT_UNSPECIFIED;  // ChunkData.format
  std::string indices;                          // little-endian uint32
  std::string data;                             // values in `format`
};

// The delta of `values` (the chunk at `version`) on top of `base` for
// `worker`, in the job's wire `format`; null when the log cannot serve it,
// when it would not be smaller than the full chunk in `format`, or when a
// changed value does not fit `format` (the full reply then goes as FP32).
// `reuse`: a previous encoding that no reply holds any more, rewritten in
// place (may be null).
std::shared_ptr<DeltaEncoding> EncodeDelta(
    const ChangeLog& log, uint32_t worker, absl::Span<const float> values,
    uint64_t base, uint64_t version, WireFormat format,
    std::shared_ptr<DeltaEncoding> reuse);

}  // namespace internal
}  // namespace ps

#endif  // SERVER_INTERNAL_DELTA_H_
