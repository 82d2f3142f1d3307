// ShardPlan: which training examples a worker visits, and in what order.
//
//   absl::StatusOr<ShardPlan> plan = ShardPlan::Create(
//       train.size(), rank, num_workers, batch_size, job_seed);
//   std::vector<uint32_t> order;
//   plan->EpochOrder(epoch, &order);
//   // step s of the job reads order[b * batch_size, (b + 1) * batch_size)
//   // of epoch s / steps_per_epoch(), with b = s % steps_per_epoch().
//
// Sharding: the data set is permuted once with a permutation seeded by the
// job seed (the same on every rank), and rank r of N takes the slice
// [r * size / N, (r + 1) * size / N) of it: the shares are disjoint, cover the
// set and differ in size by at most one. The split is fixed for the job;
// each epoch a rank shuffles its own share with a seed mixed from (job seed,
// epoch, rank).
//
// Steps per epoch: floor(floor(size / N) / batch_size), IDENTICAL on every
// rank because a BSP step needs a push from each worker. The examples of a
// share beyond steps_per_epoch * batch_size are skipped in that epoch; the
// shuffle picks different ones each epoch.
#ifndef WORKER_DATA_SHARD_H_
#define WORKER_DATA_SHARD_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"

namespace ps {

// floor(floor(dataset_size / num_workers) / batch_size); 0 when any of them
// is 0 or the share is smaller than a batch.
uint64_t StepsPerEpoch(uint64_t dataset_size, uint32_t num_workers,
                       uint32_t batch_size);

// Immutable after Create; const methods are thread-safe.
class ShardPlan {
 public:
  // kInvalidArgument naming the field when num_workers is 0, rank >=
  // num_workers, batch_size is 0, the set exceeds 2^32 - 1 examples, or a
  // share holds less than one batch (data.batch_size too large).
  static absl::StatusOr<ShardPlan> Create(size_t dataset_size, uint32_t rank,
                                          uint32_t num_workers,
                                          uint32_t batch_size, uint64_t seed);

  uint32_t rank() const { return rank_; }
  uint32_t num_workers() const { return num_workers_; }
  uint32_t batch_size() const { return batch_size_; }
  uint64_t steps_per_epoch() const { return steps_per_epoch_; }

  // This rank's examples (indices into the data set), in split order.
  const std::vector<uint32_t>& share() const { return share_; }

  // Sets *order to this rank's visiting order for `epoch`: a permutation of
  // share() that depends only on (seed, epoch, rank). Reuses order's storage.
  void EpochOrder(uint64_t epoch, std::vector<uint32_t>* order) const;

 private:
  ShardPlan() = default;

  uint32_t rank_ = 0;
  uint32_t num_workers_ = 1;
  uint32_t batch_size_ = 1;
  uint64_t steps_per_epoch_ = 0;
  uint64_t seed_ = 0;
  std::vector<uint32_t> share_;
};

}  // namespace ps

#endif  // WORKER_DATA_SHARD_H_
