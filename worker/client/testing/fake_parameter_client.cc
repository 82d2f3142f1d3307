#include "worker/client/testing/fake_parameter_client.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/init.h"

namespace ps {

absl::StatusOr<std::vector<float>> InitialParameters(
    uint64_t seed, const std::vector<TensorSpec>& tensors) {
  size_t total = 0;
  for (const TensorSpec& t : tensors) {
    size_t n = 1;
    for (uint64_t d : t.shape()) n *= d;
    total += n;
  }
  std::vector<float> params(total);
  size_t offset = 0;
  for (const TensorSpec& t : tensors) {
    size_t n = 1;
    for (uint64_t d : t.shape()) n *= d;
    absl::Status s = ValidateInit(t);
    if (s.ok()) {
      s = InitValues(seed, t, 0, absl::MakeSpan(params.data() + offset, n));
    }
    if (!s.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor ", t.name(), ": ", s.message()));
    }
    offset += n;
  }
  return params;
}

class FakeParameterServer::Client final : public ParameterClient {
 public:
  Client(FakeParameterServer* server, uint32_t rank)
      : server_(server), rank_(rank) {}

  absl::Status Pull(uint64_t step, absl::Span<float> params) override {
    return server_->Pull(step, params);
  }
  absl::Status PushPull(uint64_t step, absl::Span<const float> gradient,
                        absl::Span<float> params) override {
    return server_->PushPull(rank_, step, gradient, params);
  }
  bool supports_exchange() const override {
    return !server_->options_.tensors.empty();
  }
  void StartExchange(TensorExchange x) override {
    server_->Exchange(rank_, std::move(x));
  }

 private:
  FakeParameterServer* const server_;
  const uint32_t rank_;
};

namespace {
uint64_t FailureKey(uint32_t rank, uint64_t step) { return step << 16 | rank; }
}  // namespace

FakeParameterServer::FakeParameterServer(std::vector<float> initial,
                                         Options options)
    : options_(options),
      params_(std::move(initial)),
      velocity_(params_.size()),
      version_(options.initial_version),
      pending_(options.num_workers, std::vector<float>(params_.size())),
      arrived_(options.num_workers),
      sum_(params_.size()) {
  size_t offset = 0;
  for (const TensorSpec& t : options_.tensors) {
    size_t n = 1;
    for (uint64_t d : t.shape()) n *= d;
    tensor_index_[t.name()] = tensors_.size();
    TensorState state;
    state.offset = offset;
    state.length = n;
    state.version = version_;
    state.arrived.assign(options_.num_workers, false);
    tensors_.push_back(std::move(state));
    offset += n;
  }
}

std::vector<FakeParameterServer::ExchangeRecord>
FakeParameterServer::exchanges() const {
  absl::MutexLock lock(&mu_);
  return exchanges_;
}

void FakeParameterServer::Exchange(uint32_t rank, TensorExchange x) {
  auto fail = [&x](absl::Status s) { x.done(s); };
  std::vector<size_t> indexes;
  for (const std::string& name : x.tensors) {
    auto it = tensor_index_.find(name);
    if (it == tensor_index_.end()) {
      return fail(absl::NotFoundError(absl::StrCat("tensor ", name)));
    }
    indexes.push_back(it->second);
  }
  std::vector<std::pair<std::function<void(const absl::Status&)>, absl::Status>>
      done;
  {
    absl::MutexLock lock(&mu_);
    exchanges_.push_back({rank, x.step, x.tensors, x.priority});
    if (indexes.empty() || rank >= options_.num_workers ||
        x.gradient.size() != params_.size() ||
        x.params.size() != params_.size()) {
      done.push_back({std::move(x.done),
                      absl::InvalidArgumentError("bad exchange arguments")});
    } else if (auto failure = failures_.find(FailureKey(rank, x.step));
               failure != failures_.end()) {
      done.push_back({std::move(x.done), std::move(failure->second)});
      failures_.erase(failure);
    } else {
      ++pushes_;
      absl::Status s;
      for (size_t i : indexes) {
        TensorState& t = tensors_[i];
        if (t.version != x.step || t.arrived[rank]) {
          s = absl::FailedPreconditionError(absl::StrFormat(
              "exchange of step %d from worker %d: tensor at version %d",
              x.step, rank, t.version));
          break;
        }
      }
      if (s.ok()) {
        for (size_t i : indexes) {
          TensorState& t = tensors_[i];
          std::copy(x.gradient.begin() + t.offset,
                    x.gradient.begin() + t.offset + t.length,
                    pending_[rank].begin() + t.offset);
          t.arrived[rank] = true;
          MaybeApplyTensorLocked(i);
        }
        waiting_.push_back({x.step, indexes, x.params, std::move(x.done)});
        done = TakeDoneLocked();
      } else {
        done.push_back({std::move(x.done), s});
      }
    }
  }
  for (auto& [callback, status] : done) callback(status);
}

void FakeParameterServer::MaybeApplyTensorLocked(size_t tensor) {
  TensorState& t = tensors_[tensor];
  for (bool a : t.arrived) {
    if (!a) return;
  }
  const float inv = 1.0f / static_cast<float>(options_.num_workers);
  const size_t begin = t.offset, end = t.offset + t.length;
  // As PushPull, over the tensor's range: the same sums, bit for bit.
  std::fill(sum_.begin() + begin, sum_.begin() + end, 0.0f);
  for (uint32_t r = 0; r < options_.num_workers; ++r) {
    for (size_t i = begin; i < end; ++i) sum_[i] += pending_[r][i];
  }
  for (size_t i = begin; i < end; ++i) {
    const float g = options_.num_workers == 1 ? sum_[i] : sum_[i] * inv;
    velocity_[i] = options_.momentum * velocity_[i] + g;
    params_[i] -= options_.learning_rate * velocity_[i];
  }
  t.arrived.assign(options_.num_workers, false);
  ++t.version;
  uint64_t lowest = t.version;
  for (const TensorState& other : tensors_) {
    lowest = std::min(lowest, other.version);
  }
  version_ = lowest;
}

std::vector<std::pair<std::function<void(const absl::Status&)>, absl::Status>>
FakeParameterServer::TakeDoneLocked() {
  std::vector<std::pair<std::function<void(const absl::Status&)>, absl::Status>>
      done;
  std::vector<Waiting> still;
  for (Waiting& w : waiting_) {
    bool ready = true;
    for (size_t i : w.tensors) ready = ready && tensors_[i].version > w.step;
    if (!ready) {
      still.push_back(std::move(w));
      continue;
    }
    for (size_t i : w.tensors) {
      const TensorState& t = tensors_[i];
      std::copy(params_.begin() + t.offset,
                params_.begin() + t.offset + t.length,
                w.params.begin() + t.offset);
    }
    done.push_back({std::move(w.done), absl::OkStatus()});
  }
  waiting_.swap(still);
  return done;
}

std::unique_ptr<ParameterClient> FakeParameterServer::NewClient(uint32_t rank) {
  return std::make_unique<Client>(this, rank);
}

void FakeParameterServer::FailPush(uint32_t rank, uint64_t step,
                                   absl::Status status) {
  absl::MutexLock lock(&mu_);
  failures_[FailureKey(rank, step)] = std::move(status);
}

std::vector<float> FakeParameterServer::parameters() const {
  absl::MutexLock lock(&mu_);
  return params_;
}

uint64_t FakeParameterServer::version() const {
  absl::MutexLock lock(&mu_);
  return version_;
}

uint64_t FakeParameterServer::pushes() const {
  absl::MutexLock lock(&mu_);
  return pushes_;
}

absl::Status FakeParameterServer::AwaitVersionLocked(uint64_t version,
                                                     const char* what) {
  struct AtLeast {
    const uint64_t* current;
    uint64_t want;
    bool operator()() const { return *current >= want; }
  } ready{&version_, version};
  if (!mu_.AwaitWithDeadline(absl::Condition(&ready),
                             absl::Now() + options_.step_deadline)) {
    std::vector<uint32_t> missing;
    for (uint32_t r = 0; r < arrived_.size(); ++r) {
      if (!arrived_[r]) missing.push_back(r);
    }
    return absl::DeadlineExceededError(absl::StrFormat(
        "%s: version %d not reached (at %d); missing workers [%s]", what,
        version, version_, absl::StrJoin(missing, ",")));
  }
  return absl::OkStatus();
}

absl::Status FakeParameterServer::Pull(uint64_t step,
                                       absl::Span<float> params) {
  absl::MutexLock lock(&mu_);
  if (params.size() != params_.size()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "params: %d floats, the model has %d", params.size(), params_.size()));
  }
  absl::Status s = AwaitVersionLocked(step, "pull");
  if (!s.ok()) return s;
  std::copy(params_.begin(), params_.end(), params.begin());
  return absl::OkStatus();
}

absl::Status FakeParameterServer::PushPull(uint32_t rank, uint64_t step,
                                           absl::Span<const float> gradient,
                                           absl::Span<float> params) {
  absl::MutexLock lock(&mu_);
  if (gradient.size() != params_.size() || params.size() != params_.size()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("gradient/params: %d/%d floats, the model has %d",
                        gradient.size(), params.size(), params_.size()));
  }
  if (rank >= options_.num_workers) {
    return absl::InvalidArgumentError(absl::StrCat("rank: ", rank));
  }
  auto failure = failures_.find(FailureKey(rank, step));
  if (failure != failures_.end()) {
    absl::Status s = std::move(failure->second);
    failures_.erase(failure);
    return s;
  }
  ++pushes_;
  // A worker may run ahead only to the step in progress.
  absl::Status s = AwaitVersionLocked(step, "push");
  if (!s.ok()) return s;
  if (step != version_) {
    return absl::FailedPreconditionError(
        absl::StrFormat("push for step %d from worker %d is stale (version %d)",
                        step, rank, version_));
  }
  std::copy(gradient.begin(), gradient.end(), pending_[rank].begin());
  arrived_[rank] = true;
  bool all = true;
  for (bool a : arrived_) all = all && a;
  if (all) {
    const float inv = 1.0f / static_cast<float>(options_.num_workers);
    std::fill(sum_.begin(), sum_.end(), 0.0f);
    for (uint32_t r = 0; r < options_.num_workers; ++r) {
      for (size_t i = 0; i < sum_.size(); ++i) sum_[i] += pending_[r][i];
      arrived_[r] = false;
    }
    for (size_t i = 0; i < params_.size(); ++i) {
      const float g = options_.num_workers == 1 ? sum_[i] : sum_[i] * inv;
      velocity_[i] = options_.momentum * velocity_[i] + g;
      params_[i] -= options_.learning_rate * velocity_[i];
    }
    ++version_;
  }
  s = AwaitVersionLocked(step + 1, "push");
  if (!s.ok()) return s;
  std::copy(params_.begin(), params_.end(), params.begin());
  return absl::OkStatus();
}

}  // namespace ps
