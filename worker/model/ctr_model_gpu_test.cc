// The CTR model on "gpu:0" against the same model on "cpu:0": dense and row
// gradients, loss and probabilities of a Criteo-shaped batch, over several
// batches in turn. Skips without a visible GPU (or without CUDA in the
// build); always builds, through the backend factory.

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "worker/backend/backend_factory.h"
#include "worker/data/ctr_example.h"
#include "worker/model/ctr_model.h"
#include "worker/model/testing/model_test_util.h"

namespace ps {
namespace {

class CtrReplicaGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (GpuCount() == 0) {
      GTEST_SKIP() << (CudaBuilt() ? "no CUDA device visible"
                                   : "built without CUDA");
    }
    absl::StatusOr<std::unique_ptr<Backend>> cpu = CreateBackend("cpu:0", 1);
    absl::StatusOr<std::unique_ptr<Backend>> gpu = CreateBackend("gpu:0", 0);
    ASSERT_TRUE(cpu.ok()) << cpu.status();
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    cpu_ = *std::move(cpu);
    gpu_ = *std::move(gpu);
  }

  std::unique_ptr<Backend> cpu_;
  std::unique_ptr<Backend> gpu_;
};

ModelSpec Criteo() {
  ModelSpec s;
  s.mutable_ctr()->set_table("emb");
  s.mutable_ctr()->set_embedding_dim(16);
  return s;
}

CtrBatch RandomBatch(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal;
  CtrBatch b;
  b.Resize(n);
  for (size_t i = 0; i < n; ++i) {
    b.labels[i] = static_cast<float>(rng() % 2);
    for (int j = 0; j < kCtrDenseFeatures; ++j) {
      b.dense[i * kCtrDenseFeatures + j] = normal(rng);
    }
    for (int f = 0; f < kCtrCategoricalFields; ++f) {
      b.ids[i * kCtrCategoricalFields + f] = CtrId(f, rng() % 40);
    }
  }
  return b;
}

void ExpectClose(const std::vector<float>& got, const std::vector<float>& want,
                 const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  double max_abs = 0;
  for (float w : want) max_abs = std::max<double>(max_abs, std::abs(w));
  for (size_t i = 0; i < got.size(); ++i) {
    // Different summation orders in the GEMMs: compare against the
    // gradient's scale, not element by element in relative terms.
    ASSERT_NEAR(got[i], want[i], 1e-4 * max_abs + 1e-6)
        << what << " [" << i << "]";
  }
}

TEST_F(CtrReplicaGpuTest, MatchesCpu) {
  const ModelSpec spec = Criteo();
  absl::StatusOr<std::unique_ptr<CtrReplica>> c =
      CtrReplica::Create(spec, cpu_.get(), 256);
  absl::StatusOr<std::unique_ptr<CtrReplica>> g =
      CtrReplica::Create(spec, gpu_.get(), 256);
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_TRUE(g.ok()) << g.status();
  const std::vector<float> params = InitParameters((*c)->tensors(), 21);
  for (size_t n : {size_t{256}, size_t{3}, size_t{100}}) {
    SCOPED_TRACE(n);
    const CtrBatch batch = RandomBatch(n, n);
    ASSERT_TRUE((*c)->Prepare(batch).ok());
    ASSERT_TRUE((*g)->Prepare(batch).ok());
    const size_t unique = (*c)->num_unique();
    ASSERT_EQ((*g)->num_unique(), unique);
    std::mt19937_64 rng(n);
    std::normal_distribution<float> normal(0.0f, 0.1f);
    std::vector<float> rows(unique * 16);
    for (float& x : rows) x = normal(rng);
    const size_t np = (*c)->num_parameters();
    std::vector<float> want(np), got(np), want_rows(rows.size()),
        got_rows(rows.size()), want_probs(n), got_probs(n);
    double want_loss, loss;
    const float scale = 1.0f / static_cast<float>(n);
    ASSERT_TRUE((*c)->ComputeGradient(params.data(), rows.data(), want.data(),
                                      want_rows.data(), &want_loss, scale)
                    .ok());
    ASSERT_TRUE((*g)->ComputeGradient(params.data(), rows.data(), got.data(),
                                      got_rows.data(), &loss, scale)
                    .ok());
    ExpectClose(got, want, "dense");
    ExpectClose(got_rows, want_rows, "rows");
    EXPECT_NEAR(loss, want_loss, 1e-4 * want_loss);
    ASSERT_TRUE(
        (*c)->Predict(params.data(), rows.data(), want_probs.data()).ok());
    ASSERT_TRUE(
        (*g)->Predict(params.data(), rows.data(), got_probs.data()).ok());
    ExpectClose(got_probs, want_probs, "probs");
  }
}

}  // namespace
}  // namespace ps
