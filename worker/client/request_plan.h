// RequestPlan: how the flat parameter vector travels to the shards. Pure
// (no sockets): the job's Placement cuts the vector into chunks; a set of
// chunks (the whole model, or one tensor) becomes per-shard groups of at
// most max_request_bytes, one request each, spread over a shard's channels.
//
//   PS_ASSIGN_OR_RETURN(RequestPlan plan,
//                       RequestPlan::Create(assignment, RequestPlanOptions()));
//   for (const RequestGroup& g : plan.model_groups()) ... one request ...
//   PS_ASSIGN_OR_RETURN(std::vector<RequestGroup> fc1,
//                       plan.TensorGroups("fc1.weight"));
#ifndef WORKER_CLIENT_REQUEST_PLAN_H_
#define WORKER_CLIENT_REQUEST_PLAN_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "common/defaults.h"
#include "proto/coordinator.pb.h"

namespace ps {

// One chunk of the flat vector.
struct PlannedChunk {
  uint32_t id = 0;  // Placement.chunks index
  uint32_t shard = 0;
  size_t flat_offset = 0;  // elements
  size_t length = 0;       // elements
};

// The chunks of one request: all on `shard`, in placement order.
struct RequestGroup {
  uint32_t shard = 0;
  int channel = 0;             // index among the shard's channels
  std::vector<size_t> chunks;  // indexes into RequestPlan::chunks()
  size_t bytes = 0;            // payload bytes (float32)
};

struct RequestPlanOptions {
  size_t max_request_bytes = kDefaultMaxRequestBytes;
  int channels_per_shard = kDefaultChannelsPerShard;
};

// Immutable after Create; thread-safe.
class RequestPlan {
 public:
  // Fails (kInvalidArgument naming the field) if the assignment's placement
  // does not cover its tensors exactly or its shard addresses do not match.
  static absl::StatusOr<RequestPlan> Create(const Assignment& assignment,
                                            const RequestPlanOptions& options);

  size_t num_parameters() const { return num_parameters_; }
  uint32_t num_shards() const { return num_shards_; }
  const std::vector<PlannedChunk>& chunks() const { return chunks_; }
  // Every chunk: per shard (in shard order), packed in placement order.
  const std::vector<RequestGroup>& model_groups() const {
    return model_groups_;
  }
  // The chunks of one tensor, grouped the same way; kNotFound if the job
  // has no such tensor.
  absl::StatusOr<std::vector<RequestGroup>> TensorGroups(
      const std::string& tensor) const;
  // The chunks of several tensors fused: per shard, one group (unless it
  // would pass max_request_bytes) holds chunks of all of them. kNotFound
  // naming the first unknown tensor.
  absl::StatusOr<std::vector<RequestGroup>> TensorsGroups(
      const std::vector<std::string>& tensors) const;
  // [offset, offset + length) of a tensor in the flat vector.
  absl::StatusOr<std::pair<size_t, size_t>> TensorRange(
      const std::string& tensor) const;

  // Groups `chunk_indexes` (ascending) per shard, a group closed before it
  // would pass max_request_bytes; a shard's groups take its channels in
  // turn.
  std::vector<RequestGroup> Group(
      const std::vector<size_t>& chunk_indexes) const;

 private:
  RequestPlanOptions options_;
  size_t num_parameters_ = 0;
  uint32_t num_shards_ = 0;
  std::vector<PlannedChunk> chunks_;
  std::vector<RequestGroup> model_groups_;
  // Tensor name -> (flat offset, length) and its chunk indexes.
  absl::flat_hash_map<std::string, std::pair<size_t, size_t>> tensor_range_;
  absl::flat_hash_map<std::string, std::vector<size_t>> tensor_chunks_;
};

}  // namespace ps

#endif  // WORKER_CLIENT_REQUEST_PLAN_H_
