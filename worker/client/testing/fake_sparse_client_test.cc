// FakeSparseClient: SGD with repeated ids summed, the version rules of one
// BSP worker, initial values, and bad input refused with nothing changed.
#include "worker/client/testing/fake_sparse_client.h"

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr uint32_t kDim = 2;

JobSpec Spec() {
  JobSpec spec;
  TableSpec* t = spec.add_tables();
  t->set_name("emb");
  t->set_dim(kDim);
  t->mutable_optimizer()->set_kind(SGD);
  t->mutable_optimizer()->set_learning_rate(0.5f);
  TableSpec* u = spec.add_tables();
  u->set_name("other");
  u->set_dim(1);
  u->mutable_optimizer()->set_learning_rate(1.0f);
  return spec;
}

std::unique_ptr<FakeSparseClient> Make() {
  FakeSparseClient::Options o;
  // Row id starts at [id, -id] ("other": [id]).
  o.init = [](const std::string&, uint64_t id, absl::Span<float> row) {
    row[0] = static_cast<float>(id);
    if (row.size() > 1) row[1] = -static_cast<float>(id);
  };
  auto c = FakeSparseClient::Create(Spec(), o);
  EXPECT_TRUE(c.ok()) << c.status();
  return *std::move(c);
}

TEST(FakeSparseClientTest, AppliesSgdWithRepeatedIdsSummedAndPullsAfter) {
  auto c = Make();
  const std::vector<uint64_t> push = {3, 7, 3};
  const std::vector<float> grads = {1, 2, 10, 20, 3, 4};
  const std::vector<uint64_t> pull = {3, 9, 7, 3};
  std::vector<float> rows(pull.size() * kDim);
  const SparseTableStep s{"emb", push, grads, pull, absl::MakeSpan(rows)};
  ASSERT_TRUE(c->Exchange(0, true, {&s, 1}).ok());
  // id 3: [3, -3] - 0.5 * [4, 6]; id 7: [7, -7] - 0.5 * [10, 20]; 9 unpushed.
  EXPECT_THAT(rows, ElementsAre(1, -6, 9, -9, 2, -17, 1, -6));
  EXPECT_EQ(c->version(), 1u);
  EXPECT_EQ(c->stored_rows("emb"), 2u);
  EXPECT_EQ(c->stored_rows("other"), 0u);
  EXPECT_THAT(c->Row("emb", 7), ElementsAre(2, -17));
  EXPECT_THAT(c->Row("other", 7), ElementsAre(7));  // init's first element
  EXPECT_TRUE(c->Row("nope", 7).empty());
  const SparseClientStats st = c->stats();
  EXPECT_EQ(st.rows_pushed, 3u);
  EXPECT_EQ(st.rows_pulled, 4u);
  ASSERT_EQ(c->exchanges().size(), 1u);
  EXPECT_EQ(c->exchanges()[0].pushed_ids, 3u);
}

TEST(FakeSparseClientTest, FollowsTheVersionRulesOfOneBspWorker) {
  auto c = Make();
  const std::vector<uint64_t> ids = {1};
  const std::vector<float> grads = {2, 2};
  const SparseTableStep s{"emb", ids, grads, {}, {}};
  absl::Status ahead = c->Exchange(1, true, {&s, 1});
  EXPECT_EQ(ahead.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(ahead.message(), HasSubstr("step: 1 is ahead"));
  ASSERT_TRUE(c->Exchange(0, true, {&s, 1}).ok());
  // A retried step-0 push is stale: not applied twice.
  ASSERT_TRUE(c->Exchange(0, true, {&s, 1}).ok());
  EXPECT_EQ(c->stats().stale, 1u);
  EXPECT_THAT(c->Row("emb", 1), ElementsAre(0, -2));
  // Pull-only: step 1 is readable at version 1; step 2 never would be.
  std::vector<float> row(kDim);
  const SparseTableStep p{"emb", {}, {}, ids, absl::MakeSpan(row)};
  ASSERT_TRUE(c->Exchange(1, false, {&p, 1}).ok());
  EXPECT_THAT(row, ElementsAre(0, -2));
  EXPECT_EQ(c->Exchange(2, false, {&p, 1}).code(),
            absl::StatusCode::kFailedPrecondition);
  // A push that names no table still completes the step.
  ASSERT_TRUE(c->Exchange(1, true, {}).ok());
  EXPECT_EQ(c->version(), 2u);
}

TEST(FakeSparseClientTest, RefusesBadInputAndChangesNothing) {
  auto c = Make();
  const std::vector<uint64_t> ids = {1};
  const std::vector<float> nan = {std::nanf(""), 0};
  const std::vector<float> short_grads = {1};
  const SparseTableStep bad_value{"emb", ids, nan, {}, {}};
  const SparseTableStep bad_size{"emb", ids, short_grads, {}, {}};
  const SparseTableStep unknown{"nope", {}, {}, {}, {}};
  absl::Status s = c->Exchange(0, true, {&bad_value, 1});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("tables[0].push_grads[0]"));
  s = c->Exchange(0, true, {&bad_size, 1});
  EXPECT_THAT(s.message(), HasSubstr("tables[0].push_grads: 1 floats"));
  s = c->Exchange(0, true, {&unknown, 1});
  EXPECT_THAT(s.message(), HasSubstr("tables[0].table"));
  EXPECT_EQ(c->version(), 0u);
  EXPECT_EQ(c->stored_rows("emb"), 0u);
  EXPECT_EQ(c->stats().steps, 0u);
  EXPECT_EQ(c->exchanges().size(), 3u);
}

TEST(FakeSparseClientTest, CreateRejectsATableItCannotTrain) {
  JobSpec spec = Spec();
  spec.mutable_tables(1)->mutable_optimizer()->set_learning_rate(0);
  auto c = FakeSparseClient::Create(spec);
  EXPECT_THAT(c.status().message(),
              HasSubstr("tables[1].optimizer.learning_rate"));
  spec = Spec();
  spec.mutable_tables(0)->set_dim(0);
  EXPECT_THAT(FakeSparseClient::Create(spec).status().message(),
              HasSubstr("tables[0].dim"));
}

}  // namespace
}  // namespace ps
