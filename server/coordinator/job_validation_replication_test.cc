// ValidateJobSpec on JobSpec.replication: the range, the live shards it
// needs, and what replicas do not cover yet, each refused naming the field.
#include <functional>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"
#include "server/coordinator/job_validation.h"

namespace ps {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

JobSpec ReplicatedSpec(uint32_t k) {
  JobSpec spec;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(
      R"pb(
        name: "replicated"
        model { mlp { input_dim: 784 hidden: 32 num_classes: 10 } }
        data { dataset: "synthetic" batch_size: 32 epochs: 1 }
        optimizer { kind: SGD learning_rate: 0.1 }
        consistency { mode: BSP }
        num_workers: 2
      )pb",
      &spec));
  spec.set_replication(k);
  return spec;
}

ValidationContext ThreeShards() {
  ValidationContext ctx;
  ctx.num_shards = 3;
  ctx.path_exists = [](const std::string&) { return true; };
  return ctx;
}

TEST(ReplicationValidationTest, AcceptsOneToThreeCopiesOnThreeShards) {
  for (uint32_t k : {0u, 1u, 2u, 3u}) {
    EXPECT_THAT(ValidateJobSpec(ReplicatedSpec(k), ThreeShards()), IsEmpty())
        << k;
  }
}

TEST(ReplicationValidationTest, AcceptsAspAndSsp) {
  for (ConsistencyMode mode : {ASP, SSP}) {
    JobSpec spec = ReplicatedSpec(2);
    spec.mutable_consistency()->set_mode(mode);
    if (mode == SSP) spec.mutable_consistency()->set_staleness(2);
    EXPECT_THAT(ValidateJobSpec(spec, ThreeShards()), IsEmpty()) << mode;
  }
}

struct Case {
  std::string label;
  std::function<void(JobSpec&, ValidationContext&)> mutate;
  std::vector<std::string> problems;
};

TEST(ReplicationValidationTest, RefusesBadInputNamingTheField) {
  const std::vector<Case> cases = {
      {"OutOfRange",
       [](JobSpec& s, ValidationContext&) { s.set_replication(4); },
       {"replication: must be in [1, 3], got 4"}},
      {"MoreThanShards",
       [](JobSpec& s, ValidationContext& c) {
         s.set_replication(3);
         c.num_shards = 2;
       },
       {"replication: 3 copies need 3 live shards; of the job's shards 2 "
        "are live ([0, 1])"}},
      {"MoreThanLiveShards",
       [](JobSpec&, ValidationContext& c) {
         c.failed_shards = {0, 2};
       },
       {"replication: 2 copies need 2 live shards; of the job's shards 1 is "
        "live ([1])"}},
      // Shard 2 is live but not the job's: shard 1 failing leaves it one.
      {"MoreThanLiveShardsOfItsSet",
       [](JobSpec& s, ValidationContext& c) {
         s.add_shard_ids(0);
         s.add_shard_ids(1);
         c.failed_shards = {1};
       },
       {"replication: 2 copies need 2 live shards; of the job's shards 1 is "
        "live ([0])"}},
      {"MoreThanLiveShardsOfItsFirstShards",
       [](JobSpec& s, ValidationContext& c) {
         s.set_shards(2);
         c.failed_shards = {0};
       },
       {"replication: 2 copies need 2 live shards; of the job's shards 1 is "
        "live ([1])"}},
      {"MoreThanTheJobsShards",
       [](JobSpec& s, ValidationContext&) { s.set_shards(1); },
       {"replication: 2 copies need 2 shards, shards is 1"}},
      {"MoreThanItsShardIds",
       [](JobSpec& s, ValidationContext&) { s.add_shard_ids(2); },
       {"replication: 2 copies need 2 shards, shard_ids names 1"}},
  };
  for (const Case& c : cases) {
    JobSpec spec = ReplicatedSpec(2);
    ValidationContext ctx = ThreeShards();
    c.mutate(spec, ctx);
    EXPECT_THAT(ValidateJobSpec(spec, ctx),
                ::testing::ElementsAreArray(c.problems))
        << c.label;
  }
}

// The backups follow the ring of the job's shards, whichever they are.
TEST(ReplicationValidationTest, SomeOfTheShardsAreAccepted) {
  JobSpec first = ReplicatedSpec(2);
  first.set_shards(2);
  EXPECT_THAT(ValidateJobSpec(first, ThreeShards()), IsEmpty());
  JobSpec listed = ReplicatedSpec(2);
  listed.add_shard_ids(2);
  listed.add_shard_ids(1);
  EXPECT_THAT(ValidateJobSpec(listed, ThreeShards()), IsEmpty());
  // A failed shard the job does not use leaves its copies their shards.
  ValidationContext failed = ThreeShards();
  failed.failed_shards = {0};
  EXPECT_THAT(ValidateJobSpec(listed, failed), IsEmpty());
  failed.failed_shards = {2};
  EXPECT_THAT(ValidateJobSpec(first, failed), IsEmpty());
}

TEST(ReplicationValidationTest, TopKPushesAreAccepted) {
  JobSpec spec = ReplicatedSpec(2);
  spec.mutable_wire()->set_topk_fraction(0.1f);
  EXPECT_THAT(ValidateJobSpec(spec, ThreeShards()), ::testing::IsEmpty());
}

TEST(ReplicationValidationTest, SparseTablesAreAcceptedInEveryMode) {
  JobSpec spec = ReplicatedSpec(2);
  TableSpec* t = spec.add_tables();
  t->set_name("emb");
  t->set_dim(8);
  t->set_num_ids(1000);
  for (ConsistencyMode mode : {BSP, ASP, SSP}) {
    spec.mutable_consistency()->set_mode(mode);
    if (mode == SSP) spec.mutable_consistency()->set_staleness(2);
    EXPECT_THAT(ValidateJobSpec(spec, ThreeShards()),
                ::testing::Not(
                    ::testing::Contains(::testing::HasSubstr("replication:"))))
        << ConsistencyMode_Name(mode);
  }
  // What still cannot work is refused naming the field: more copies than
  // the job's shards.
  spec.set_replication(4);
  EXPECT_THAT(ValidateJobSpec(spec, ThreeShards()),
              ::testing::Contains(::testing::HasSubstr("replication:")));
}

// Every copy reads the file (the shards' side: shard_warm_start_test);
// from_job's primaries forward the source's values to their backups
// (shard_replication_warm_start_test), its shards checked once resolved
// (coordinator_warm_start_test).
TEST(ReplicationValidationTest, WarmStartsWithReplicas) {
  for (uint32_t k : {1u, 2u, 3u}) {
    JobSpec spec = ReplicatedSpec(k);
    spec.mutable_init()->set_from_file("/data/model.npz");
    EXPECT_THAT(ValidateJobSpec(spec, ThreeShards()), IsEmpty()) << k;
    JobSpec from_job = ReplicatedSpec(k);
    from_job.mutable_init()->set_from_job("mnist-mlp");
    from_job.mutable_init()->set_optimizer_state(true);
    EXPECT_THAT(ValidateJobSpec(from_job, ThreeShards()), IsEmpty()) << k;
  }
}

}  // namespace
}  // namespace ps
