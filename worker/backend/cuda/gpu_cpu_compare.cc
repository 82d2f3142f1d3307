#include "worker/backend/cuda/gpu_cpu_compare.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "core/model_spec.h"
#include "worker/model/model.h"
#include "worker/model/testing/model_test_util.h"

namespace ps {

// max|got - want| / max|want|; NaN anywhere (an unwritten output) gives NaN.
double MaxRelativeDifference(const std::vector<float>& got,
                             const std::vector<float>& want) {
  if (got.size() != want.size())
    return std::numeric_limits<double>::quiet_NaN();
  double scale = 0, diff = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(got[i]) || std::isnan(want[i])) {
      return std::numeric_limits<double>::quiet_NaN();
    }
    scale = std::max<double>(scale, std::abs(want[i]));
    diff = std::max<double>(diff, std::abs(double{got[i]} - want[i]));
  }
  if (scale == 0)
    return diff == 0 ? 0 : std::numeric_limits<double>::infinity();
  return diff / scale;
}

namespace {

constexpr int kClasses = 10;

std::vector<float> RandomFloats(size_t n, std::mt19937* rng) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(*rng);
  return v;
}

// The same buffers on the CPU (side 0) and the GPU (side 1): upload once, run
// a call on both sides, compare what came out.
class Twin {
 public:
  template <typename T>
  struct Pair {
    T* p[2] = {nullptr, nullptr};
    size_t n = 0;
  };

  Twin(Backend* cpu, Backend* gpu) : b_{cpu, gpu} {}

  // side 0: the CPU backend, 1: the GPU backend.
  Backend* side(int s) const { return b_[s]; }

  absl::StatusOr<Pair<float>> Upload(const std::vector<float>& host) {
    return UploadTo(host, &floats_);
  }
  absl::StatusOr<Pair<int32_t>> Upload(const std::vector<int32_t>& host) {
    return UploadTo(host, &ints_);
  }
  // An output buffer of n floats, NaN on both sides.
  absl::StatusOr<Pair<float>> Output(size_t n) {
    return Upload(std::vector<float>(n, std::nanf("")));
  }

  // Runs call(backend, side) on the CPU, then the GPU, and waits for both.
  template <typename Call>
  absl::Status Run(Call call) {
    for (int s = 0; s < 2; ++s) {
      call(b_[s], s);
      PS_RETURN_IF_ERROR(b_[s]->Synchronize());
    }
    return absl::OkStatus();
  }

  // Copies the CPU side's contents over the GPU side's. A call promised
  // bit-identical is checked on identical inputs: `pair` may hold the two
  // sides' outputs of an earlier, summing call, which differ in rounding.
  absl::Status Align(const Pair<float>& pair) {
    std::vector<float> host(pair.n);
    b_[0]->CopyToHost(pair.p[0], pair.n, host.data());
    PS_RETURN_IF_ERROR(b_[0]->Synchronize());
    b_[1]->CopyToDevice(host.data(), pair.n, pair.p[1]);
    return b_[1]->Synchronize();
  }

  // The GPU side's contents against the CPU side's.
  absl::StatusOr<double> Compare(const Pair<float>& out) {
    std::vector<float> host[2];
    for (int s = 0; s < 2; ++s) {
      host[s].resize(out.n);
      b_[s]->CopyToHost(out.p[s], out.n, host[s].data());
      PS_RETURN_IF_ERROR(b_[s]->Synchronize());
    }
    return MaxRelativeDifference(host[1], host[0]);
  }

 private:
  template <typename T>
  absl::StatusOr<Pair<T>> UploadTo(const std::vector<T>& host,
                                   std::vector<DeviceBuffer<T>>* keep) {
    Pair<T> pair;
    pair.n = host.size();
    for (int s = 0; s < 2; ++s) {
      PS_ASSIGN_OR_RETURN(DeviceBuffer<T> buf, b_[s]->Allocate<T>(host.size()));
      b_[s]->CopyToDevice(host.data(), host.size(), buf.data());
      PS_RETURN_IF_ERROR(b_[s]->Synchronize());  // `host` may go away next
      pair.p[s] = buf.data();
      keep->push_back(std::move(buf));
    }
    return pair;
  }

  Backend* b_[2];
  std::vector<DeviceBuffer<float>> floats_;
  std::vector<DeviceBuffer<int32_t>> ints_;
};

// Appends one "ops" check: runs `call` on both sides into `out`, compares.
template <typename Call>
absl::Status CheckOp(Twin& twin, const std::string& name, double tolerance,
                     const Twin::Pair<float>& out, Call call,
                     std::vector<Check>* checks) {
  PS_RETURN_IF_ERROR(twin.Run(call));
  PS_ASSIGN_OR_RETURN(double diff, twin.Compare(out));
  checks->push_back({"ops", name, diff, tolerance});
  return absl::OkStatus();
}

// SoftmaxCrossEntropy on `logits` (kCompareBatch x kClasses): its gradient, and
// the loss sum and correct count it reports.
absl::Status CheckSoftmax(Twin& twin, const Twin::Pair<float>& logits,
                          std::mt19937* rng, std::vector<Check>* checks) {
  std::vector<int32_t> labels(kCompareBatch);
  for (int32_t& l : labels) l = static_cast<int32_t>((*rng)() % kClasses);
  PS_ASSIGN_OR_RETURN(auto lab, twin.Upload(labels));
  PS_ASSIGN_OR_RETURN(auto grad, twin.Output(kCompareBatch * kClasses));
  // XentStats {double, int64} in floats' worth of backend memory.
  constexpr size_t kStatsFloats = sizeof(XentStats) / sizeof(float);
  PS_ASSIGN_OR_RETURN(auto stats, twin.Output(kStatsFloats));
  PS_RETURN_IF_ERROR(CheckOp(
      twin, "SoftmaxCrossEntropy gradient 64x10", kSumTolerance, grad,
      [&](Backend* b, int s) {
        b->SoftmaxCrossEntropy(kCompareBatch, kClasses, logits.p[s], lab.p[s],
                               1.0f / kCompareBatch, grad.p[s],
                               reinterpret_cast<XentStats*>(stats.p[s]));
      },
      checks));
  XentStats got[2];
  for (int s = 0; s < 2; ++s) {
    twin.side(s)->CopyToHost(stats.p[s], kStatsFloats,
                             reinterpret_cast<float*>(&got[s]));
    PS_RETURN_IF_ERROR(twin.side(s)->Synchronize());
  }
  checks->push_back(
      {"ops", "SoftmaxCrossEntropy loss sum 64x10",
       std::abs(got[1].loss_sum - got[0].loss_sum) / std::abs(got[0].loss_sum),
       kSumTolerance});
  checks->push_back({"ops", "SoftmaxCrossEntropy correct count 64x10",
                     got[1].correct == got[0].correct ? 0.0 : 1.0, 0});
  return absl::OkStatus();
}

// The MLP's (784-256-128-10) calls, batch kCompareBatch: the first dense layer
// forward (GEMM, bias + ReLU) and backward (ReLU, weight, bias and input
// gradients), then the output layer and its loss.
absl::Status CheckMlpOps(Twin& twin, std::mt19937* rng,
                         std::vector<Check>* checks) {
  const int in = 784, hid = 256, h2 = 128;
  const Transpose N = Transpose::kNo, T = Transpose::kYes;
  PS_ASSIGN_OR_RETURN(auto x,
                      twin.Upload(RandomFloats(kCompareBatch * in, rng)));
  PS_ASSIGN_OR_RETURN(auto w, twin.Upload(RandomFloats(in * hid, rng)));
  PS_ASSIGN_OR_RETURN(auto bias, twin.Upload(RandomFloats(hid, rng)));
  PS_ASSIGN_OR_RETURN(auto dy,
                      twin.Upload(RandomFloats(kCompareBatch * hid, rng)));
  PS_ASSIGN_OR_RETURN(auto h, twin.Output(kCompareBatch * hid));
  PS_RETURN_IF_ERROR(CheckOp(
      twin, "Gemm fc0 forward 64x784 * 784x256", kSumTolerance, h,
      [&](Backend* b, int s) {
        b->Gemm(N, N, kCompareBatch, hid, in, 1, x.p[s], in, w.p[s], hid, 0,
                h.p[s], hid);
      },
      checks));
  PS_RETURN_IF_ERROR(twin.Align(h));  // in place, from the GEMM's output
  PS_RETURN_IF_ERROR(CheckOp(
      twin, "BiasRelu 64x256", 0, h,
      [&](Backend* b, int s) {
        b->BiasRelu(kCompareBatch, hid, bias.p[s], h.p[s]);
      },
      checks));
  PS_ASSIGN_OR_RETURN(auto dh, twin.Output(kCompareBatch * hid));
  PS_RETURN_IF_ERROR(CheckOp(
      twin, "ReluBackward 64x256", 0, dh,
      [&](Backend* b, int s) {
        b->ReluBackward(kCompareBatch * hid, h.p[s], dy.p[s], dh.p[s]);
      },
      checks));
  PS_ASSIGN_OR_RETURN(auto dw, twin.Output(in * hid));
  PS_RETURN_IF_ERROR(CheckOp(
      twin, "Gemm fc0 weight gradient 784x64 * 64x256", kSumTolerance, dw,
      [&](Backend* b, int s) {
        b->Gemm(T, N, in, hid, kCompareBatch, 1, x.p[s], in, dh.p[s], hid, 0,
                dw.p[s], hid);
      },
      checks));
  PS_ASSIGN_OR_RETURN(auto db, twin.Output(hid));
  PS_RETURN_IF_ERROR(CheckOp(
      twin, "ColumnSums 64x256", kSumTolerance, db,
      [&](Backend* b, int s) {
        b->ColumnSums(kCompareBatch, hid, 1, dh.p[s], 0, db.p[s]);
      },
      checks));
  PS_ASSIGN_OR_RETURN(auto dx, twin.Output(kCompareBatch * in));
  PS_RETURN_IF_ERROR(CheckOp(
      twin, "Gemm fc0 input gradient 64x256 * 256x784", kSumTolerance, dx,
      [&](Backend* b, int s) {
        b->Gemm(N, T, kCompareBatch, in, hid, 1, dh.p[s], hid, w.p[s], hid, 0,
                dx.p[s], in);
      },
      checks));
  PS_ASSIGN_OR_RETURN(auto w2, twin.Upload(RandomFloats(h2 * kClasses, rng)));
  PS_ASSIGN_OR_RETURN(auto logits, twin.Output(kCompareBatch * kClasses));
  PS_RETURN_IF_ERROR(CheckOp(
      twin, "Gemm fc2 forward 64x128 * 128x10", kSumTolerance, logits,
      [&](Backend* b, int s) {
        b->Gemm(N, N, kCompareBatch, kClasses, h2, 1, h.p[s], hid, w2.p[s],
                kClasses, 0, logits.p[s], kClasses);
      },
      checks));
  return CheckSoftmax(twin, logits, rng, checks);
}

// The CNN's first block (28x28x1, 5x5 conv to 32 filters, 2x2 pool), forward
// and the pooling's backward.
absl::Status CheckConv1Ops(Twin& twin, std::mt19937* rng,
                           std::vector<Check>* checks) {
  const ImageShape in{kCompareBatch, 28, 28, 1};
  const ImageShape conv{kCompareBatch, 28, 28, 32};
  const int k = 5, rows = kCompareBatch * 28 * 28, patch = k * k * in.channels;
  const Transpose N = Transpose::kNo;
  PS_ASSIGN_OR_RETURN(auto x, twin.Upload(RandomFloats(rows, rng)));
  PS_ASSIGN_OR_RETURN(auto w, twin.Upload(RandomFloats(patch * 32, rng)));
  PS_ASSIGN_OR_RETURN(auto cols,
                      twin.Output(static_cast<size_t>(rows) * patch));
  PS_RETURN_IF_ERROR(CheckOp(
      twin, "Im2Col conv0 64x28x28x1 k5", 0, cols,
      [&](Backend* b, int s) { b->Im2Col(in, k, x.p[s], cols.p[s]); }, checks));
  PS_ASSIGN_OR_RETURN(auto y, twin.Output(static_cast<size_t>(rows) * 32));
  PS_RETURN_IF_ERROR(CheckOp(
      twin, "Gemm conv0 forward 50176x25 * 25x32", kSumTolerance, y,
      [&](Backend* b, int s) {
        b->Gemm(N, N, rows, 32, patch, 1, cols.p[s], patch, w.p[s], 32, 0,
                y.p[s], 32);
      },
      checks));
  const size_t pooled = size_t{kCompareBatch} * 14 * 14 * 32;
  PS_ASSIGN_OR_RETURN(auto argmax,
                      twin.Upload(std::vector<int32_t>(pooled, -1)));
  PS_ASSIGN_OR_RETURN(auto p, twin.Output(pooled));
  PS_RETURN_IF_ERROR(twin.Align(y));  // the GEMM's output
  PS_RETURN_IF_ERROR(CheckOp(
      twin, "MaxPool 64x28x28x32 pool 2", 0, p,
      [&](Backend* b, int s) {
        b->MaxPool(conv, 2, y.p[s], p.p[s], argmax.p[s]);
      },
      checks));
  PS_ASSIGN_OR_RETURN(auto dp, twin.Upload(RandomFloats(pooled, rng)));
  PS_ASSIGN_OR_RETURN(auto dy, twin.Output(static_cast<size_t>(rows) * 32));
  return CheckOp(
      twin, "MaxPoolBackward 64x28x28x32 pool 2", 0, dy,
      [&](Backend* b, int s) {
        b->MaxPoolBackward(conv, 2, argmax.p[s], dp.p[s], dy.p[s]);
      },
      checks);
}

// The CNN's second conv layer (14x14x32, 5x5 to 64 filters): im2col, the
// forward GEMM, the weight and patch gradients and col2im.
absl::Status CheckConv2Ops(Twin& twin, std::mt19937* rng,
                           std::vector<Check>* checks) {
  const ImageShape in{kCompareBatch, 14, 14, 32};
  const int k = 5, rows = kCompareBatch * 14 * 14, patch = k * k * in.channels;
  const int filters = 64;
  const Transpose N = Transpose::kNo, T = Transpose::kYes;
  PS_ASSIGN_OR_RETURN(auto x, twin.Upload(RandomFloats(rows * 32, rng)));
  PS_ASSIGN_OR_RETURN(auto w, twin.Upload(RandomFloats(patch * filters, rng)));
  PS_ASSIGN_OR_RETURN(auto dy, twin.Upload(RandomFloats(rows * filters, rng)));
  PS_ASSIGN_OR_RETURN(auto cols,
                      twin.Output(static_cast<size_t>(rows) * patch));
  PS_RETURN_IF_ERROR(CheckOp(
      twin, "Im2Col conv1 64x14x14x32 k5", 0, cols,
      [&](Backend* b, int s) { b->Im2Col(in, k, x.p[s], cols.p[s]); }, checks));
  PS_ASSIGN_OR_RETURN(auto y, twin.Output(static_cast<size_t>(rows) * filters));
  PS_RETURN_IF_ERROR(CheckOp(
      twin, "Gemm conv1 forward 12544x800 * 800x64", kSumTolerance, y,
      [&](Backend* b, int s) {
        b->Gemm(N, N, rows, filters, patch, 1, cols.p[s], patch, w.p[s],
                filters, 0, y.p[s], filters);
      },
      checks));
  PS_ASSIGN_OR_RETURN(auto dw,
                      twin.Output(static_cast<size_t>(patch) * filters));
  PS_RETURN_IF_ERROR(CheckOp(
      twin, "Gemm conv1 weight gradient 800x12544 * 12544x64", kSumTolerance,
      dw,
      [&](Backend* b, int s) {
        b->Gemm(T, N, patch, filters, rows, 1, cols.p[s], patch, dy.p[s],
                filters, 0, dw.p[s], filters);
      },
      checks));
  PS_ASSIGN_OR_RETURN(auto dcols,
                      twin.Output(static_cast<size_t>(rows) * patch));
  PS_RETURN_IF_ERROR(CheckOp(
      twin, "Gemm conv1 patch gradient 12544x64 * 64x800", kSumTolerance, dcols,
      [&](Backend* b, int s) {
        b->Gemm(N, T, rows, patch, filters, 1, dy.p[s], filters, w.p[s],
                filters, 0, dcols.p[s], patch);
      },
      checks));
  PS_ASSIGN_OR_RETURN(auto dx, twin.Output(static_cast<size_t>(rows) * 32));
  PS_RETURN_IF_ERROR(twin.Align(dcols));  // the GEMM's output
  return CheckOp(
      twin, "Col2Im conv1 64x14x14x32 k5", 0, dx,
      [&](Backend* b, int s) { b->Col2Im(in, k, dcols.p[s], dx.p[s]); },
      checks);
}

// One model's forward+backward on both devices from the same parameters and
// batch: each gradient tensor, the loss and the correct count, then the
// forward pass alone (Evaluate).
absl::Status CheckModel(const std::string& label, const ModelSpec& spec,
                        Backend* cpu, Backend* gpu,
                        std::vector<Check>* checks) {
  PS_ASSIGN_OR_RETURN(std::unique_ptr<Model> m0,
                      Model::Create(spec, cpu, kCompareBatch));
  PS_ASSIGN_OR_RETURN(std::unique_ptr<Model> m1,
                      Model::Create(spec, gpu, kCompareBatch));
  const std::vector<float> params = InitParameters(m0->tensors(), 21);
  const LabeledData d =
      LinearlySeparable(kCompareBatch, m0->input_dim(), kClasses, 22);
  const size_t np = m0->num_parameters();
  std::vector<float> grad[2] = {std::vector<float>(np, std::nanf("")),
                                std::vector<float>(np, std::nanf(""))};
  double loss[2];
  size_t correct[2];
  Model* m[2] = {m0.get(), m1.get()};
  for (int s = 0; s < 2; ++s) {
    PS_RETURN_IF_ERROR(
        m[s]->ComputeGradient(params.data(), d.x.data(), d.labels.data(), d.n,
                              grad[s].data(), &loss[s], &correct[s]));
  }
  size_t offset = 0;
  for (const TensorSpec& t : m0->tensors()) {
    size_t size = 1;
    for (uint64_t dim : t.shape()) size *= dim;
    const auto slice = [&](int s) {
      return std::vector<float>(grad[s].begin() + offset,
                                grad[s].begin() + offset + size);
    };
    checks->push_back({"models", absl::StrCat(label, " gradient ", t.name()),
                       MaxRelativeDifference(slice(1), slice(0)),
                       kSumTolerance});
    offset += size;
  }
  checks->push_back({"models", label + " loss (forward+backward)",
                     std::abs(loss[1] - loss[0]) / loss[0], kSumTolerance});
  checks->push_back({"models", label + " correct count",
                     correct[1] == correct[0] ? 0.0 : 1.0, 0});
  for (int s = 0; s < 2; ++s) {
    PS_RETURN_IF_ERROR(m[s]->Evaluate(params.data(), d.x.data(),
                                      d.labels.data(), d.n, &loss[s],
                                      &correct[s]));
  }
  checks->push_back({"models", label + " loss (forward only)",
                     std::abs(loss[1] - loss[0]) / loss[0], kSumTolerance});
  return absl::OkStatus();
}

}  // namespace

absl::Status CompareMlpOps(Backend* cpu, Backend* gpu,
                           std::vector<Check>* checks) {
  Twin twin(cpu, gpu);
  std::mt19937 rng(20261127);
  return CheckMlpOps(twin, &rng, checks);
}

absl::Status CompareCnnOps(Backend* cpu, Backend* gpu,
                           std::vector<Check>* checks) {
  Twin twin(cpu, gpu);
  std::mt19937 rng(20261128);
  PS_RETURN_IF_ERROR(CheckConv1Ops(twin, &rng, checks));
  return CheckConv2Ops(twin, &rng, checks);
}

absl::Status CompareModels(Backend* cpu, Backend* gpu,
                           std::vector<Check>* checks) {
  PS_RETURN_IF_ERROR(CheckModel("mlp", FashionMlpSpec(), cpu, gpu, checks));
  return CheckModel("cnn", FashionCnnSpec(), cpu, gpu, checks);
}

}  // namespace ps
