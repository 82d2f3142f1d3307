#include "worker/backend/cuda/gpu_reducer.h"

#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "worker/backend/cuda/cuda_libs.h"

namespace ps {

struct GpuReducer::Comms {
  std::vector<cuda::NcclComm> comms;
  ~Comms() {
    for (cuda::NcclComm c : comms) cuda::NcclDestroy(c);
  }
};

namespace {

absl::Status NcclError(const char* error, const char* what) {
  return absl::InternalError(absl::StrCat("GpuReducer: ", what, ": ", error));
}

}  // namespace

absl::StatusOr<std::unique_ptr<GpuReducer>> GpuReducer::Create(
    const std::vector<Backend*>& backends) {
  if (backends.empty()) {
    return absl::InvalidArgumentError("GpuReducer: backends is empty");
  }
  std::vector<CudaBackend*> cuda;
  std::vector<int> ordinals;
  absl::flat_hash_set<int> seen;
  for (size_t i = 0; i < backends.size(); ++i) {
    auto* b = dynamic_cast<CudaBackend*>(backends[i]);
    if (b == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("GpuReducer: backends[", i, "] (",
                       backends[i] == nullptr ? "null" : backends[i]->device(),
                       ") is not a CUDA backend"));
    }
    if (!seen.insert(b->ordinal()).second) {
      return absl::InvalidArgumentError(absl::StrCat("GpuReducer: backends[", i,
                                                     "] repeats ", b->device(),
                                                     "; one rank per GPU"));
    }
    cuda.push_back(b);
    ordinals.push_back(b->ordinal());
  }
  if (!cuda::NcclAvailable()) {
    return absl::FailedPreconditionError(
        "GpuReducer: this build has no NCCL (nccl.h was not found)");
  }
  auto comms = std::make_unique<Comms>();
  comms->comms.assign(cuda.size(), nullptr);
  if (const char* err =
          cuda::NcclInitAll(static_cast<int>(cuda.size()), ordinals.data(),
                            comms->comms.data())) {
    return NcclError(err, "ncclCommInitAll");
  }
  return std::unique_ptr<GpuReducer>(
      new GpuReducer(std::move(cuda), std::move(comms)));
}

GpuReducer::GpuReducer(std::vector<CudaBackend*> backends,
                       std::unique_ptr<Comms> comms)
    : backends_(std::move(backends)), comms_(std::move(comms)) {}

GpuReducer::~GpuReducer() = default;

absl::Status GpuReducer::AllReduceSum(int rank, float* data, size_t n) {
  if (rank < 0 || rank >= num_ranks()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "GpuReducer: rank ", rank, " not in [0, ", num_ranks(), ")"));
  }
  if (n > 0 && data == nullptr) {
    return absl::InvalidArgumentError("GpuReducer: data is null");
  }
  if (n == 0) return absl::OkStatus();
  CudaBackend* b = backends_[rank];
  absl::Status s = b->Activate();
  if (!s.ok()) return s;
  if (const char* err =
          cuda::NcclAllReduceSum(comms_->comms[rank], data, n, b->stream())) {
    return NcclError(err, "ncclAllReduce");
  }
  return absl::OkStatus();
}

absl::Status GpuReducer::AllReduceSumAll(const std::vector<float*>& data,
                                         size_t n) {
  if (data.size() != backends_.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("GpuReducer: data has ", data.size(), " buffers, want ",
                     backends_.size()));
  }
  for (size_t i = 0; i < data.size(); ++i) {
    if (n > 0 && data[i] == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("GpuReducer: data[", i, "] is null"));
    }
  }
  if (n == 0) return absl::OkStatus();
  if (const char* err = cuda::NcclGroupStart()) {
    return NcclError(err, "ncclGroupStart");
  }
  absl::Status status;
  for (size_t i = 0; i < data.size() && status.ok(); ++i) {
    CudaBackend* b = backends_[i];
    status = b->Activate();
    if (!status.ok()) break;
    if (const char* err =
            cuda::NcclAllReduceSum(comms_->comms[i], data[i], n, b->stream())) {
      status = NcclError(err, "ncclAllReduce");
    }
  }
  // The group must be closed even after a failure.
  const char* err = cuda::NcclGroupEnd();
  if (status.ok() && err != nullptr) status = NcclError(err, "ncclGroupEnd");
  return status;
}

}  // namespace ps
