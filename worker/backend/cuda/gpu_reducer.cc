#include "worker/backend/cuda/gpu_reducer.h"

#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"

#ifdef PS_HAVE_NCCL
#include <nccl.h>
#endif

namespace ps {

#ifdef PS_HAVE_NCCL

struct GpuReducer::Comms {
  std::vector<ncclComm_t> comms;
  ~Comms() {
    for (ncclComm_t c : comms) {
      if (c != nullptr) ncclCommDestroy(c);
    }
  }
};

namespace {

absl::Status NcclError(ncclResult_t r, const char* what) {
  return absl::InternalError(
      absl::StrCat("NCCL ", what, ": ", ncclGetErrorString(r)));
}

}  // namespace

#else

struct GpuReducer::Comms {};

#endif  // PS_HAVE_NCCL

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
      return absl::InvalidArgumentError(absl::StrCat(
          "GpuReducer: backends[", i, "] (",
          backends[i] == nullptr ? "null" : backends[i]->device(),
          ") is not a CUDA backend"));
    }
    if (!seen.insert(b->ordinal()).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("GpuReducer: backends[", i, "] repeats ",
                       b->device(), "; one rank per GPU"));
    }
    cuda.push_back(b);
    ordinals.push_back(b->ordinal());
  }
#ifdef PS_HAVE_NCCL
  auto comms = std::make_unique<Comms>();
  comms->comms.assign(cuda.size(), nullptr);
  const ncclResult_t r = ncclCommInitAll(
      comms->comms.data(), static_cast<int>(cuda.size()), ordinals.data());
  if (r != ncclSuccess) return NcclError(r, "ncclCommInitAll");
  return std::unique_ptr<GpuReducer>(
      new GpuReducer(std::move(cuda), std::move(comms)));
#else
  return absl::FailedPreconditionError(
      "GpuReducer: this build has no NCCL (PS_HAVE_NCCL undefined)");
#endif
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
#ifdef PS_HAVE_NCCL
  CudaBackend* b = backends_[rank];
  absl::Status s = b->Activate();
  if (!s.ok()) return s;
  const ncclResult_t r = ncclAllReduce(data, data, n, ncclFloat32, ncclSum,
                                       comms_->comms[rank], b->stream());
  if (r != ncclSuccess) return NcclError(r, "ncclAllReduce");
  return absl::OkStatus();
#else
  return absl::FailedPreconditionError("GpuReducer: no NCCL");
#endif
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
#ifdef PS_HAVE_NCCL
  ncclResult_t r = ncclGroupStart();
  if (r != ncclSuccess) return NcclError(r, "ncclGroupStart");
  absl::Status status;
  for (size_t i = 0; i < data.size(); ++i) {
    CudaBackend* b = backends_[i];
    status = b->Activate();
    if (!status.ok()) break;
    r = ncclAllReduce(data[i], data[i], n, ncclFloat32, ncclSum,
                      comms_->comms[i], b->stream());
    if (r != ncclSuccess) {
      status = NcclError(r, "ncclAllReduce");
      break;
    }
  }
  // The group must be closed even after a failure.
  r = ncclGroupEnd();
  if (status.ok() && r != ncclSuccess) status = NcclError(r, "ncclGroupEnd");
  return status;
#else
  return absl::FailedPreconditionError("GpuReducer: no NCCL");
#endif
}

}  // namespace ps
