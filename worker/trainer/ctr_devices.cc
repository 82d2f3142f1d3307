#include "worker/trainer/ctr_devices.h"

#include <algorithm>
#include <future>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/backend/backend_factory.h"

namespace ps {

absl::StatusOr<std::unique_ptr<CtrDevices>> CtrDevices::Create(
    const ModelSpec& model, const std::vector<std::string>& devices,
    int threads_per_device, size_t batch_size) {
  if (devices.empty()) {
    return absl::InvalidArgumentError("devices: at least one is needed");
  }
  if (batch_size < devices.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("devices: ", devices.size(), " devices for a batch of ",
                     batch_size, " examples; each needs one"));
  }
  const size_t slice = (batch_size + devices.size() - 1) / devices.size();
  std::vector<std::unique_ptr<Backend>> backends;
  std::vector<std::unique_ptr<CtrReplica>> replicas;
  for (const std::string& device : devices) {
    PS_ASSIGN_OR_RETURN(std::unique_ptr<Backend> backend,
                        CreateBackend(device, threads_per_device));
    PS_ASSIGN_OR_RETURN(std::unique_ptr<CtrReplica> replica,
                        CtrReplica::Create(model, backend.get(), slice));
    backends.push_back(std::move(backend));
    replicas.push_back(std::move(replica));
  }
  const size_t n = replicas.front()->num_parameters();
  const int dim = replicas.front()->embedding_dim();
  return std::unique_ptr<CtrDevices>(
      new CtrDevices(std::move(backends), std::move(replicas), n, dim));
}

CtrDevices::CtrDevices(std::vector<std::unique_ptr<Backend>> backends,
                       std::vector<std::unique_ptr<CtrReplica>> replicas,
                       size_t num_parameters, int dim)
    : backends_(std::move(backends)),
      replicas_(std::move(replicas)),
      num_parameters_(num_parameters),
      dim_(static_cast<size_t>(dim)),
      slices_(replicas_.size()) {}

absl::Span<const uint64_t> CtrDevices::unique_ids() const {
  if (replicas_.size() == 1) return replicas_.front()->unique_ids();
  return union_ids_;
}

void CtrDevices::Cut(const CtrBatch& batch, size_t d, size_t begin,
                     size_t end) {
  CtrBatch& b = slices_[d].batch;
  const size_t n = end - begin;
  const size_t fields = batch.size == 0 ? 0 : batch.ids.size() / batch.size;
  const size_t dense = batch.size == 0 ? 0 : batch.dense.size() / batch.size;
  b.size = n;
  b.labels.assign(batch.labels.begin() + begin, batch.labels.begin() + end);
  b.dense.assign(batch.dense.begin() + begin * dense,
                 batch.dense.begin() + end * dense);
  b.ids.assign(batch.ids.begin() + begin * fields,
               batch.ids.begin() + end * fields);
}

absl::Status CtrDevices::Prepare(const CtrBatch& batch) {
  const size_t devices = replicas_.size();
  if (devices == 1) return replicas_.front()->Prepare(batch);
  if (batch.labels.size() != batch.size) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch.labels: ", batch.labels.size(), " elements for ",
                     batch.size, " examples"));
  }
  // Slices as even as can be, the first batch.size % devices one longer.
  size_t begin = 0;
  for (size_t d = 0; d < devices; ++d) {
    const size_t n = batch.size / devices + (d < batch.size % devices ? 1 : 0);
    Cut(batch, d, begin, begin + n);
    absl::Status s = replicas_[d]->Prepare(slices_[d].batch);
    if (!s.ok()) {
      return absl::Status(
          s.code(), absl::StrCat("device ", d, " (examples [", begin, ", ",
                                 begin + n, ")): ", s.message()));
    }
    begin += n;
  }
  Unite();
  return absl::OkStatus();
}

void CtrDevices::Unite() {
  union_ids_.clear();
  absl::flat_hash_map<uint64_t, uint32_t> where;
  for (size_t d = 0; d < replicas_.size(); ++d) {
    const absl::Span<const uint64_t> ids = replicas_[d]->unique_ids();
    std::vector<uint32_t>& index = slices_[d].index;
    index.resize(ids.size());
    for (size_t u = 0; u < ids.size(); ++u) {
      auto [it, added] =
          where.try_emplace(ids[u], static_cast<uint32_t>(union_ids_.size()));
      if (added) union_ids_.push_back(ids[u]);
      index[u] = it->second;
    }
  }
}

absl::Status CtrDevices::ComputeSlice(size_t d, const float* dense_params,
                                      const float* rows, float grad_scale) {
  Slice& s = slices_[d];
  const size_t u = s.index.size();
  s.rows.resize(u * dim_);
  for (size_t i = 0; i < u; ++i) {
    std::copy_n(rows + s.index[i] * dim_, dim_, s.rows.data() + i * dim_);
  }
  s.row_grads.resize(u * dim_);
  s.dense_grad.resize(num_parameters_);
  s.loss = 0.0;
  absl::Status status = replicas_[d]->ComputeGradient(
      dense_params, s.rows.data(), s.dense_grad.data(), s.row_grads.data(),
      &s.loss, grad_scale);
  if (!status.ok()) {
    return absl::Status(status.code(),
                        absl::StrCat("device ", d, ": ", status.message()));
  }
  return absl::OkStatus();
}

absl::Status CtrDevices::ComputeGradient(const float* dense_params,
                                         const float* rows, float* dense_grad,
                                         float* row_grads, double* loss_sum,
                                         float grad_scale) {
  if (replicas_.size() == 1) {
    return replicas_.front()->ComputeGradient(dense_params, rows, dense_grad,
                                              row_grads, loss_sum, grad_scale);
  }
  // Devices 1.. on threads of their own, device 0 here; every one joined
  // before any result is read (the futures' destructors wait).
  std::vector<std::future<absl::Status>> others;
  for (size_t d = 1; d < replicas_.size(); ++d) {
    others.push_back(std::async(std::launch::async, [=] {
      return ComputeSlice(d, dense_params, rows, grad_scale);
    }));
  }
  absl::Status status = ComputeSlice(0, dense_params, rows, grad_scale);
  for (std::future<absl::Status>& f : others) status.Update(f.get());
  PS_RETURN_IF_ERROR(status);
  // Sums in device order.
  std::fill_n(row_grads, union_ids_.size() * dim_, 0.0f);
  double loss = 0.0;
  for (size_t d = 0; d < slices_.size(); ++d) {
    const Slice& s = slices_[d];
    if (d == 0) {
      std::copy(s.dense_grad.begin(), s.dense_grad.end(), dense_grad);
    } else {
      for (size_t i = 0; i < num_parameters_; ++i) {
        dense_grad[i] += s.dense_grad[i];
      }
    }
    for (size_t i = 0; i < s.index.size(); ++i) {
      float* to = row_grads + s.index[i] * dim_;
      const float* from = s.row_grads.data() + i * dim_;
      for (size_t k = 0; k < dim_; ++k) to[k] += from[k];
    }
    loss += s.loss;
  }
  if (loss_sum != nullptr) *loss_sum = loss;
  return absl::OkStatus();
}

}  // namespace ps
