#include "worker/trainer/device_group.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "worker/backend/backend_factory.h"

namespace ps {
namespace {

// Far more replicas than one machine holds; bounds the reduce's stack array.
constexpr size_t kMaxDevices = 64;

// A traced device finished a phase of a chunk of examples: the span from
// *mark (the phase's start) to now; the next phase starts now.
void TracePhase(const StepTrace& trace, size_t device, bool forward,
                int64_t* mark) {
  const int64_t now = TraceRecorder::NowNs();
  TraceSpan span;
  span.set_kind(forward ? TRACE_FORWARD : TRACE_BACKWARD);
  span.set_step(trace.step);
  span.set_device(static_cast<uint32_t>(device));
  span.set_start_ns(*mark);
  span.set_end_ns(now);
  trace.recorder->Add(span);
  *mark = now;
}

}  // namespace

void SplitBatch(size_t n, absl::Span<const double> weights,
                absl::Span<size_t> counts) {
  const size_t k = weights.size();
  double total = 0.0;
  for (double w : weights) total += w;
  auto exact = [&](size_t i) { return n * (weights[i] / total); };
  size_t assigned = 0;
  for (size_t i = 0; i < k; ++i) {
    counts[i] = static_cast<size_t>(std::floor(exact(i)));
    // Floating point must not push the floors past n.
    counts[i] = std::min(counts[i], n - assigned);
    assigned += counts[i];
  }
  // Largest remainder: the leftover examples (fewer than k) go one each to
  // the devices in order of decreasing fractional share, lower index first
  // on ties. Walking that order pick by pick keeps this allocation-free.
  double prev_frac = 2.0;  // above any fraction: nothing picked yet
  size_t prev = 0;
  for (size_t left = n - assigned; left > 0;) {
    size_t best = k;
    double best_frac = -1.0;
    for (size_t i = 0; i < k; ++i) {
      const double frac = exact(i) - std::floor(exact(i));
      const bool after_prev =
          frac < prev_frac || (frac == prev_frac && i > prev);
      if (after_prev && frac > best_frac) best_frac = frac, best = i;
    }
    if (best == k) {  // every device had one (rounding slack): start over
      prev_frac = 2.0;
      continue;
    }
    ++counts[best];
    --left;
    prev_frac = best_frac;
    prev = best;
  }
}

namespace {

// The weights Create uses (equal when none are given), or kInvalidArgument
// naming the option that is wrong.
absl::StatusOr<std::vector<double>> CheckOptions(
    const DeviceGroup::Options& options) {
  if (options.devices.empty()) {
    return absl::InvalidArgumentError("devices: at least one device needed");
  }
  absl::flat_hash_set<std::string> seen;
  for (const std::string& d : options.devices) {
    if (!seen.insert(d).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("devices: \"", d, "\" listed twice"));
    }
  }
  std::vector<double> weights = options.weights;
  if (weights.empty()) weights.assign(options.devices.size(), 1.0);
  if (weights.size() != options.devices.size()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("weights: %d weights for %d devices", weights.size(),
                        options.devices.size()));
  }
  for (size_t i = 0; i < weights.size(); ++i) {
    if (!(weights[i] > 0.0) || !std::isfinite(weights[i])) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "weights[%d]: must be a finite number > 0, got %g", i, weights[i]));
    }
  }
  if (options.devices.size() > kMaxDevices) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "devices: %d listed, at most %d", options.devices.size(), kMaxDevices));
  }
  if (options.max_batch == 0) {
    return absl::InvalidArgumentError("max_batch: must be >= 1");
  }
  if (options.threads_per_device < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "threads_per_device: must be >= 0, got ", options.threads_per_device));
  }
  return weights;
}

}  // namespace

absl::StatusOr<std::unique_ptr<DeviceGroup>> DeviceGroup::Create(
    const ModelSpec& spec, const Options& options) {
  PS_ASSIGN_OR_RETURN(std::vector<double> weights, CheckOptions(options));
  std::unique_ptr<DeviceGroup> group(new DeviceGroup());
  group->weights_ = std::move(weights);
  group->max_batch_ = options.max_batch;
  group->reduce_timeout_ = options.reduce_timeout;
  group->names_ = options.devices;
  group->counts_.resize(options.devices.size());
  group->offsets_.resize(options.devices.size());
  for (const std::string& name : options.devices) {
    auto d = std::make_unique<Device>();
    d->name = name;
    absl::StatusOr<std::unique_ptr<Backend>> backend =
        CreateBackend(name, options.threads_per_device, options.cpu_kernels,
                      options.cpu_kernel_choices);
    if (!backend.ok()) {
      return absl::Status(
          backend.status().code(),
          absl::StrCat("device ", name, ": ", backend.status().message()));
    }
    d->backend = *std::move(backend);
    // This device's share of a training step, rounded up.
    const size_t share = static_cast<size_t>(std::ceil(
        options.tune_batch * group->weights_[group->devices_.size()] /
        std::accumulate(group->weights_.begin(), group->weights_.end(), 0.0)));
    absl::StatusOr<std::unique_ptr<Model>> model =
        Model::Create(spec, d->backend.get(), options.max_batch, share);
    if (!model.ok()) {
      return absl::Status(
          model.status().code(),
          absl::StrCat("device ", name, ": ", model.status().message()));
    }
    d->model = *std::move(model);
    group->devices_.push_back(std::move(d));
  }
  PS_RETURN_IF_ERROR(group->MaybeReduceOnDevices());
  // On the host path device 0 writes its gradient straight into the
  // caller's buffer, the others into their own.
  for (size_t i = 1; i < group->devices_.size(); ++i) {
    Device& d = *group->devices_[i];
    if (!group->reduces_on_devices()) d.grad.resize(d.model->num_parameters());
  }
  // Device 0 runs on the calling thread: one hand-off fewer per step, none
  // at all with a single device.
  for (size_t i = 1; i < group->devices_.size(); ++i) {
    DeviceGroup* g = group.get();
    group->devices_[i]->thread = std::thread([g, i] { g->DeviceMain(i); });
  }
  return group;
}

std::vector<std::string> DeviceGroup::kernel_choices() const {
  std::vector<std::string> out;
  for (const auto& d : devices_) {
    const std::vector<std::string>& c = d->model->kernel_choices();
    out.insert(out.end(), c.begin(), c.end());
  }
  return out;
}

absl::Status DeviceGroup::MaybeReduceOnDevices() {
  if (devices_.size() < 2) return absl::OkStatus();
  std::vector<Backend*> backends;
  for (const auto& d : devices_) {
    if (d->backend->host_memory()) return absl::OkStatus();  // a CPU replica
    backends.push_back(d->backend.get());
  }
  absl::StatusOr<std::unique_ptr<LocalReducer>> reducer =
      CreateGpuReducer(backends);
  // A build without NCCL sums on the host.
  if (reducer.status().code() == absl::StatusCode::kFailedPrecondition) {
    return absl::OkStatus();
  }
  if (!reducer.ok()) {
    return absl::Status(reducer.status().code(),
                        absl::StrCat("devices: the GPUs' all-reduce: ",
                                     reducer.status().message()));
  }
  reducer_ = *std::move(reducer);
  return absl::OkStatus();
}

DeviceGroup::~DeviceGroup() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  for (auto& d : devices_) {
    if (d->thread.joinable()) d->thread.join();
  }
}

absl::Status DeviceGroup::PinHost(void* host, size_t bytes) {
  for (size_t i = 0; i < devices_.size(); ++i) {
    absl::Status s = devices_[i]->backend->PinHost(host, bytes);
    if (!s.ok()) {
      for (size_t j = 0; j < i; ++j) devices_[j]->backend->UnpinHost(host);
      return s;
    }
  }
  return absl::OkStatus();
}

void DeviceGroup::UnpinHost(void* host) {
  for (auto& d : devices_) d->backend->UnpinHost(host);
}

size_t DeviceGroup::num_parameters() const {
  return devices_[0]->model->num_parameters();
}
size_t DeviceGroup::input_dim() const {
  return devices_[0]->model->input_dim();
}
size_t DeviceGroup::num_classes() const {
  return devices_[0]->model->num_classes();
}
const std::vector<TensorSpec>& DeviceGroup::tensors() const {
  return devices_[0]->model->tensors();
}
size_t DeviceGroup::num_layers() const {
  return devices_[0]->model->num_layers();
}
std::pair<size_t, size_t> DeviceGroup::LayerRange(size_t layer) const {
  return devices_[0]->model->LayerRange(layer);
}

void DeviceGroup::DeviceMain(size_t index) {
  uint64_t seen = 0;
  for (;;) {
    Task task;
    size_t begin, n;
    {
      absl::MutexLock lock(&mu_);
      struct Wake {
        const DeviceGroup* g;
        const uint64_t* seen;
        bool operator()() const ABSL_NO_THREAD_SAFETY_ANALYSIS {
          return g->stop_ || g->generation_ != *seen;
        }
      } wake{this, &seen};
      mu_.Await(absl::Condition(&wake));
      if (stop_) return;
      // A device that slept through a task it had no share of sees only the
      // latest one; the slice is read under the lock that published it.
      seen = generation_;
      task = task_;
      begin = offsets_[index];
      n = counts_[index];
    }
    if (n == 0 && !task.all_devices) continue;
    RunOnDevice(index, task, begin, n);
    absl::MutexLock lock(&mu_);
    --pending_;
  }
}

void DeviceGroup::RunOnDevice(size_t index, const Task& task, size_t begin,
                              size_t n) {
  Device& d = *devices_[index];
  const size_t dim = d.model->input_dim();
  d.loss_sum = 0.0;
  d.correct = 0;
  if (task.kind == TaskKind::kGradient && reducer_ != nullptr) {
    d.status = DeviceGradient(index, task, begin, n);
    return;
  }
  if (task.kind == TaskKind::kGradient) {
    float* grad = index == 0 ? task.grad0 : d.grad.data();
    LayerHooks hooks;
    if (task.hooks != nullptr) {
      hooks.before_forward = task.hooks->before_forward;
      hooks.after_backward = [this, &task](size_t l) { LayerDone(task, l); };
    }
    int64_t mark = 0;
    if (task.trace.recorder != nullptr) {
      mark = TraceRecorder::NowNs();
      hooks.phase_done = [&task, &mark, index](bool forward) {
        TracePhase(task.trace, index, forward, &mark);
      };
    }
    const bool any_hooks =
        task.hooks != nullptr || task.trace.recorder != nullptr;
    d.status = d.model->ComputeGradient(
        task.params, task.x + begin * dim, task.labels + begin, n, grad,
        &d.loss_sum, &d.correct, task.grad_scale, any_hooks ? &hooks : nullptr);
    return;
  }
  // The model runs an n larger than max_batch in chunks of max_batch.
  d.status = d.model->Evaluate(task.params, task.x + begin * dim,
                               task.labels + begin, n, &d.loss_sum, &d.correct);
}

absl::Status DeviceGroup::DeviceGradient(size_t index, const Task& task,
                                         size_t begin, size_t n) {
  Device& d = *devices_[index];
  const size_t dim = d.model->input_dim();
  LayerHooks hooks;  // the gradient stays on the GPUs: forward waits only
  if (task.hooks != nullptr) hooks.before_forward = task.hooks->before_forward;
  int64_t mark = 0;
  if (task.trace.recorder != nullptr) {
    mark = TraceRecorder::NowNs();
    hooks.phase_done = [&task, &mark, index](bool forward) {
      TracePhase(task.trace, index, forward, &mark);
    };
  }
  const bool any_hooks =
      task.hooks != nullptr || task.trace.recorder != nullptr;
  PS_RETURN_IF_ERROR(d.model->ComputeDeviceGradient(
      task.params, task.x + begin * dim, task.labels + begin, n, &d.loss_sum,
      &d.correct, task.grad_scale, any_hooks ? &hooks : nullptr));
  const int rank = static_cast<int>(index);
  const int64_t reduce_start =
      task.trace.recorder != nullptr ? TraceRecorder::NowNs() : 0;
  PS_RETURN_IF_ERROR(reducer_->AllReduceSum(rank, d.model->device_gradient(),
                                            d.model->num_parameters()));
  PS_RETURN_IF_ERROR(reducer_->Wait(rank, absl::Now() + reduce_timeout_));
  if (index == 0) TraceReduce(task.trace, -1, reduce_start);
  if (index != 0) return absl::OkStatus();
  return d.model->CopyGradientToHost(task.grad0);
}

void DeviceGroup::RunTask(const Task& task) {
  size_t begin0, n0;
  {
    absl::MutexLock lock(&mu_);
    if (task.kind == TaskKind::kGradient) {
      SplitBatch(task.n, weights_, absl::MakeSpan(counts_));
    } else {
      std::fill(counts_.begin(), counts_.end(), 0);
      counts_[0] = task.n;
    }
    size_t helpers = 0;  // devices other than 0 with work
    for (size_t i = 0; i < devices_.size(); ++i) {
      offsets_[i] = i == 0 ? 0 : offsets_[i - 1] + counts_[i - 1];
      if (i > 0 && (counts_[i] > 0 || task.all_devices)) ++helpers;
    }
    begin0 = offsets_[0];
    n0 = counts_[0];
    if (task.hooks != nullptr) {
      absl::MutexLock layer_lock(&layer_mu_);
      layer_devices_ = 0;
      for (size_t i = 0; i < devices_.size(); ++i) {
        if (counts_[i] > 0 || task.all_devices) ++layer_devices_;
      }
      layer_arrivals_.assign(num_layers(), 0);
    }
    if (helpers > 0) {
      task_ = task;
      pending_ = helpers;
      ++generation_;
    }
  }
  if (n0 > 0 || task.all_devices) RunOnDevice(0, task, begin0, n0);
  absl::MutexLock lock(&mu_);
  struct Done {
    const size_t* pending;
    bool operator()() const { return *pending == 0; }
  } done{&pending_};
  mu_.Await(absl::Condition(&done));
}

absl::Status DeviceGroup::ComputeGradient(const float* params, const float* x,
                                          const int32_t* labels, size_t n,
                                          float* grad, double* loss_sum,
                                          size_t* correct,
                                          const GradientHooks* hooks,
                                          StepTrace trace) {
  if (n == 0) {
    return absl::InvalidArgumentError("n: a batch needs at least one example");
  }
  Task task;
  task.kind = TaskKind::kGradient;
  task.params = params;
  task.x = x;
  task.labels = labels;
  task.n = n;
  task.grad0 = grad;
  // Each replica scales its sum by 1 / n as it computes it (see
  // Model::ComputeGradient), so the reduce below only adds.
  task.grad_scale = 1.0f / static_cast<float>(n);
  task.all_devices = reducer_ != nullptr;
  task.hooks = hooks;
  task.trace = trace;
  RunTask(task);
  PS_RETURN_IF_ERROR(Collect(task.all_devices, loss_sum, correct));
  if (reducer_ != nullptr) {
    // On the devices, device 0 has copied the sum into grad already.
    if (hooks != nullptr && hooks->layer_ready) {
      for (size_t l = num_layers(); l-- > 0;) hooks->layer_ready(l);
    }
    return absl::OkStatus();
  }
  // With hooks the layers were reduced as they finished (LayerDone).
  if (hooks == nullptr) {
    const int64_t start =
        trace.recorder != nullptr ? TraceRecorder::NowNs() : 0;
    ReduceRange(grad, 0, num_parameters());
    TraceReduce(trace, -1, start);
  }
  return absl::OkStatus();
}

void DeviceGroup::TraceReduce(const StepTrace& trace, int32_t layer,
                              int64_t start_ns) const {
  if (trace.recorder == nullptr || devices_.size() < 2) return;
  TraceSpan span;
  span.set_kind(TRACE_LOCAL_REDUCE);
  span.set_step(trace.step);
  span.set_layer(layer);
  span.set_start_ns(start_ns);
  span.set_end_ns(TraceRecorder::NowNs());
  trace.recorder->Add(span);
}

void DeviceGroup::LayerDone(const Task& task, size_t layer) {
  {
    absl::MutexLock lock(&layer_mu_);
    if (++layer_arrivals_[layer] < layer_devices_) return;
  }
  // Every device with examples has written this layer: the last one here
  // sums it. The next layer's last arrival comes after this returns (each
  // device finishes its layers in order), so calls never overlap.
  const auto [offset, length] = LayerRange(layer);
  const int64_t start =
      task.trace.recorder != nullptr ? TraceRecorder::NowNs() : 0;
  ReduceRange(task.grad0, offset, offset + length);
  TraceReduce(task.trace, static_cast<int32_t>(layer), start);
  if (task.hooks->layer_ready) task.hooks->layer_ready(layer);
}

void DeviceGroup::ReduceRange(float* grad, size_t begin, size_t end) const {
  // grad holds device 0's scaled sum; the other replicas' are added to it in
  // device order.
  const float* parts[kMaxDevices];
  size_t num_parts = 0;
  for (size_t i = 1; i < devices_.size(); ++i) {
    if (counts_[i] > 0) parts[num_parts++] = devices_[i]->grad.data();
  }
  // A batch smaller than the device count can leave device 0 without work.
  if (counts_[0] == 0) std::fill(grad + begin, grad + end, 0.0f);
  // At most one pass over the range, in place (none for one device); the
  // common case unrolled.
  if (num_parts == 1) {
    float* __restrict g0 = grad;
    const float* __restrict g1 = parts[0];
    for (size_t j = begin; j < end; ++j) g0[j] += g1[j];
  } else if (num_parts > 1) {
    for (size_t j = begin; j < end; ++j) {
      float s = grad[j];
      for (size_t k = 0; k < num_parts; ++k) s += parts[k][j];
      grad[j] = s;
    }
  }
}

absl::Status DeviceGroup::Collect(bool all, double* loss_sum,
                                  size_t* correct) const {
  *loss_sum = 0.0;
  *correct = 0;
  const Device* failed = nullptr;
  for (size_t i = 0; i < devices_.size(); ++i) {
    if (counts_[i] == 0 && !all) continue;
    const Device& d = *devices_[i];
    if (!d.status.ok()) {
      if (failed == nullptr ||
          (failed->status.code() == absl::StatusCode::kDeadlineExceeded &&
           d.status.code() != absl::StatusCode::kDeadlineExceeded)) {
        failed = &d;
      }
      continue;
    }
    *loss_sum += d.loss_sum;
    *correct += d.correct;
  }
  if (failed == nullptr) return absl::OkStatus();
  return absl::Status(
      failed->status.code(),
      absl::StrCat("device ", failed->name, ": ", failed->status.message()));
}

absl::Status DeviceGroup::Evaluate(const float* params, const float* x,
                                   const int32_t* labels, size_t n,
                                   double* loss_sum, size_t* correct) {
  *loss_sum = 0.0;
  *correct = 0;
  if (n == 0) return absl::OkStatus();
  Task task;
  task.kind = TaskKind::kEvaluate;
  task.params = params;
  task.x = x;
  task.labels = labels;
  task.n = n;
  RunTask(task);
  const Device& d = *devices_[0];
  if (!d.status.ok()) {
    return absl::Status(d.status.code(), absl::StrCat("device ", d.name, ": ",
                                                      d.status.message()));
  }
  *loss_sum = d.loss_sum;
  *correct = d.correct;
  return absl::OkStatus();
}

}  // namespace ps
