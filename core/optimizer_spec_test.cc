#include "core/optimizer_spec.h"

#include <cmath>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

std::vector<std::string> Problems(
    const OptimizerSpec& o, std::initializer_list<OptimizerKind> allowed = {
                                SGD, ADAGRAD, ADAM, ADAMW}) {
  std::vector<std::string> p;
  AppendOptimizerProblems(o, "t.optimizer", allowed, &p);
  return p;
}

OptimizerSpec Spec(OptimizerKind kind, float lr = 0.1f) {
  OptimizerSpec o;
  o.set_kind(kind);
  o.set_learning_rate(lr);
  return o;
}

TEST(OptimizerSpecTest, ValidSpecsHaveNoProblems) {
  EXPECT_THAT(Problems(Spec(SGD)), IsEmpty());
  OptimizerSpec ftrl = Spec(FTRL);
  ftrl.set_l1(0.5f);
  ftrl.set_l2(1.0f);
  ftrl.set_ftrl_beta(1.0f);
  EXPECT_THAT(Problems(ftrl, {FTRL}), IsEmpty());
}

TEST(OptimizerSpecTest, KindOutsideTheAllowedListIsNamed) {
  EXPECT_THAT(Problems(Spec(FTRL)),
              ElementsAre("t.optimizer.kind: FTRL is not available here "
                          "(SGD, ADAGRAD, ADAM, ADAMW)"));
  EXPECT_THAT(Problems(Spec(OPTIMIZER_UNSPECIFIED), {SGD, FTRL}),
              ElementsAre("t.optimizer.kind: must be set (SGD, FTRL)"));
  EXPECT_THAT(Problems(Spec(static_cast<OptimizerKind>(42))),
              ElementsAre("t.optimizer.kind: unknown value 42"));
}

TEST(OptimizerSpecTest, FieldsOfAnotherKindAreRejected) {
  struct Case {
    OptimizerSpec spec;
    std::string want;
  };
  std::vector<Case> cases;
  {
    OptimizerSpec o = Spec(ADAGRAD);
    o.set_l1(1);
    cases.push_back({o, "t.optimizer.l1: only FTRL uses l1 (kind is ADAGRAD)"});
  }
  {
    OptimizerSpec o = Spec(SGD);
    o.set_ftrl_beta(2);
    cases.push_back(
        {o, "t.optimizer.ftrl_beta: only FTRL uses ftrl_beta (kind is SGD)"});
  }
  {
    OptimizerSpec o = Spec(FTRL);
    o.set_epsilon(1e-3f);
    cases.push_back({o, "t.optimizer.epsilon: FTRL does not use epsilon"});
  }
  {
    OptimizerSpec o = Spec(ADAM);
    o.set_momentum(0.5f);
    cases.push_back(
        {o, "t.optimizer.momentum: only SGD uses momentum (kind is ADAM)"});
  }
  {
    OptimizerSpec o = Spec(FTRL);
    o.set_l2(-1);
    cases.push_back({o, "t.optimizer.l2: must be finite and >= 0, got -1"});
  }
  {
    OptimizerSpec o = Spec(FTRL, std::nanf(""));
    cases.push_back(
        {o, "t.optimizer.learning_rate: must be finite and > 0, got nan"});
  }
  for (const Case& c : cases) {
    EXPECT_THAT(Problems(c.spec, {SGD, ADAGRAD, ADAM, FTRL}),
                ElementsAre(c.want))
        << c.spec.ShortDebugString();
  }
}

TEST(OptimizerSpecTest, DefaultsFillTheKindsOwnFields) {
  OptimizerSpec ftrl = Spec(FTRL);
  ApplyOptimizerDefaults(&ftrl);
  EXPECT_TRUE(ftrl.has_ftrl_beta());
  EXPECT_FALSE(ftrl.has_epsilon());
  OptimizerSpec adam = Spec(ADAM);
  ApplyOptimizerDefaults(&adam);
  EXPECT_TRUE(adam.has_beta1() && adam.has_beta2() && adam.has_epsilon());
  EXPECT_FALSE(adam.has_ftrl_beta());
}

}  // namespace
}  // namespace ps
