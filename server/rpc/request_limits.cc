#include "server/rpc/request_limits.h"

#include <cstdint>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/defaults.h"
#include "server/coordinator/job_validation.h"  // kMaxNumWorkers
#include "server/coordinator/placement.h"       // kMaxChunks

namespace ps {

absl::Status CheckRegisterJobLimits(const RegisterJobRequest& request) {
  for (const auto& [field, n] :
       {std::pair<const char*, uint32_t>{"num_workers", request.num_workers()},
        {"spec.num_workers", request.spec().num_workers()}}) {
    if (n > kMaxNumWorkers) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": ", n, " workers, more than the ",
                       kMaxNumWorkers, " a job may have"));
    }
  }
  if (static_cast<uint64_t>(request.placement().chunks_size()) > kMaxChunks) {
    return absl::InvalidArgumentError(
        absl::StrCat("placement.chunks: ", request.placement().chunks_size(),
                     " chunks, more than the ", kMaxChunks, " a job may have"));
  }
  // The chunk count the spec implies: the Shard cuts the tensors into that
  // many chunks before it can compare them with the placement.
  const JobSpec& spec = request.spec();
  const uint64_t partition = spec.partition_bytes() == 0
                                 ? kDefaultPartitionBytes
                                 : spec.partition_bytes();
  const uint64_t per_chunk = partition / 4;
  if (per_chunk == 0) return absl::OkStatus();  // the Shard refuses it
  constexpr uint64_t kSaturated = std::numeric_limits<uint64_t>::max();
  uint64_t chunks = 0;
  for (int t = 0; t < spec.tensors_size(); ++t) {
    uint64_t n = 1;
    for (uint64_t d : spec.tensors(t).shape()) {
      if (d == 0) {
        n = 0;  // the Shard refuses it
        break;
      }
      n = n > kSaturated / d ? kSaturated : n * d;
    }
    chunks += n / per_chunk + (n % per_chunk != 0 ? 1 : 0);
    if (chunks > kMaxChunks) {
      return absl::InvalidArgumentError(absl::StrCat(
          "spec.tensors[", t, "].shape: the tensors cut into more than ",
          kMaxChunks, " chunks of ", partition,
          " bytes (spec.partition_bytes)"));
    }
  }
  return absl::OkStatus();
}

}  // namespace ps
