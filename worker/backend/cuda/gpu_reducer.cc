#include "worker/backend/cuda/gpu_reducer.h"

#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "worker/backend/cuda/cuda_libs.h"

namespace ps {

// Rank r's entries are touched only by rank r's thread (and the destructor).
struct GpuReducer::Comms {
  std::vector<cuda::NcclComm> comms;  // null once aborted
  std::vector<absl::Status> aborted;  // why, once aborted
  ~Comms() {
    for (cuda::NcclComm c : comms) cuda::NcclDestroy(c);
  }
};

namespace {

// Wait polls: CUDA has no call that waits for a stream with a timeout, and
// NCCL reports asynchronous errors only when asked. The first polls spin,
// then each sleeps this long: short next to a step, and it keeps a waiting
// rank off the CPU that the other ranks' threads need.
constexpr int kSpinPolls = 1000;
constexpr absl::Duration kPollInterval = absl::Microseconds(100);

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
  comms->aborted.assign(cuda.size(), absl::OkStatus());
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

absl::Status GpuReducer::CheckRank(int rank) const {
  if (rank < 0 || rank >= num_ranks()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "GpuReducer: rank ", rank, " not in [0, ", num_ranks(), ")"));
  }
  const absl::Status& aborted = comms_->aborted[rank];
  if (!aborted.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("GpuReducer: rank ", rank, " (", backends_[rank]->device(),
                     ") was aborted earlier: ", aborted.message()));
  }
  return absl::OkStatus();
}

absl::Status GpuReducer::Abort(int rank, absl::Status why) {
  cuda::NcclAbort(comms_->comms[rank]);
  comms_->comms[rank] = nullptr;
  comms_->aborted[rank] = why;
  return why;
}

absl::Status GpuReducer::AllReduceSum(int rank, float* data, size_t n) {
  PS_RETURN_IF_ERROR(CheckRank(rank));
  if (n > 0 && data == nullptr) {
    return absl::InvalidArgumentError("GpuReducer: data is null");
  }
  if (n == 0) return absl::OkStatus();
  CudaBackend* b = backends_[rank];
  PS_RETURN_IF_ERROR(b->Activate());
  if (const char* err =
          cuda::NcclAllReduceSum(comms_->comms[rank], data, n, b->stream())) {
    return NcclError(err, "ncclAllReduce");
  }
  return absl::OkStatus();
}

absl::Status GpuReducer::Wait(int rank, absl::Time deadline) {
  PS_RETURN_IF_ERROR(CheckRank(rank));
  CudaBackend* b = backends_[rank];
  PS_RETURN_IF_ERROR(b->Activate());
  for (int polls = 0;; ++polls) {
    const cudaError_t done = cudaStreamQuery(b->stream());
    if (done == cudaSuccess) return absl::OkStatus();
    if (done != cudaErrorNotReady) {
      return absl::InternalError(absl::StrCat("GpuReducer: rank ", rank, " (",
                                              b->device(),
                                              "): ", cudaGetErrorString(done)));
    }
    if (const char* err = cuda::NcclAsyncError(comms_->comms[rank])) {
      return Abort(rank, absl::InternalError(absl::StrCat(
                             "GpuReducer: rank ", rank, " (", b->device(),
                             "): NCCL asynchronous error: ", err)));
    }
    if (absl::Now() >= deadline) {
      return Abort(rank,
                   absl::DeadlineExceededError(absl::StrCat(
                       "GpuReducer: rank ", rank, " (", b->device(),
                       "): the all-reduce did not complete by its deadline "
                       "(a peer GPU failed or never joined); NCCL aborted")));
    }
    if (polls >= kSpinPolls) absl::SleepFor(kPollInterval);
  }
}

absl::Status GpuReducer::AllReduceSumAll(const std::vector<float*>& data,
                                         size_t n) {
  if (data.size() != backends_.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("GpuReducer: data has ", data.size(), " buffers, want ",
                     backends_.size()));
  }
  for (size_t i = 0; i < data.size(); ++i) {
    PS_RETURN_IF_ERROR(CheckRank(static_cast<int>(i)));
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
