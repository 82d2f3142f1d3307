#include "core/table_spec.h"

#include <string>
#include <vector>

#include "common/defaults.h"
#include "common/text_proto.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

constexpr char kValid[] = R"pb(
  model { ctr { table: "emb" embedding_dim: 16 } }
  tables {
    name: "emb"
    dim: 16
    optimizer { kind: ADAGRAD learning_rate: 0.05 }
  }
)pb";

JobSpec Parse(const std::string& text) {
  JobSpec spec;
  absl::Status s = ParseTextProto(text, "job.pbtxt", &spec);
  EXPECT_TRUE(s.ok()) << s;
  return spec;
}

TEST(TableSpecTest, ValidTableHasNoProblems) {
  EXPECT_THAT(TableProblems(Parse(kValid)), IsEmpty());
}

// Each case is one table (the model does not use it).
TEST(TableSpecTest, EachBadFieldIsNamed) {
  struct Case {
    std::string table;  // fields after name and a valid optimizer
    std::string want;
  };
  const std::string ok_opt = "optimizer { kind: SGD learning_rate: 1 } ";
  const std::vector<Case> cases = {
      {ok_opt + "dim: 0", "tables[0].dim: must be in [1, 4096], got 0"},
      {ok_opt + "dim: 5000", "tables[0].dim: must be in [1, 4096], got 5000"},
      {ok_opt + "dim: 4 init { kind: HE_NORMAL }",
       "tables[0].init.kind: HE_NORMAL needs a layer's fan-in; a table takes "
       "ZEROS, CONSTANT, UNIFORM or NORMAL"},
      {ok_opt + "dim: 4 init { kind: NORMAL scale: -1 }",
       "tables[0].init.scale: must be finite and >= 0, got -1"},
      {"dim: 4 optimizer { kind: ADAMW learning_rate: 1 }",
       "tables[0].optimizer.kind: ADAMW is not available here (SGD, ADAGRAD, "
       "ADAM, FTRL)"},
      {"dim: 4 optimizer { kind: SGD learning_rate: 1 momentum: 0.9 }",
       "tables[0].optimizer.momentum: a table's SGD is lazy and keeps no "
       "momentum; leave it 0"},
      {ok_opt + "dim: 4 admit_after: 2000000",
       "tables[0].admit_after: must be at most 1000000, got 2000000"},
      {ok_opt + "dim: 4 evict_lru: true",
       "tables[0].evict_lru: needs memory_budget_bytes > 0 (the budget it "
       "keeps the table under)"},
      {ok_opt + "dim: 4 hot_ids: 5000",
       "tables[0].hot_ids: must be at most 1000, got 5000"},
      {ok_opt + "dim: 4 max_row_staleness: 65",
       "tables[0].max_row_staleness: must be at most 64, got 65"},
      {ok_opt + "dim: 4 max_row_staleness: 4 row_cache_bytes: 79",
       "tables[0].row_cache_bytes: must be 0 or in [80 (one row), "
       "68719476736], got 79"},
      {ok_opt + "dim: 4 row_cache_bytes: 68719476737",
       "tables[0].row_cache_bytes: must be 0 or in [80 (one row), "
       "68719476736], got 68719476737"},
  };
  for (const Case& c : cases) {
    const JobSpec spec = Parse("tables { name: \"t\" " + c.table + " }");
    EXPECT_THAT(TableProblems(spec), ElementsAre(c.want)) << c.table;
  }
  const JobSpec bad_name = Parse(
      "tables { name: \"a b\" dim: 4 optimizer { kind: SGD "
      "learning_rate: 1 } }");
  EXPECT_THAT(TableProblems(bad_name),
              ElementsAre("tables[0].name: invalid character ' ' in \"a b\" "
                          "(use letters, digits, '-', '_', '.', '/')"));
}

TEST(TableSpecTest, DuplicateNamesAndModelReferences) {
  JobSpec spec = Parse(std::string(kValid) + R"pb(
    tables {
      name: "emb"
      dim: 8
      optimizer { kind: SGD learning_rate: 1 }
    }
  )pb");
  EXPECT_THAT(TableProblems(spec),
              ElementsAre("tables[1].name: \"emb\" is used by another table"));

  JobSpec missing = Parse(kValid);
  missing.mutable_model()->mutable_ctr()->set_table("other");
  EXPECT_THAT(TableProblems(missing),
              ElementsAre("model.ctr.table: \"other\" is not in tables"));

  JobSpec wrong_dim = Parse(kValid);
  wrong_dim.mutable_model()->mutable_ctr()->set_embedding_dim(8);
  EXPECT_THAT(TableProblems(wrong_dim),
              ElementsAre("model.ctr.embedding_dim: 8 does not match table "
                          "\"emb\" (dim 16)"));
}

TEST(TableSpecTest, TablesFullEveryIsBoundedAndDefaults) {
  JobSpec spec = Parse(kValid);
  EXPECT_EQ(TablesFullEvery(spec.checkpoint()), kDefaultTablesFullEvery);
  spec.mutable_checkpoint()->set_tables_full_every(0);
  EXPECT_EQ(TablesFullEvery(spec.checkpoint()), 1u);  // every one full
  spec.mutable_checkpoint()->set_tables_full_every(100);
  EXPECT_THAT(TableProblems(spec), IsEmpty());
  EXPECT_EQ(TablesFullEvery(spec.checkpoint()), 100u);
  spec.mutable_checkpoint()->set_tables_full_every(101);
  EXPECT_THAT(TableProblems(spec),
              ElementsAre("checkpoint.tables_full_every: must be at most 100 "
                          "(0 or 1: every checkpoint full), got 101"));
}

TEST(TableSpecTest, DefaultsAreFilledIn) {
  TableSpec t = Parse(kValid).tables(0);
  ApplyTableDefaults(&t);
  EXPECT_EQ(t.admit_after(), kDefaultTableAdmitAfter);
  EXPECT_EQ(t.hot_ids(), kDefaultTableHotIds);
  EXPECT_EQ(t.init().kind(), NORMAL);
  EXPECT_FLOAT_EQ(t.init().scale(), kDefaultTableInitScale);
  EXPECT_FLOAT_EQ(t.optimizer().epsilon(), kDefaultAdagradEpsilon);
}

TEST(TableSpecTest, TheRowCacheGetsItsDefaultBytesOnlyWithStaleness) {
  TableSpec none = Parse(kValid).tables(0);
  ApplyTableDefaults(&none);
  EXPECT_EQ(none.row_cache_bytes(), 0u);
  TableSpec cached = Parse(kValid).tables(0);
  cached.set_max_row_staleness(4);
  ApplyTableDefaults(&cached);
  EXPECT_EQ(cached.row_cache_bytes(), kDefaultRowCacheBytes);
  cached.set_row_cache_bytes(1 << 20);
  ApplyTableDefaults(&cached);
  EXPECT_EQ(cached.row_cache_bytes(), 1u << 20);
}

}  // namespace
}  // namespace ps
