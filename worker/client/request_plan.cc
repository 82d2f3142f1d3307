#include "worker/client/request_plan.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace ps {

absl::StatusOr<RequestPlan> RequestPlan::Create(
    const Assignment& assignment, const RequestPlanOptions& options) {
  const Placement& placement = assignment.placement();
  const JobSpec& spec = assignment.spec();
  if (placement.num_shards() == 0 ||
      assignment.shard_addresses_size() !=
          static_cast<int>(placement.num_shards())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "assignment.shard_addresses: ", assignment.shard_addresses_size(),
        " addresses for ", placement.num_shards(), " shards"));
  }
  RequestPlan plan;
  plan.options_ = options;
  plan.num_shards_ = placement.num_shards();
  // Flat offset of every tensor, in spec order (the model's layout).
  size_t total = 0;
  for (const TensorSpec& t : spec.tensors()) {
    size_t n = 1;
    for (uint64_t d : t.shape()) n *= d;
    plan.tensor_range_[t.name()] = {total, n};
    total += n;
  }
  plan.num_parameters_ = total;
  size_t covered = 0;
  for (int i = 0; i < placement.chunks_size(); ++i) {
    const ChunkPlacement& c = placement.chunks(i);
    auto it = plan.tensor_range_.find(c.tensor());
    if (c.chunk_id() != static_cast<uint32_t>(i) ||
        it == plan.tensor_range_.end() ||
        c.offset() + c.length() > it->second.second ||
        c.shard() >= placement.num_shards()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "placement.chunks[", i, "]: does not fit the job's tensors"));
    }
    plan.tensor_chunks_[c.tensor()].push_back(plan.chunks_.size());
    plan.chunks_.push_back(
        {c.chunk_id(), c.shard(), it->second.first + c.offset(), c.length()});
    covered += c.length();
  }
  if (covered != total) {
    return absl::InvalidArgumentError(absl::StrCat(
        "placement: covers ", covered, " of ", total, " parameters"));
  }
  std::vector<size_t> all(plan.chunks_.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = i;
  plan.model_groups_ = plan.Group(all);
  return plan;
}

std::vector<RequestGroup> RequestPlan::Group(
    const std::vector<size_t>& chunk_indexes) const {
  std::vector<RequestGroup> groups;
  const int channels = std::max(1, options_.channels_per_shard);
  for (uint32_t s = 0; s < num_shards_; ++s) {
    int next_channel = 0;
    bool open = false;  // groups.back() belongs to shard s
    for (size_t i : chunk_indexes) {
      const PlannedChunk& c = chunks_[i];
      if (c.shard != s) continue;
      const size_t b = c.length * sizeof(float);
      if (!open || groups.back().bytes + b > options_.max_request_bytes) {
        groups.emplace_back();
        groups.back().shard = s;
        groups.back().channel = next_channel;
        next_channel = (next_channel + 1) % channels;
        open = true;
      }
      groups.back().chunks.push_back(i);
      groups.back().bytes += b;
    }
  }
  return groups;
}

absl::StatusOr<std::vector<RequestGroup>> RequestPlan::TensorGroups(
    const std::string& tensor) const {
  PS_RETURN_IF_ERROR(TensorRange(tensor).status());
  auto it = tensor_chunks_.find(tensor);
  if (it == tensor_chunks_.end()) return std::vector<RequestGroup>();
  return Group(it->second);
}

absl::StatusOr<std::vector<RequestGroup>> RequestPlan::TensorsGroups(
    const std::vector<std::string>& tensors) const {
  std::vector<size_t> chunks;
  for (const std::string& tensor : tensors) {
    PS_RETURN_IF_ERROR(TensorRange(tensor).status());
    auto it = tensor_chunks_.find(tensor);
    if (it == tensor_chunks_.end()) continue;
    chunks.insert(chunks.end(), it->second.begin(), it->second.end());
  }
  // Group wants them ascending; a tensor named twice travels once.
  std::sort(chunks.begin(), chunks.end());
  chunks.erase(std::unique(chunks.begin(), chunks.end()), chunks.end());
  return Group(chunks);
}

absl::StatusOr<std::pair<size_t, size_t>> RequestPlan::TensorRange(
    const std::string& tensor) const {
  auto it = tensor_range_.find(tensor);
  if (it == tensor_range_.end()) {
    return absl::NotFoundError(
        absl::StrCat("tensor \"", tensor, "\": not in the job's spec"));
  }
  return it->second;
}

}  // namespace ps
