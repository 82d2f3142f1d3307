// SparseClient against two in-process shards: every pushed row is applied
// exactly once however the step is cut into calls and slots, and every
// pulled row lands at its id's place in the batch.
#include "tools/psbench/psbench_sparse_client.h"

#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "core/sparse_ids.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tools/psbench/psbench_cluster.h"

namespace ps {
namespace bench {
namespace {

constexpr int kShards = 2;
constexpr uint32_t kDim = 3;

TEST(RouteBatchTest, EachIdGoesToItsShardWithItsPosition) {
  const std::vector<uint64_t> ids = {5, 900, 17, 3, 42, 1u << 30, 77};
  const SparseBatch b = RouteBatch(ids, kShards);
  EXPECT_EQ(b.rows, ids.size());
  ASSERT_EQ(b.ids.size(), 2u);
  size_t seen = 0;
  for (uint32_t s = 0; s < kShards; ++s) {
    ASSERT_EQ(b.ids[s].size(), b.pos[s].size());
    for (size_t i = 0; i < b.ids[s].size(); ++i) {
      EXPECT_EQ(ShardForId(b.ids[s][i], kShards), s);
      EXPECT_EQ(ids[b.pos[s][i]], b.ids[s][i]);
      ++seen;
    }
  }
  EXPECT_EQ(seen, ids.size());
}

class SparseClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<BenchCluster>> c =
        BenchCluster::StartInProcess(kShards);
    ASSERT_TRUE(c.ok()) << c.status();
    cluster_ = *std::move(c);
    // Rows start at 0 and SGD with rate 1 subtracts the gradient: a row
    // pushed k times with g reads -k * g, exactly.
    BenchJob job;
    job.job_id = "sparse-client";
    job.floats = 4;
    job.workers = 4;
    TableSpec t;
    t.set_name("emb");
    t.set_dim(kDim);
    t.mutable_init()->set_kind(ZEROS);
    t.mutable_optimizer()->set_kind(SGD);
    t.mutable_optimizer()->set_learning_rate(1.0f);
    t.set_admit_after(1);
    job.tables.push_back(t);
    ASSERT_TRUE(cluster_->RegisterJob(job).ok());
  }

  std::unique_ptr<SparseClient> NewClient(size_t request_bytes,
                                          std::vector<uint32_t> ranks) {
    SparseClientOptions o;
    o.job_id = "sparse-client";
    o.table = "emb";
    o.dim = kDim;
    o.ranks = std::move(ranks);
    o.request_bytes = request_bytes;
    o.channels_per_shard = 2;
    absl::StatusOr<std::unique_ptr<SparseClient>> c =
        SparseClient::Create(o, cluster_->addresses(), &cluster_->security());
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? *std::move(c) : nullptr;
  }

  std::unique_ptr<BenchCluster> cluster_;
};

TEST_F(SparseClientTest, ManySmallCallsApplyEveryRowOnce) {
  // 200 ids in descending order, 5 rows per call: ~20 calls per shard over
  // 3 slots (ranks), each slot's calls in order.
  const size_t row_bytes = sizeof(uint64_t) + kDim * sizeof(float);
  std::unique_ptr<SparseClient> client = NewClient(5 * row_bytes, {0, 1, 2});
  ASSERT_NE(client, nullptr);
  std::vector<uint64_t> ids(200);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = 10000 - 7 * i;
  const SparseBatch batch = RouteBatch(ids, kShards);
  std::vector<float> grads(ids.size() * kDim);
  std::iota(grads.begin(), grads.end(), 1.0f);
  std::vector<float> rows(grads.size(), 99.0f);

  ASSERT_TRUE(client->Exchange(batch, grads, absl::MakeSpan(rows)).ok());
  for (size_t i = 0; i < grads.size(); ++i) {
    ASSERT_EQ(rows[i], -grads[i]) << "element " << i;
  }
  const uint64_t calls = client->calls();
  EXPECT_GE(calls, 40u) << "the step was cut into calls of 5 rows";

  ASSERT_TRUE(client->Exchange(batch, grads, absl::MakeSpan(rows)).ok());
  for (size_t i = 0; i < grads.size(); ++i) {
    ASSERT_EQ(rows[i], -2 * grads[i]) << "element " << i;
  }
  EXPECT_EQ(client->calls(), 2 * calls);
}

TEST_F(SparseClientTest, OneCallPerShardWhenItFits) {
  std::unique_ptr<SparseClient> client = NewClient(1 << 20, {3});
  ASSERT_NE(client, nullptr);
  const std::vector<uint64_t> ids = {1, 2, 3, 4, 5, 6, 7, 8};
  const SparseBatch batch = RouteBatch(ids, kShards);
  std::vector<float> grads(ids.size() * kDim, 0.5f), rows(grads.size());
  ASSERT_TRUE(client->Exchange(batch, grads, absl::MakeSpan(rows)).ok());
  EXPECT_THAT(rows, ::testing::Each(-0.5f));
  EXPECT_EQ(client->calls(), static_cast<uint64_t>(kShards));
}

TEST_F(SparseClientTest, ErrorsNameTheShardAndBadSizesAreRefused) {
  std::unique_ptr<SparseClient> client = NewClient(1 << 20, {0});
  ASSERT_NE(client, nullptr);
  const SparseBatch batch = RouteBatch({1, 2, 3, 4}, kShards);
  std::vector<float> rows(4 * kDim), short_grads(3);
  EXPECT_EQ(client->Exchange(batch, short_grads, absl::MakeSpan(rows)).code(),
            absl::StatusCode::kInvalidArgument);
  // NaN gradients: the shards refuse them, and the error names a shard.
  std::vector<float> nan(4 * kDim, std::nanf(""));
  absl::Status s = client->Exchange(batch, nan, absl::MakeSpan(rows));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), ::testing::HasSubstr("to shard "));

  SparseClientOptions bad;
  bad.job_id = "x";
  bad.dim = kDim;  // no ranks
  EXPECT_FALSE(
      SparseClient::Create(bad, cluster_->addresses(), &cluster_->security())
          .ok());
}

}  // namespace
}  // namespace bench
}  // namespace ps
