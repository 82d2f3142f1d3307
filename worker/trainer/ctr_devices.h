// CtrDevices: a ctr model's training step over every device of a worker
// (WorkerdConfig.devices): the batch is split into contiguous slices, one
// per device, each device computes its slice's gradients on its own
// CtrReplica, and the worker sums them (pre-aggregation) before the one
// push, as the dense trainer does for its devices.
//
//   PS_ASSIGN_OR_RETURN(std::unique_ptr<CtrDevices> d,
//       CtrDevices::Create(job.model(), {"cpu:0", "cpu:1"}, 1, 512));
//   PS_RETURN_IF_ERROR(d->Prepare(batch));
//   Pull(d->unique_ids(), rows.data());                 // U x dim
//   PS_RETURN_IF_ERROR(d->ComputeGradient(params.data(), rows.data(),
//       grad.data(), row_grads.data(), &loss_sum, 1.0f / global_batch));
//
// The worker's ids are the union of the devices' distinct ids in
// first-occurrence order over the whole batch (device 0's slice first), so
// the rows pulled and pushed are exactly those of one device holding the
// whole batch. Device d's rows are gathered from the union's; the row
// gradients are scattered back and summed, and the dense gradients summed,
// in device order: deterministic for a given device list (not bitwise the
// same as one device: the sums are grouped differently). With one device
// nothing is copied: the replica works on the caller's buffers.
//
// Thread-compatible: one trainer thread calls it; ComputeGradient runs
// devices 1.. on threads of their own for the call's duration.
#ifndef WORKER_TRAINER_CTR_DEVICES_H_
#define WORKER_TRAINER_CTR_DEVICES_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "proto/job.pb.h"
#include "worker/backend/backend.h"
#include "worker/data/ctr_example.h"
#include "worker/model/ctr_model.h"

namespace ps {

class CtrDevices {
 public:
  // One backend and replica per entry of `devices` (at least one; the
  // factory's names, worker/backend/backend_factory.h), each sized for its
  // slice of `batch_size`. kInvalidArgument naming the field for no
  // devices, more devices than examples, or the factory's and the model's
  // errors.
  static absl::StatusOr<std::unique_ptr<CtrDevices>> Create(
      const ModelSpec& model, const std::vector<std::string>& devices,
      int threads_per_device, size_t batch_size);

  // Splits `batch` (at most the batch_size given to Create) over the
  // devices and prepares each; the union of their ids in unique_ids().
  // The replicas' errors, prefixed with the device and its examples'
  // range in the whole batch.
  absl::Status Prepare(const CtrBatch& batch);

  absl::Span<const uint64_t> unique_ids() const;

  // As CtrReplica::ComputeGradient, over the whole prepared batch: `rows`
  // and `row_grads` hold unique_ids().size() x dim floats; dense_grad the
  // sum of the devices' (each scaled by grad_scale), *loss_sum the sum of
  // their losses.
  absl::Status ComputeGradient(const float* dense_params, const float* rows,
                               float* dense_grad, float* row_grads,
                               double* loss_sum, float grad_scale);

  size_t num_devices() const { return replicas_.size(); }
  size_t num_parameters() const { return num_parameters_; }
  // Device 0's backend (evaluation runs there).
  Backend* first_backend() const { return backends_.front().get(); }

 private:
  struct Slice {
    CtrBatch batch;
    // Row u of this device's unique ids is row index[u] of the union.
    std::vector<uint32_t> index;
    std::vector<float> rows, row_grads, dense_grad;
    double loss = 0.0;
  };

  CtrDevices(std::vector<std::unique_ptr<Backend>> backends,
             std::vector<std::unique_ptr<CtrReplica>> replicas,
             size_t num_parameters, int dim);

  // Device d's slice of `batch` (examples [begin, end)) into slices_[d].
  void Cut(const CtrBatch& batch, size_t d, size_t begin, size_t end);
  // The union of the prepared replicas' ids, and each slice's index.
  void Unite();
  absl::Status ComputeSlice(size_t d, const float* dense_params,
                            const float* rows, float grad_scale);

  std::vector<std::unique_ptr<Backend>> backends_;
  std::vector<std::unique_ptr<CtrReplica>> replicas_;
  const size_t num_parameters_;
  const size_t dim_;
  std::vector<Slice> slices_;
  std::vector<uint64_t> union_ids_;
};

}  // namespace ps

#endif  // WORKER_TRAINER_CTR_DEVICES_H_
