#include "worker/data/shard.h"

#include <limits>
#include <numeric>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "worker/data/internal/rng.h"

namespace ps {
namespace {

// Stream tags so the split and the epoch shuffles draw unrelated numbers.
constexpr uint64_t kSplitStream = 0x5b117;
constexpr uint64_t kEpochStream = 0xe90c;

}  // namespace

uint64_t StepsPerEpoch(uint64_t dataset_size, uint32_t num_workers,
                       uint32_t batch_size) {
  if (num_workers == 0 || batch_size == 0) return 0;
  return dataset_size / num_workers / batch_size;
}

absl::StatusOr<ShardPlan> ShardPlan::Create(size_t dataset_size, uint32_t rank,
                                            uint32_t num_workers,
                                            uint32_t batch_size,
                                            uint64_t seed) {
  if (num_workers == 0) {
    return absl::InvalidArgumentError("num_workers: must be >= 1");
  }
  if (rank >= num_workers) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "rank: %d is not below num_workers %d", rank, num_workers));
  }
  if (batch_size == 0) {
    return absl::InvalidArgumentError("data.batch_size: must be >= 1");
  }
  if (dataset_size > std::numeric_limits<uint32_t>::max()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "dataset: %d examples, at most 2^32 - 1 supported", dataset_size));
  }
  const uint64_t steps = StepsPerEpoch(dataset_size, num_workers, batch_size);
  if (steps == 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "data.batch_size: %d is larger than a worker's share (%d examples / "
        "%d workers = %d)",
        batch_size, dataset_size, num_workers, dataset_size / num_workers));
  }
  std::vector<uint32_t> all(dataset_size);
  std::iota(all.begin(), all.end(), 0u);
  Rng rng(MixSeed({seed, kSplitStream}));
  Shuffle(all.data(), all.size(), &rng);
  const uint64_t begin = uint64_t{rank} * dataset_size / num_workers;
  const uint64_t end = (uint64_t{rank} + 1) * dataset_size / num_workers;

  ShardPlan plan;
  plan.rank_ = rank;
  plan.num_workers_ = num_workers;
  plan.batch_size_ = batch_size;
  plan.steps_per_epoch_ = steps;
  plan.seed_ = seed;
  plan.share_.assign(all.begin() + begin, all.begin() + end);
  return plan;
}

void ShardPlan::EpochOrder(uint64_t epoch, std::vector<uint32_t>* order) const {
  order->assign(share_.begin(), share_.end());
  Rng rng(MixSeed({seed_, kEpochStream, epoch, rank_}));
  Shuffle(order->data(), order->size(), &rng);
}

}  // namespace ps
