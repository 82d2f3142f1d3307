#include "worker/backend/elementwise.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"

namespace ps {
namespace elementwise {
namespace {

TEST(ElementwiseTest, ReluFamily) {
  EXPECT_EQ(Relu(-2.0f), 0.0f);
  EXPECT_EQ(Relu(0.0f), 0.0f);
  EXPECT_EQ(Relu(3.5f), 3.5f);
  EXPECT_EQ(BiasRelu(1.0f, -2.0f), 0.0f);
  EXPECT_EQ(BiasRelu(1.0f, 0.5f), 1.5f);
  // The gradient passes exactly where the output is positive.
  EXPECT_EQ(ReluGrad(0.0f, 7.0f), 0.0f);
  EXPECT_EQ(ReluGrad(0.25f, 7.0f), 7.0f);
  EXPECT_EQ(Axpy(2.0f, 3.0f, 1.0f), 7.0f);
}

TEST(ElementwiseTest, AlphaBetaIgnoresYWhenBetaIsZero) {
  EXPECT_EQ(AlphaBeta(2.0f, 3.0f, 0.0f, NAN), 6.0f);
  EXPECT_EQ(AlphaBeta(2.0f, 3.0f, 0.5f, 4.0f), 8.0f);
}

// Double-precision reference for one row.
void ReferenceXent(const std::vector<float>& logits, int label, double* loss,
                   std::vector<double>* grad) {
  double max = logits[0];
  for (float z : logits) max = std::max<double>(max, z);
  double sum = 0;
  for (float z : logits) sum += std::exp(z - max);
  *loss = std::log(sum) - (logits[label] - max);
  grad->clear();
  for (size_t c = 0; c < logits.size(); ++c) {
    grad->push_back(std::exp(logits[c] - max) / sum -
                    (static_cast<int>(c) == label ? 1.0 : 0.0));
  }
}

struct XentCase {
  std::vector<float> logits;
  int label;
  int correct;
};

TEST(ElementwiseTest, SoftmaxXentRowMatchesReference) {
  const std::vector<XentCase> cases = {
      {{1.0f, 2.0f, 3.0f}, 2, 1},
      {{1.0f, 2.0f, 3.0f}, 0, 0},
      {{0.0f, 0.0f, 0.0f, 0.0f}, 1, 0},  // tie: first arg-max (0) wins
      {{0.0f, 0.0f, 0.0f, 0.0f}, 0, 1},
      {{100.0f, -100.0f}, 0, 1},  // large logits stay finite
      {{-50.0f, 40.0f, 39.5f}, 2, 0},
      {{5.0f}, 0, 1},  // one class: zero loss
  };
  for (const XentCase& c : cases) {
    const int classes = static_cast<int>(c.logits.size());
    std::vector<float> grad(classes);
    const RowXent r =
        SoftmaxXentRow(c.logits.data(), classes, c.label, 0.5f, grad.data());
    double want_loss;
    std::vector<double> want_grad;
    ReferenceXent(c.logits, c.label, &want_loss, &want_grad);
    EXPECT_NEAR(r.loss, want_loss, 1e-5 * (1 + want_loss)) << c.label;
    EXPECT_EQ(r.correct, c.correct);
    for (int k = 0; k < classes; ++k) {
      EXPECT_NEAR(grad[k], 0.5 * want_grad[k], 1e-6) << "class " << k;
    }
    // Without a gradient the loss and the verdict are the same.
    const RowXent no_grad =
        SoftmaxXentRow(c.logits.data(), classes, c.label, 0.5f, nullptr);
    EXPECT_EQ(no_grad.loss, r.loss);
    EXPECT_EQ(no_grad.correct, r.correct);
  }
}

TEST(ElementwiseTest, SoftmaxXentRowOutOfRangeLabelDoesNotIndex) {
  const float logits[3] = {1.0f, 2.0f, 3.0f};
  float grad[3];
  for (int label : {-1, 3, 1000}) {
    const RowXent r = SoftmaxXentRow(logits, 3, label, 1.0f, grad);
    EXPECT_TRUE(std::isinf(r.loss)) << label;
    EXPECT_EQ(r.correct, 0);
    float sum = 0;
    for (float g : grad) sum += g;
    EXPECT_NEAR(sum, 1.0f, 1e-6);  // softmax only, no one-hot subtracted
  }
}

}  // namespace
}  // namespace elementwise
}  // namespace ps
