#include "worker/client/sparse_split.h"

#include <cstdint>
#include <vector>

#include "core/sparse_rows_codec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

using ::testing::HasSubstr;

// Two pushed tables (dims 4 and 2) and two pulled entries, with positions
// that tell each pulled id apart.
SparseShardRows Sample() {
  SparseShardRows rows;
  rows.gradients.resize(2);
  rows.gradients[0].table = "emb";
  rows.gradients[1].table = "side";
  for (uint64_t i = 0; i < 900; ++i) {
    rows.gradients[0].ids.push_back(i * 3);
    for (int d = 0; d < 4; ++d) rows.gradients[0].values.push_back(i + d);
  }
  for (uint64_t i = 0; i < 70; ++i) {
    rows.gradients[1].ids.push_back(i);
    rows.gradients[1].values.push_back(-1.0f * i);
    rows.gradients[1].values.push_back(2.0f * i);
  }
  rows.pulls.resize(2);
  rows.pulls[0].table = "emb";
  rows.pulls[1].table = "side";
  rows.pull_row_floats = {4, 2};
  rows.pull_entry = {0, 1};
  rows.pull_positions.resize(2);
  for (uint32_t i = 0; i < 1200; ++i) {
    rows.pulls[0].ids.push_back(i * 5);
    rows.pull_positions[0].push_back(i + 10);
  }
  for (uint32_t i = 0; i < 30; ++i) {
    rows.pulls[1].ids.push_back(i);
    rows.pull_positions[1].push_back(i);
  }
  return rows;
}

TEST(SparseSplitTest, PartsFitAndKeepEveryRowInOrder) {
  const SparseShardRows whole = Sample();
  constexpr size_t kHead = 60;
  ASSERT_GT(SparseRequestBytes(whole, kHead), 4096u);
  for (size_t limit : {1024u, 4096u, 20000u}) {
    absl::StatusOr<std::vector<SparseShardRows>> parts =
        SplitSparseRows(Sample(), kHead, limit);
    ASSERT_TRUE(parts.ok()) << parts.status();
    EXPECT_GE(parts->size(), 2u);
    SparseShardRows joined;
    joined.gradients.resize(2);
    joined.pulls.resize(2);
    joined.pull_positions.resize(2);
    for (const SparseShardRows& p : *parts) {
      EXPECT_LE(SparseRequestBytes(p, kHead), limit);
      EXPECT_LE(SparseReplyBytes(p), limit);
      for (const SparseRowsOut& g : p.gradients) {
        SparseRowsOut& to = joined.gradients[g.table == "emb" ? 0 : 1];
        to.ids.insert(to.ids.end(), g.ids.begin(), g.ids.end());
        to.values.insert(to.values.end(), g.values.begin(), g.values.end());
      }
      for (size_t j = 0; j < p.pulls.size(); ++j) {
        const size_t e = p.pull_entry[j];
        EXPECT_EQ(p.pulls[j].table, whole.pulls[e].table);
        EXPECT_EQ(p.pull_row_floats[j], whole.pull_row_floats[e]);
        EXPECT_EQ(p.pulls[j].ids.size(), p.pull_positions[j].size());
        joined.pulls[e].ids.insert(joined.pulls[e].ids.end(),
                                   p.pulls[j].ids.begin(),
                                   p.pulls[j].ids.end());
        joined.pull_positions[e].insert(joined.pull_positions[e].end(),
                                        p.pull_positions[j].begin(),
                                        p.pull_positions[j].end());
      }
    }
    for (int k = 0; k < 2; ++k) {
      EXPECT_EQ(joined.gradients[k].ids, whole.gradients[k].ids) << limit;
      EXPECT_EQ(joined.gradients[k].values, whole.gradients[k].values);
      EXPECT_EQ(joined.pulls[k].ids, whole.pulls[k].ids);
      EXPECT_EQ(joined.pull_positions[k], whole.pull_positions[k]);
    }
  }
}

TEST(SparseSplitTest, RefusesARowThatDoesNotFitOrTooManyParts) {
  absl::StatusOr<std::vector<SparseShardRows>> tiny =
      SplitSparseRows(Sample(), 60, 100);
  ASSERT_FALSE(tiny.ok());
  EXPECT_EQ(tiny.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(tiny.status().message(),
              HasSubstr("does not fit max_message_bytes 100"));
  // 1025 rows of 8 + 4 bytes, one per part.
  SparseShardRows many;
  many.gradients.resize(1);
  many.gradients[0].table = "t";
  many.gradients[0].ids.assign(kMaxSparseExchangeParts + 1, 7);
  many.gradients[0].values.assign(kMaxSparseExchangeParts + 1, 1.0f);
  absl::StatusOr<std::vector<SparseShardRows>> over =
      SplitSparseRows(many, 10, 10 + 33 + 12);
  ASSERT_FALSE(over.ok());
  EXPECT_THAT(over.status().message(), HasSubstr("over the bound of 1024"));
}

// The rows' shards: Placement.table_shards in order, or every shard.
TEST(RowOwnersTest, TheListOrEveryShardAndAShardPastTheClusterRefused) {
  Placement p;
  p.set_num_shards(3);
  EXPECT_THAT(*RowOwners(p), ::testing::ElementsAre(0u, 1u, 2u));
  p.add_table_shards(2);
  p.add_table_shards(0);
  EXPECT_THAT(*RowOwners(p), ::testing::ElementsAre(2u, 0u));
  p.add_table_shards(3);
  const absl::StatusOr<std::vector<uint32_t>> bad = RowOwners(p);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("placement.table_shards[2]"));
}

}  // namespace
}  // namespace ps
