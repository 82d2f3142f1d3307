// CpuBackend::EmbeddingBagForward/Backward: hand-computed cases (sum, mean,
// empty and repeated ids, strided output), argument errors, and a numerical
// gradient check.

#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "worker/backend/cpu/cpu_backend.h"
#include "worker/backend/testing/embedding_bag_test_util.h"

namespace ps {
namespace {

using ::testing::TestWithParam;

constexpr float kSentinel = -999.0f;

std::unique_ptr<CpuBackend> MakeBackend() {
  absl::StatusOr<std::unique_ptr<CpuBackend>> b = CpuBackend::Create(0, 1);
  EXPECT_TRUE(b.ok()) << b.status();
  return *std::move(b);
}

// Four unique rows of dim 2: row u = [10^u, 2 * 10^u].
const std::vector<float> kRows = {1, 2, 10, 20, 100, 200, 1000, 2000};
constexpr int kNumRows = 4;
constexpr int kDim = 2;

// Bags {0, 1}, {2}, {}, {1, 1, 2}: an empty bag, an id repeated within a bag
// and ids shared across bags; row 3 is never read.
HostBags Bags() { return HostBags({0, 2, 3, 3, 6}, {0, 1, 2, 1, 1, 2}, 4); }

struct ForwardCase {
  std::string name;
  Pooling pooling;
  int bags_per_row;
  int stride;
  int column;  // where out starts within its row (e.g. after dense features)
  std::vector<float> want;  // the whole output buffer, sentinels included
};

class CpuEmbeddingForwardTest : public TestWithParam<ForwardCase> {};

TEST_P(CpuEmbeddingForwardTest, MatchesHandComputed) {
  const ForwardCase& c = GetParam();
  std::unique_ptr<CpuBackend> cpu = MakeBackend();
  const HostBags bags = Bags();
  std::vector<float> out(c.want.size(), kSentinel);
  cpu->EmbeddingBagForward(c.pooling, bags.Batch(), kDim, kRows.data(),
                           c.bags_per_row, c.stride, out.data() + c.column);
  ASSERT_TRUE(cpu->Synchronize().ok());
  EXPECT_EQ(out, c.want);
}

constexpr float S = kSentinel;

INSTANTIATE_TEST_SUITE_P(
    Cases, CpuEmbeddingForwardTest,
    ::testing::Values(
        ForwardCase{"sum_dense",
                    Pooling::kSum,
                    1,
                    kDim,
                    0,
                    {11, 22, 100, 200, 0, 0, 120, 240}},
        ForwardCase{"mean_dense",
                    Pooling::kMean,
                    1,
                    kDim,
                    0,
                    {5.5f, 11, 100, 200, 0, 0, 40, 80}},
        // Two bags per output row, a row stride of 7 and out one column in:
        // columns 0, 5 and 6 of each row stay untouched.
        ForwardCase{"sum_strided",
                    Pooling::kSum,
                    2,
                    7,
                    1,
                    {S, 11, 22, 100, 200, S, S,  //
                     S, 0, 0, 120, 240, S, S}},
        // All four bags side by side in one row, stride exactly 4 * dim.
        ForwardCase{"mean_one_row",
                    Pooling::kMean,
                    4,
                    8,
                    0,
                    {5.5f, 11, 100, 200, 0, 0, 40, 80}}),
    [](const ::testing::TestParamInfo<ForwardCase>& info) {
      return info.param.name;
    });

TEST(CpuEmbeddingTest, BackwardMatchesHandComputed) {
  std::unique_ptr<CpuBackend> cpu = MakeBackend();
  const HostBags bags = Bags();
  // Bag b's gradient, two bags per row of stride 5 (one pad column).
  const std::vector<float> grad_out = {1, 2, 3, 4, S, 5, 6, 7, 8, S};
  std::vector<float> sum(kNumRows * kDim, kSentinel);
  cpu->EmbeddingBagBackward(Pooling::kSum, bags.Batch(), kDim, grad_out.data(),
                            2, 5, sum.data());
  std::vector<float> mean(kNumRows * kDim, kSentinel);
  cpu->EmbeddingBagBackward(Pooling::kMean, bags.Batch(), kDim, grad_out.data(),
                            2, 5, mean.data());
  ASSERT_TRUE(cpu->Synchronize().ok());
  // Row 0: bag 0 once; row 1: bag 0, bag 3 twice; row 2: bags 1 and 3;
  // row 3: nothing.
  EXPECT_EQ(sum, (std::vector<float>{1, 2, 15, 18, 10, 12, 0, 0}));
  // Mean: bag sizes 2, 1, 0, 3; summed in occurrence order like the backend.
  const float t7 = 7.0f / 3, t8 = 8.0f / 3;
  EXPECT_EQ(mean, (std::vector<float>{0.5f, 1, 0.5f + t7 + t7, 1 + t8 + t8,
                                      3 + t7, 4 + t8, 0, 0}));
}

TEST(CpuEmbeddingTest, EmptyBatchesWriteNothingOrZeros) {
  std::unique_ptr<CpuBackend> cpu = MakeBackend();
  // No bags at all: null arrays are fine.
  EmbeddingBatch none;
  cpu->EmbeddingBagForward(Pooling::kMean, none, 4, nullptr, 1, 4, nullptr);
  // Bags but no occurrences: every output is 0; rows is never read.
  const HostBags empty({0, 0, 0}, {}, 2);
  std::vector<float> out(4, kSentinel);
  cpu->EmbeddingBagForward(Pooling::kMean, empty.Batch(), 2, nullptr, 1, 2,
                           out.data());
  std::vector<float> grad(4, kSentinel);
  cpu->EmbeddingBagBackward(Pooling::kMean, empty.Batch(), 2, out.data(), 1, 2,
                            grad.data());
  ASSERT_TRUE(cpu->Synchronize().ok());
  EXPECT_EQ(out, std::vector<float>(4, 0.0f));
  EXPECT_EQ(grad, std::vector<float>(4, 0.0f));
}

struct ErrorCase {
  std::string name;
  bool backward;
  std::function<void(HostBags*)> corrupt;  // applied to Bags()
  std::function<void(EmbeddingBatch*)> corrupt_batch;
  int dim;
  int stride;
  bool null_in;
  bool null_out;
  std::string want;
};

class CpuEmbeddingErrorTest : public TestWithParam<ErrorCase> {};

// The call records kInvalidArgument naming the problem and leaves its output
// untouched; the backend works again after Synchronize().
TEST_P(CpuEmbeddingErrorTest, RejectedAsNoOp) {
  const ErrorCase& c = GetParam();
  std::unique_ptr<CpuBackend> cpu = MakeBackend();
  HostBags bags = Bags();
  if (c.corrupt) c.corrupt(&bags);
  EmbeddingBatch batch = bags.Batch();
  if (c.corrupt_batch) c.corrupt_batch(&batch);
  const std::vector<float> grad_out(4 * kDim, 1.0f);
  std::vector<float> out(kNumRows * kDim * 2, kSentinel);
  const float* in = c.null_in    ? nullptr
                    : c.backward ? grad_out.data()
                                 : kRows.data();
  float* dst = c.null_out ? nullptr : out.data();
  if (c.backward) {
    cpu->EmbeddingBagBackward(Pooling::kSum, batch, c.dim, in, 1, c.stride,
                              dst);
  } else {
    cpu->EmbeddingBagForward(Pooling::kSum, batch, c.dim, in, 1, c.stride, dst);
  }
  const absl::Status s = cpu->Synchronize();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find(c.want), std::string::npos) << s;
  EXPECT_EQ(out, std::vector<float>(out.size(), kSentinel));
  EXPECT_TRUE(cpu->Synchronize().ok());
}

ErrorCase Fwd(std::string name, std::function<void(HostBags*)> corrupt,
              std::string want) {
  return ErrorCase{std::move(name), false, std::move(corrupt),
                   nullptr,         kDim,  kDim,
                   false,           false, std::move(want)};
}

ErrorCase Bwd(std::string name, std::function<void(HostBags*)> corrupt,
              std::string want) {
  ErrorCase c = Fwd(std::move(name), std::move(corrupt), std::move(want));
  c.backward = true;
  return c;
}

ErrorCase WithBatch(ErrorCase c, std::function<void(EmbeddingBatch*)> f) {
  c.corrupt_batch = std::move(f);
  return c;
}

ErrorCase WithShape(ErrorCase c, int dim, int stride, bool null_in,
                    bool null_out) {
  c.dim = dim;
  c.stride = stride;
  c.null_in = null_in;
  c.null_out = null_out;
  return c;
}

INSTANTIATE_TEST_SUITE_P(
    Cases, CpuEmbeddingErrorTest,
    ::testing::Values(
        Fwd(
            "index_too_big", [](HostBags* b) { b->indices[4] = 4; },
            "EmbeddingBagForward: indices[4] = 4 outside [0, num_rows = 4)"),
        Fwd(
            "index_negative", [](HostBags* b) { b->indices[0] = -1; },
            "indices[0] = -1 outside"),
        Bwd(
            "index_too_big_backward", [](HostBags* b) { b->indices[2] = 9; },
            "EmbeddingBagBackward: indices[2] = 9 outside"),
        Fwd(
            "offsets_not_monotone", [](HostBags* b) { b->offsets[2] = 1; },
            "offsets[2] = 1 < offsets[1] = 2"),
        Fwd(
            "offsets_not_from_zero", [](HostBags* b) { b->offsets[0] = 1; },
            "offsets[0] = 1 != 0"),
        Bwd(
            "offsets_wrong_end",
            [](HostBags* b) {
              b->indices.push_back(0);
              *b = HostBags(b->offsets, b->indices, b->num_rows);
            },
            "offsets[4] = 6 != num_indices = 7"),
        Bwd(
            "row_csr_not_ascending",
            [](HostBags* b) {
              std::swap(b->row_occurrences[1], b->row_occurrences[2]);
            },
            "not above row_occurrences[1]"),
        Bwd(
            "row_csr_not_inverse",
            [](HostBags* b) {
              // Row 0 claims occurrence 1, which reads row 1.
              b->row_occurrences[0] = 1;
            },
            "indices[1] = 1"),
        Bwd(
            "row_occurrence_out_of_range",
            [](HostBags* b) { b->row_occurrences[5] = 6; },
            "row_occurrences[5] = 6 outside [0, num_indices = 6)"),
        Bwd(
            "row_offsets_wrong_end", [](HostBags* b) { b->row_offsets[4] = 5; },
            "row_offsets[4] = 5 < row_offsets[3] = 6"),
        WithShape(Fwd("null_rows", nullptr, "rows is null"), kDim, kDim, true,
                  false),
        WithShape(Fwd("null_out", nullptr, "out is null"), kDim, kDim, false,
                  true),
        WithShape(Bwd("null_grad_out", nullptr, "grad_out is null"), kDim, kDim,
                  true, false),
        WithShape(Bwd("null_grad_rows", nullptr, "grad_rows is null"), kDim,
                  kDim, false, true),
        WithBatch(Fwd("null_indices", nullptr, "indices is null"),
                  [](EmbeddingBatch* b) { b->indices = nullptr; }),
        WithBatch(Fwd("null_offsets", nullptr, "offsets is null"),
                  [](EmbeddingBatch* b) { b->offsets = nullptr; }),
        WithBatch(Bwd("null_row_offsets", nullptr, "row_offsets is null"),
                  [](EmbeddingBatch* b) { b->row_offsets = nullptr; }),
        WithBatch(Bwd("null_row_occurrences", nullptr,
                      "row_occurrences is null"),
                  [](EmbeddingBatch* b) { b->row_occurrences = nullptr; }),
        WithBatch(Fwd("negative_rows", nullptr, "num_rows = -1"),
                  [](EmbeddingBatch* b) { b->num_rows = -1; }),
        WithBatch(Fwd("indices_without_bags", nullptr,
                      "num_indices = 6 with num_bags = 0"),
                  [](EmbeddingBatch* b) { b->num_bags = 0; }),
        WithShape(Fwd("zero_dim", nullptr, "dim = 0"), 0, kDim, false, false),
        WithShape(Bwd("stride_too_small", nullptr,
                      "grad_out_stride = 1 < bags_per_row * dim = 2"),
                  kDim, 1, false, false)),
    [](const ::testing::TestParamInfo<ErrorCase>& info) {
      return info.param.name;
    });

// L(rows) = sum over bags and columns of w * out; its gradient with respect
// to rows is Backward(grad_out = w). Central differences of L, accumulated
// in double from the float forward, must agree, for both poolings and a
// strided layout.
TEST(CpuEmbeddingTest, BackwardMatchesNumericalGradient) {
  std::unique_ptr<CpuBackend> cpu = MakeBackend();
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const int dim = 3, num_rows = 4, bags_per_row = 2, stride = 7;
  const HostBags bags({0, 3, 3, 4, 6, 7, 9}, {0, 2, 0, 1, 2, 0, 3, 1, 1},
                      num_rows);
  const int out_rows = bags.num_bags() / bags_per_row;
  std::vector<float> rows(num_rows * dim), w(out_rows * stride);
  for (float& x : rows) x = u(rng);
  for (float& x : w) x = u(rng);
  for (Pooling pooling : {Pooling::kSum, Pooling::kMean}) {
    auto loss = [&](const std::vector<float>& r) {
      std::vector<float> out(w.size(), 0.0f);
      cpu->EmbeddingBagForward(pooling, bags.Batch(), dim, r.data(),
                               bags_per_row, stride, out.data());
      EXPECT_TRUE(cpu->Synchronize().ok());
      double l = 0;
      for (size_t i = 0; i < out.size(); ++i) l += double{w[i]} * out[i];
      return l;
    };
    std::vector<float> grad(rows.size(), kSentinel);
    cpu->EmbeddingBagBackward(pooling, bags.Batch(), dim, w.data(),
                              bags_per_row, stride, grad.data());
    ASSERT_TRUE(cpu->Synchronize().ok());
    const float h = 1.0f / 64;  // exact in float, so r +- h moves by 2h
    for (size_t i = 0; i < rows.size(); ++i) {
      std::vector<float> plus = rows, minus = rows;
      plus[i] += h;
      minus[i] -= h;
      const double numeric =
          (loss(plus) - loss(minus)) / (double{plus[i]} - minus[i]);
      EXPECT_NEAR(grad[i], numeric, 1e-4) << "element " << i;
    }
    // Row 3 is read once, by occurrence 6 (bag 4); its gradient is not 0.
    EXPECT_NE(grad[3 * dim], 0.0f);
  }
}

// Every width the CPU backend specialises (4, 8, 16, 32, 64) and a generic
// one, against a plain loop in the documented order: the same bits.
TEST(CpuEmbeddingTest, SpecialisedWidthsKeepTheDocumentedOrder) {
  std::unique_ptr<CpuBackend> cpu = MakeBackend();
  std::mt19937 rng(9);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::uniform_int_distribution<int> bag_size(0, 5);
  const int num_rows = 40, num_bags = 60, bags_per_row = 3;
  std::vector<int32_t> offsets = {0}, indices;
  for (int b = 0; b < num_bags; ++b) {
    for (int i = bag_size(rng); i > 0; --i) {
      indices.push_back(static_cast<int32_t>(rng() % num_rows));
    }
    offsets.push_back(static_cast<int32_t>(indices.size()));
  }
  const HostBags bags(offsets, indices, num_rows);
  for (int dim : {4, 8, 16, 32, 64, 7}) {
    const int stride = bags_per_row * dim + 1;
    std::vector<float> rows(num_rows * dim);
    for (float& x : rows) x = u(rng);
    std::vector<float> grad_out(num_bags / bags_per_row * stride);
    for (float& x : grad_out) x = u(rng);
    for (Pooling pooling : {Pooling::kSum, Pooling::kMean}) {
      const bool mean = pooling == Pooling::kMean;
      std::vector<float> want_out(grad_out.size(), 0.0f), out = want_out;
      std::vector<float> want_grad(rows.size(), 0.0f), grad = want_grad;
      for (int b = 0; b < num_bags; ++b) {
        const int n = offsets[b + 1] - offsets[b];
        for (int c = 0; c < dim; ++c) {
          float sum = 0.0f;
          for (int p = offsets[b]; p < offsets[b + 1]; ++p) {
            sum += rows[indices[p] * dim + c];
          }
          want_out[b / bags_per_row * stride + b % bags_per_row * dim + c] =
              mean && n > 0 ? sum / n : sum;
        }
      }
      for (int r = 0; r < num_rows; ++r) {
        for (int c = 0; c < dim; ++c) {
          float sum = 0.0f;
          for (int k = bags.row_offsets[r]; k < bags.row_offsets[r + 1]; ++k) {
            const int p = bags.row_occurrences[k];
            int b = 0;
            while (offsets[b + 1] <= p) ++b;
            const float g = grad_out[b / bags_per_row * stride +
                                     b % bags_per_row * dim + c];
            sum += mean ? g / (offsets[b + 1] - offsets[b]) : g;
          }
          want_grad[r * dim + c] = sum;
        }
      }
      cpu->EmbeddingBagForward(pooling, bags.Batch(), dim, rows.data(),
                               bags_per_row, stride, out.data());
      cpu->EmbeddingBagBackward(pooling, bags.Batch(), dim, grad_out.data(),
                                bags_per_row, stride, grad.data());
      ASSERT_TRUE(cpu->Synchronize().ok());
      EXPECT_EQ(out, want_out) << "dim " << dim << " mean " << mean;
      EXPECT_EQ(grad, want_grad) << "dim " << dim << " mean " << mean;
    }
  }
}

}  // namespace
}  // namespace ps
