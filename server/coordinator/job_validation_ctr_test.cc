// ValidateJobSpec on a ctr model's data: the generated set (ctr-synthetic and
// its generator's knobs) and Criteo TSV files, each refused naming the field.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/coordinator/job_validation.h"
#include "server/coordinator/testing/validation_specs.h"

namespace ps {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using validation_test::Context;
using validation_test::ParseSpec;

JobSpec CtrSpec() {
  return ParseSpec(R"pb(
    name: "ctr"
    model { ctr { table: "emb" embedding_dim: 16 } }
    tables {
      name: "emb"
      dim: 16
      optimizer { kind: ADAGRAD learning_rate: 0.05 }
    }
    data {
      dataset: "ctr-synthetic"
      batch_size: 512
      epochs: 1
      synthetic_train: 100000
      synthetic_test: 10000
    }
    optimizer { kind: ADAGRAD learning_rate: 0.01 }
    consistency { mode: BSP }
    num_workers: 2
  )pb");
}

TEST(ValidateJobSpecTest, CtrSpecIsValidAndGetsItsTablesDefaults) {
  EXPECT_THAT(ValidateJobSpec(CtrSpec(), Context()), IsEmpty());
  absl::StatusOr<JobSpec> spec = NormalizeJobSpec(CtrSpec(), Context());
  ASSERT_TRUE(spec.ok()) << spec.status();
  ASSERT_EQ(spec->tensors_size(), 6);  // fc0..fc2, w and b
  EXPECT_EQ(spec->tensors(0).shape(0), 26u * 16 + 13);
  EXPECT_EQ(spec->tables(0).admit_after(), 1u);
  EXPECT_EQ(spec->tables(0).init().kind(), NORMAL);
}

TEST(ValidateJobSpecTest, CtrSpecProblemsNameTheField) {
  JobSpec wrong_data = CtrSpec();
  wrong_data.mutable_data()->set_dataset("fashion-mnist");
  wrong_data.mutable_data()->clear_synthetic_train();
  wrong_data.mutable_data()->clear_synthetic_test();
  EXPECT_THAT(ValidateJobSpec(wrong_data, Context()),
              ElementsAre("data.dataset: a ctr model trains on "
                          "\"ctr-synthetic\" or \"criteo-tsv\", not "
                          "\"fashion-mnist\""));
  JobSpec no_sizes = CtrSpec();
  no_sizes.mutable_data()->clear_synthetic_test();
  EXPECT_THAT(
      ValidateJobSpec(no_sizes, Context()),
      ElementsAre("data.synthetic_test: must be > 0 for ctr-synthetic"));
  JobSpec bad_table = CtrSpec();
  bad_table.mutable_tables(0)->mutable_optimizer()->set_kind(ADAMW);
  EXPECT_THAT(ValidateJobSpec(bad_table, Context()),
              ElementsAre("tables[0].optimizer.kind: ADAMW is not available "
                          "here (SGD, ADAGRAD, ADAM, FTRL)"));
  JobSpec ftrl_dense = CtrSpec();
  ftrl_dense.mutable_optimizer()->set_kind(FTRL);
  EXPECT_THAT(ValidateJobSpec(ftrl_dense, Context()),
              ElementsAre("optimizer.kind: FTRL is not available here (SGD, "
                          "ADAGRAD, ADAM, ADAMW)"));
  JobSpec mnist_ctr = CtrSpec();
  mnist_ctr.mutable_model()->clear_ctr();
  mnist_ctr.mutable_model()->mutable_mlp()->set_input_dim(4);
  mnist_ctr.mutable_model()->mutable_mlp()->set_num_classes(2);
  EXPECT_THAT(ValidateJobSpec(mnist_ctr, Context()),
              testing::Contains("data.dataset: \"ctr-synthetic\" is for a "
                                "ctr model"));
}

TEST(ValidateJobSpecTest, CtrGeneratorKnobsAreCheckedAndOnlyForTheGenerator) {
  JobSpec big = CtrSpec();
  for (int f = 0; f < kCtrSyntheticFields; ++f) {
    big.mutable_data()->add_ctr_cardinalities(uint64_t{100000000} + f);
  }
  big.mutable_data()->set_ctr_zipf_exponent(0.5);
  EXPECT_THAT(ValidateJobSpec(big, Context()), IsEmpty());

  JobSpec bad = big;
  bad.mutable_data()->set_ctr_cardinalities(3, 0);
  bad.mutable_data()->set_ctr_cardinalities(7, uint64_t{1} << 32);
  bad.mutable_data()->set_ctr_zipf_exponent(-1);
  EXPECT_THAT(
      ValidateJobSpec(bad, Context()),
      ElementsAre("data.ctr_cardinalities[3]: 0: want 1 <= value < 2^32",
                  "data.ctr_cardinalities[7]: 4294967296: want 1 <= value "
                  "< 2^32",
                  "data.ctr_zipf_exponent: -1: want (0, 10], or 0 for the "
                  "default 1.1"));
  JobSpec short_list = CtrSpec();
  short_list.mutable_data()->add_ctr_cardinalities(5);
  short_list.mutable_data()->set_ctr_zipf_exponent(11);
  EXPECT_THAT(ValidateJobSpec(short_list, Context()),
              ElementsAre("data.ctr_cardinalities: has 1 values: want none "
                          "(Criteo Kaggle's) or one per categorical field, 26",
                          "data.ctr_zipf_exponent: 11: want (0, 10], or 0 for "
                          "the default 1.1"));
  JobSpec nan = CtrSpec();
  nan.mutable_data()->set_ctr_zipf_exponent(std::nan(""));
  EXPECT_THAT(ValidateJobSpec(nan, Context()),
              ElementsAre(HasSubstr("data.ctr_zipf_exponent: nan")));

  JobSpec mnist = ParseSpec(R"pb(
    name: "mlp"
    model { mlp { input_dim: 784 hidden: 32 num_classes: 10 } }
    data {
      dataset: "fashion-mnist"
      data_dir: "/data/fashion-mnist"
      batch_size: 64
      epochs: 1
      ctr_cardinalities: 5
      ctr_zipf_exponent: 1.5
    }
    optimizer { kind: SGD learning_rate: 0.1 }
    consistency { mode: BSP }
    num_workers: 2
  )pb");
  EXPECT_THAT(
      ValidateJobSpec(mnist, Context()),
      ElementsAre("data.ctr_cardinalities: only ctr-synthetic uses it",
                  "data.ctr_zipf_exponent: only ctr-synthetic uses it"));
}

JobSpec CriteoSpec() {
  JobSpec spec = CtrSpec();
  DataSpec* d = spec.mutable_data();
  d->set_dataset("criteo-tsv");
  d->clear_synthetic_train();
  d->clear_synthetic_test();
  d->set_train_file("/data/criteo/train.tsv.gz");
  d->set_test_file("test.tsv");
  d->set_data_dir("/data/criteo");
  return spec;
}

ValidationContext CriteoContext() {
  ValidationContext ctx = Context();
  ctx.path_exists = [](const std::string& path) {
    return path == "/data/criteo" || path == "/data/criteo/train.tsv.gz" ||
           path == "/data/criteo/test.tsv";
  };
  return ctx;
}

TEST(ValidateJobSpecTest, CriteoSpecIsValid) {
  EXPECT_THAT(ValidateJobSpec(CriteoSpec(), CriteoContext()), IsEmpty());
  JobSpec capped = CriteoSpec();
  capped.mutable_data()->set_max_train_examples(1000000);
  EXPECT_THAT(ValidateJobSpec(capped, CriteoContext()), IsEmpty());
}

struct CriteoCase {
  std::string name;
  std::function<void(JobSpec&)> mutate;
  std::vector<std::string> problems;
};

TEST(ValidateJobSpecTest, CriteoProblemsNameTheField) {
  const std::vector<CriteoCase> cases = {
      {"files unset",
       [](JobSpec& s) {
         s.mutable_data()->clear_train_file();
         s.mutable_data()->clear_test_file();
       },
       {"data.train_file: must be set for criteo-tsv",
        "data.test_file: must be set for criteo-tsv"}},
      {"relative without data_dir",
       [](JobSpec& s) {
         s.mutable_data()->clear_data_dir();
         s.mutable_data()->set_train_file("/data/criteo/train.tsv.gz");
       },
       {"data.test_file: \"test.tsv\" is relative; make it absolute or set "
        "data.data_dir"}},
      {"missing files",
       [](JobSpec& s) {
         s.mutable_data()->set_train_file("/data/criteo/day_0.gz");
         s.mutable_data()->set_test_file("sub/test.tsv");
       },
       {"data.train_file: file \"/data/criteo/day_0.gz\" does not exist",
        "data.test_file: file \"/data/criteo/sub/test.tsv\" does not "
        "exist"}},
      {"synthetic sizes",
       [](JobSpec& s) { s.mutable_data()->set_synthetic_train(100); },
       {"data.synthetic_train: only the synthetic datasets use it"}},
      {"not a ctr model",
       [](JobSpec& s) {
         s.mutable_model()->clear_ctr();
         s.mutable_model()->mutable_mlp()->set_input_dim(4);
         s.mutable_model()->mutable_mlp()->set_num_classes(2);
       },
       {"data.dataset: \"criteo-tsv\" is for a ctr model"}},
  };
  for (const CriteoCase& c : cases) {
    JobSpec spec = CriteoSpec();
    c.mutate(spec);
    std::vector<std::string> problems = ValidateJobSpec(spec, CriteoContext());
    if (c.name == "not a ctr model") {
      EXPECT_THAT(problems, testing::Contains(c.problems[0])) << c.name;
    } else {
      EXPECT_THAT(problems, ElementsAreArray(c.problems)) << c.name;
    }
  }
  // Files belong to criteo-tsv alone.
  JobSpec synthetic = CtrSpec();
  synthetic.mutable_data()->set_train_file("/data/criteo/train.tsv.gz");
  EXPECT_THAT(ValidateJobSpec(synthetic, CriteoContext()),
              ElementsAre("data.train_file: only criteo-tsv uses it"));
}

TEST(ValidateJobSpecTest, DefaultFileCheckUsesTheFileSystem) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  ASSERT_NE(tmp, nullptr);
  const std::string file = std::string(tmp) + "/train.tsv";
  {
    std::FILE* f = std::fopen(file.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fclose(f);
  }
  ValidationContext ctx;  // path_exists unset: std::filesystem
  JobSpec spec = CriteoSpec();
  spec.mutable_data()->set_data_dir(tmp);
  spec.mutable_data()->set_train_file("train.tsv");
  spec.mutable_data()->set_test_file(file);
  EXPECT_THAT(ValidateJobSpec(spec, ctx), IsEmpty());
  spec.mutable_data()->set_test_file(tmp);  // a directory is not a file
  EXPECT_THAT(ValidateJobSpec(spec, ctx),
              ElementsAre(HasSubstr("data.test_file: file")));
}

}  // namespace
}  // namespace ps
