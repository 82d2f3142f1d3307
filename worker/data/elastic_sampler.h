// ElasticSampler: the examples a worker reads at a step of an elastic data
// job (DataSegment, proto/coordinator.proto): the DistributedSampler rule
// over the examples of the epoch not read before the segment.
//
//   absl::StatusOr<ElasticSampler> sampler =
//       ElasticSampler::Create(train.size(), batch_size, job_seed);
//   std::vector<uint32_t> indices;
//   PS_RETURN_IF_ERROR(sampler->StepIndices(segment, step, rank, &indices));
//
// Epoch e's permutation of the training set depends only on (seed, e), the
// same on every worker. In a segment of W ranks starting at step s0 with
// `offset` examples of its epoch read before, rank ranks[i] reads at step
// s0 + b the examples at positions offset + W * (b * B + j) + i, j < B: the
// W ranks together read positions [offset + W*b*B, offset + W*(b+1)*B), so
// the examples read in an epoch are its permutation's prefix, each once,
// however the ranks changed between segments.
#ifndef WORKER_DATA_ELASTIC_SAMPLER_H_
#define WORKER_DATA_ELASTIC_SAMPLER_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/coordinator.pb.h"

namespace ps {

// Thread-compatible (caches the last epoch's permutation).
class ElasticSampler {
 public:
  // kInvalidArgument naming the field for an empty set, one of more than
  // 2^32 - 1 examples, or batch_size 0.
  static absl::StatusOr<ElasticSampler> Create(size_t dataset_size,
                                               uint32_t batch_size,
                                               uint64_t seed);

  // Sets *indices to the batch_size examples `rank` reads at `step` of
  // `segment`. kInvalidArgument naming the field when `rank` is not in the
  // segment or the step is before it or past its epoch's examples.
  absl::Status StepIndices(const DataSegment& segment, uint64_t step,
                           uint32_t rank, std::vector<uint32_t>* indices);

  size_t dataset_size() const { return dataset_size_; }
  uint32_t batch_size() const { return batch_size_; }

 private:
  ElasticSampler(size_t dataset_size, uint32_t batch_size, uint64_t seed)
      : dataset_size_(dataset_size), batch_size_(batch_size), seed_(seed) {}

  size_t dataset_size_;
  uint32_t batch_size_;
  uint64_t seed_;
  // Epoch `epoch_`'s permutation; empty before the first call.
  uint64_t epoch_ = 0;
  std::vector<uint32_t> order_;
};

}  // namespace ps

#endif  // WORKER_DATA_ELASTIC_SAMPLER_H_
