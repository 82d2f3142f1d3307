#include "worker/data/elastic_sampler.h"

#include <algorithm>
#include <limits>
#include <numeric>

#include "absl/strings/str_format.h"
#include "worker/data/internal/rng.h"

namespace ps {
namespace {

// Not ShardPlan's streams: an elastic epoch's permutation is its own draw.
constexpr uint64_t kElasticStream = 0xe1a5;

}  // namespace

absl::StatusOr<ElasticSampler> ElasticSampler::Create(size_t dataset_size,
                                                      uint32_t batch_size,
                                                      uint64_t seed) {
  if (dataset_size == 0) {
    return absl::InvalidArgumentError("dataset: no training examples");
  }
  if (dataset_size > std::numeric_limits<uint32_t>::max()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "dataset: %d examples, at most 2^32 - 1 supported", dataset_size));
  }
  if (batch_size == 0) {
    return absl::InvalidArgumentError("data.batch_size: must be >= 1");
  }
  return ElasticSampler(dataset_size, batch_size, seed);
}

absl::Status ElasticSampler::StepIndices(const DataSegment& segment,
                                         uint64_t step, uint32_t rank,
                                         std::vector<uint32_t>* indices) {
  const auto& ranks = segment.ranks();
  const auto at = std::find(ranks.begin(), ranks.end(), rank);
  if (at == ranks.end()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "rank: %d does not read data in the segment from step %d", rank,
        segment.start_step()));
  }
  const uint64_t w = static_cast<uint64_t>(ranks.size());
  const uint64_t i = static_cast<uint64_t>(at - ranks.begin());
  if (step < segment.start_step()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("step: %d is before its segment (from step %d)", step,
                        segment.start_step()));
  }
  const uint64_t base =
      segment.offset() + (step - segment.start_step()) * w * batch_size_;
  if (base + w * batch_size_ > dataset_size_) {
    return absl::InvalidArgumentError(
        absl::StrFormat("step: %d is past epoch %d's %d examples", step,
                        segment.epoch(), dataset_size_));
  }
  if (order_.empty() || epoch_ != segment.epoch()) {
    order_.resize(dataset_size_);
    std::iota(order_.begin(), order_.end(), 0u);
    Rng rng(MixSeed({seed_, kElasticStream, segment.epoch()}));
    Shuffle(order_.data(), order_.size(), &rng);
    epoch_ = segment.epoch();
  }
  indices->resize(batch_size_);
  for (uint64_t j = 0; j < batch_size_; ++j) {
    (*indices)[j] = order_[base + w * j + i];
  }
  return absl::OkStatus();
}

}  // namespace ps
