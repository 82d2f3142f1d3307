#include "server/coordinator/job_validation.h"

#include <cmath>
#include <cstdlib>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/coordinator/testing/validation_specs.h"

namespace ps {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using validation_test::Context;
using validation_test::ParseSpec;

// A valid spec; each table case breaks it in one way.
JobSpec ValidSpec() {
  return ParseSpec(R"pb(
    name: "fmnist-mlp"
    model { mlp { input_dim: 784 hidden: 256 hidden: 128 num_classes: 10 } }
    data { dataset: "fashion-mnist" batch_size: 64 epochs: 2 }
    optimizer { kind: SGD learning_rate: 0.1 momentum: 0.9 nesterov: true }
    consistency { mode: BSP backup_workers: 1 }
    num_workers: 2
  )pb");
}

TEST(ValidateJobSpecTest, ValidSpecsHaveNoProblems) {
  EXPECT_THAT(ValidateJobSpec(ValidSpec(), Context()), IsEmpty());

  JobSpec adam = ParseSpec(R"pb(
    name: "synthetic_softmax.v2"
    model { softmax { input_dim: 32 num_classes: 3 } }
    data {
      dataset: "synthetic"
      data_dir: "/data/fashion-mnist"
      batch_size: 65536
      epochs: 1
      synthetic_train: 1000
      synthetic_test: 100
    }
    optimizer {
      kind: ADAMW
      learning_rate: 0.001
      beta1: 0
      beta2: 0.99
      epsilon: 1e-6
      weight_decay: 0.01
    }
    consistency { mode: SSP staleness: 3 }
    num_workers: 1024
    partition_bytes: 3145728
    eval_every: 4000000000
    checkpoint { every_steps: 100 every_seconds: 3600 }
    on_worker_failure: SHRINK
    wire { format: FP16 topk_fraction: 1 }
  )pb");
  EXPECT_THAT(ValidateJobSpec(adam, Context()), IsEmpty());
}

struct BadSpecCase {
  std::string label;
  std::function<void(JobSpec&)> mutate;
  std::vector<std::string> problems;
};

class BadSpecTest : public ::testing::TestWithParam<BadSpecCase> {};

TEST_P(BadSpecTest, ListsExactlyTheExpectedProblems) {
  JobSpec spec = ValidSpec();
  GetParam().mutate(spec);
  EXPECT_THAT(ValidateJobSpec(spec, Context()),
              ElementsAreArray(GetParam().problems));
}

const float kNaN = std::numeric_limits<float>::quiet_NaN();
const float kInf = std::numeric_limits<float>::infinity();

INSTANTIATE_TEST_SUITE_P(
    Table, BadSpecTest,
    ::testing::ValuesIn(std::vector<BadSpecCase>{
        {"EmptyName",
         [](JobSpec& s) { s.clear_name(); },
         {"name: must be set"}},
        {"NameWithSlash",
         [](JobSpec& s) { s.set_name("team/job"); },
         {"name: invalid character '/' in \"team/job\" (use letters, digits, "
          "'-', '_', '.')"}},
        {"NameTooLong",
         [](JobSpec& s) { s.set_name(std::string(129, 'a')); },
         {"name: 129 characters, at most 128 allowed"}},
        {"ModelMissing",
         [](JobSpec& s) { s.clear_model(); },
         {"model: must be set (softmax, mlp, cnn, lab, ctr or custom)"}},
        {"SoftmaxInputDimMismatch",
         [](JobSpec& s) {
           s.mutable_model()->mutable_softmax()->set_input_dim(100);
           s.mutable_model()->mutable_softmax()->set_num_classes(10);
         },
         {"model.softmax.input_dim: 100 does not match dataset fashion-mnist "
          "(784)"}},
        {"SoftmaxZeroDims",
         [](JobSpec& s) { s.mutable_model()->mutable_softmax(); },
         {"model.softmax.input_dim: must be > 0",
          "model.softmax.num_classes: must be >= 2, got 0"}},
        {"CnnImageMismatch",
         [](JobSpec& s) {
           Cnn* m = s.mutable_model()->mutable_cnn();
           m->set_height(28);
           m->set_width(28);
           m->set_channels(3);
           m->add_conv()->set_filters(8);
           m->mutable_conv(0)->set_kernel(5);
           m->set_num_classes(10);
         },
         {"model.cnn: height * width * channels = 28 * 28 * 3 = 2352 does "
          "not match dataset fashion-mnist (784 floats per example)"}},
        {"CnnClassesMismatch",
         [](JobSpec& s) {
           Cnn* m = s.mutable_model()->mutable_cnn();
           m->set_height(28);
           m->set_width(28);
           m->set_channels(1);
           m->add_conv()->set_filters(8);
           m->mutable_conv(0)->set_kernel(5);
           m->set_num_classes(7);
         },
         {"model.cnn.num_classes: 7 does not match dataset fashion-mnist "
          "(10)"}},
        {"CnnEvenKernel",
         [](JobSpec& s) {
           Cnn* m = s.mutable_model()->mutable_cnn();
           m->set_height(28);
           m->set_width(28);
           m->set_channels(1);
           m->add_conv()->set_filters(8);
           m->mutable_conv(0)->set_kernel(5);
           m->add_conv()->set_filters(8);
           m->mutable_conv(1)->set_kernel(4);
           m->set_num_classes(10);
         },
         {"model.cnn.conv[1].kernel: must be odd (\"same\" padding), got 4"}},
        {"MlpClassesMismatch",
         [](JobSpec& s) {
           s.mutable_model()->mutable_mlp()->set_num_classes(7);
         },
         {"model.mlp.num_classes: 7 does not match dataset fashion-mnist "
          "(10)"}},
        {"HiddenZeroAndHuge",
         [](JobSpec& s) {
           s.mutable_model()->mutable_mlp()->set_hidden(0, 0);
           s.mutable_model()->mutable_mlp()->add_hidden(65537);
         },
         {"model.mlp.hidden[0]: must be in [1, 65536], got 0",
          "model.mlp.hidden[2]: must be in [1, 65536], got 65537"}},
        {"OptimizerKindUnspecified",
         [](JobSpec& s) { s.mutable_optimizer()->clear_kind(); },
         {"optimizer.kind: must be set (SGD, ADAGRAD, ADAM, ADAMW)"}},
        {"OptimizerKindUnknownValue",
         [](JobSpec& s) {
           s.mutable_optimizer()->set_kind(static_cast<OptimizerKind>(42));
         },
         {"optimizer.kind: unknown value 42"}},
        {"LearningRateNegative",
         [](JobSpec& s) { s.mutable_optimizer()->set_learning_rate(-1); },
         {"optimizer.learning_rate: must be finite and > 0, got -1"}},
        {"LearningRateNaN",
         [](JobSpec& s) { s.mutable_optimizer()->set_learning_rate(kNaN); },
         {"optimizer.learning_rate: must be finite and > 0, got nan"}},
        {"LearningRateInfinite",
         [](JobSpec& s) { s.mutable_optimizer()->set_learning_rate(kInf); },
         {"optimizer.learning_rate: must be finite and > 0, got inf"}},
        {"MomentumOne",
         [](JobSpec& s) {
           s.mutable_optimizer()->set_momentum(1);
           s.mutable_optimizer()->set_nesterov(false);
         },
         {"optimizer.momentum: must be in [0, 1), got 1"}},
        {"NesterovWithoutMomentum",
         [](JobSpec& s) { s.mutable_optimizer()->set_momentum(0); },
         {"optimizer.nesterov: requires momentum > 0"}},
        {"MomentumWithAdam",
         [](JobSpec& s) {
           s.mutable_optimizer()->set_kind(ADAM);
           s.mutable_optimizer()->set_nesterov(false);
         },
         {"optimizer.momentum: only SGD uses momentum (kind is ADAM)"}},
        {"BetasOutOfRange",
         [](JobSpec& s) {
           OptimizerSpec* o = s.mutable_optimizer();
           o->Clear();
           o->set_kind(ADAM);
           o->set_learning_rate(0.001f);
           o->set_beta1(1);
           o->set_beta2(-0.5f);
         },
         {"optimizer.beta1: must be in [0, 1), got 1",
          "optimizer.beta2: must be in [0, 1), got -0.5"}},
        {"EpsilonZero",
         [](JobSpec& s) {
           OptimizerSpec* o = s.mutable_optimizer();
           o->Clear();
           o->set_kind(ADAGRAD);
           o->set_learning_rate(0.01f);
           o->set_epsilon(0);
         },
         {"optimizer.epsilon: must be finite and > 0, got 0"}},
        {"WeightDecayNegative",
         [](JobSpec& s) { s.mutable_optimizer()->set_weight_decay(-0.01f); },
         {"optimizer.weight_decay: must be finite and >= 0, got -0.01"}},
        {"ModeUnspecified",
         [](JobSpec& s) {
           s.mutable_consistency()->clear_mode();
           s.mutable_consistency()->clear_backup_workers();
         },
         {"consistency.mode: must be set (BSP, ASP, SSP)"}},
        {"StalenessWithBsp",
         [](JobSpec& s) { s.mutable_consistency()->set_staleness(2); },
         {"consistency.staleness: only SSP uses a staleness bound (mode is "
          "BSP)"}},
        {"BackupWorkersNotBelowNumWorkers",
         [](JobSpec& s) { s.mutable_consistency()->set_backup_workers(2); },
         {"consistency.backup_workers: must be < num_workers (2), got 2"}},
        {"BackupWorkersWithAsp",
         [](JobSpec& s) { s.mutable_consistency()->set_mode(ASP); },
         {"consistency.backup_workers: only BSP uses backup workers (mode is "
          "ASP)"}},
        {"NumWorkersZero",
         [](JobSpec& s) {
           s.set_num_workers(0);
           s.mutable_consistency()->clear_backup_workers();
         },
         {"num_workers: must be in [1, 1024], got 0"}},
        {"NumWorkersTooMany",
         [](JobSpec& s) { s.set_num_workers(1025); },
         {"num_workers: must be in [1, 1024], got 1025"}},
        {"BatchSizeZero",
         [](JobSpec& s) { s.mutable_data()->set_batch_size(0); },
         {"data.batch_size: must be in [1, 65536], got 0"}},
        {"BatchSizeHuge",
         [](JobSpec& s) { s.mutable_data()->set_batch_size(65537); },
         {"data.batch_size: must be in [1, 65536], got 65537"}},
        {"EpochsZero",
         [](JobSpec& s) { s.mutable_data()->set_epochs(0); },
         {"data.epochs: must be >= 1"}},
        {"PartitionNotMultipleOf4",
         [](JobSpec& s) { s.set_partition_bytes(65538); },
         {"partition_bytes: must be a multiple of 4 (float32), got 65538"}},
        {"PartitionTooSmall",
         [](JobSpec& s) { s.set_partition_bytes(4092); },
         {"partition_bytes: must be in [4096, 3145728] (a chunk must fit one "
          "message), got 4092"}},
        {"PartitionTooLarge",
         [](JobSpec& s) { s.set_partition_bytes(3145732); },
         {"partition_bytes: must be in [4096, 3145728] (a chunk must fit one "
          "message), got 3145732"}},
        {"TooManyChunks",
         [](JobSpec& s) {
           s.mutable_data()->set_dataset("synthetic");
           Mlp* mlp = s.mutable_model()->mutable_mlp();
           mlp->set_input_dim(784);
           mlp->clear_hidden();
           mlp->add_hidden(65536);
           mlp->add_hidden(1024);
           s.set_partition_bytes(4096);
         },
         // fc0/w 50176 + fc0/b 64 + fc1/w 65536 + fc1/b 1 + fc2/w 10 +
         // fc2/b 1 chunks of 1024 floats.
         {"partition_bytes: the model needs 115788 chunks of 4096 bytes, "
          "more than the 65536 a placement may hold; raise it"}},
        {"TooManyParameters",
         [](JobSpec& s) {
           s.mutable_data()->set_dataset("synthetic");
           Mlp* mlp = s.mutable_model()->mutable_mlp();
           mlp->set_input_dim(65536);
           mlp->clear_hidden();
           mlp->add_hidden(65536);
         },
         {"model: more than 1073741824 parameters (the limit) by layer fc0"}},
        {"DatasetUnknown",
         [](JobSpec& s) { s.mutable_data()->set_dataset("cifar10"); },
         {"data.dataset: unknown dataset \"cifar10\" (known: criteo-tsv, "
          "ctr-synthetic, fashion-mnist, mnist, synthetic)"}},
        {"DatasetEmpty",
         [](JobSpec& s) { s.mutable_data()->clear_dataset(); },
         {"data.dataset: must be set (one of criteo-tsv, "
          "ctr-synthetic, fashion-mnist, mnist, synthetic)"}},
        {"DataDirMissing",
         [](JobSpec& s) { s.mutable_data()->set_data_dir("/nonexistent"); },
         {"data.data_dir: directory \"/nonexistent\" does not exist"}},
        {"SyntheticSizesOnRealDataset",
         [](JobSpec& s) { s.mutable_data()->set_synthetic_train(100); },
         {"data.synthetic_train: only the synthetic datasets use it"}},
        {"CheckpointSecondsLookLikeMillis",
         [](JobSpec& s) {
           s.mutable_checkpoint()->set_every_seconds(30 * 24 * 3600);
         },
         {"checkpoint.every_seconds: 2592000 s is more than 7 days (the unit "
          "is seconds)"}},
        {"FailurePolicyUnknownValue",
         [](JobSpec& s) {
           s.set_on_worker_failure(static_cast<WorkerFailurePolicy>(9));
         },
         {"on_worker_failure: unknown value 9"}},
        {"WireFormatUnknownValue",
         [](JobSpec& s) {
           s.mutable_wire()->set_format(static_cast<WireFormat>(7));
         },
         {"wire.format: unknown value 7 (FP32, BF16, FP16)"}},
        {"TopkFractionAboveOne",
         [](JobSpec& s) { s.mutable_wire()->set_topk_fraction(1.5f); },
         {"wire.topk_fraction: 1.5 is outside (0, 1]"}},
        {"TopkFractionZero",
         [](JobSpec& s) { s.mutable_wire()->set_topk_fraction(0); },
         {"wire.topk_fraction: 0 is outside (0, 1]"}},
        {"TopkFractionNegative",
         [](JobSpec& s) { s.mutable_wire()->set_topk_fraction(-0.01f); },
         {"wire.topk_fraction: -0.01 is outside (0, 1]"}},
        {"TopkFractionNaN",
         [](JobSpec& s) { s.mutable_wire()->set_topk_fraction(kNaN); },
         {"wire.topk_fraction: nan is outside (0, 1]"}},
        {"UserSuppliedTensors",
         [](JobSpec& s) { s.add_tensors()->set_name("fc0/w"); },
         {"tensors: derived from model; must be empty, got 1"}},
    }),
    [](const ::testing::TestParamInfo<BadSpecCase>& info) {
      return info.param.label;
    });

TEST(ValidateJobSpecTest, ReportsEveryProblemAtOnce) {
  JobSpec spec = ParseSpec(R"pb(
    model { mlp { input_dim: 784 hidden: 0 num_classes: 10 } }
    optimizer { learning_rate: 0 momentum: 1.5 }
    consistency { mode: ASP staleness: 1 }
    data { dataset: "mnist" }
    partition_bytes: 10
    tensors { name: "x" }
  )pb");
  EXPECT_THAT(
      ValidateJobSpec(spec, Context()),
      ElementsAre(
          "name: must be set",
          "model.mlp.hidden[0]: must be in [1, 65536], got 0",
          "optimizer.kind: must be set (SGD, ADAGRAD, ADAM, ADAMW)",
          "optimizer.learning_rate: must be finite and > 0, got 0",
          "optimizer.momentum: must be in [0, 1), got 1.5",
          "consistency.staleness: only SSP uses a staleness bound (mode is "
          "ASP)",
          "num_workers: must be in [1, 1024], got 0",
          "data.batch_size: must be in [1, 65536], got 0",
          "data.epochs: must be >= 1",
          "partition_bytes: must be a multiple of 4 (float32), got 10",
          "tensors: derived from model; must be empty, got 1"));
}

TEST(ValidateJobSpecTest, ContextWithoutShardsIsAProblem) {
  ValidationContext ctx = Context();
  ctx.num_shards = 0;
  EXPECT_THAT(ValidateJobSpec(ValidSpec(), ctx),
              ElementsAre("cluster: has no shards"));
}

TEST(ValidateJobSpecTest, DefaultPathCheckUsesTheFileSystem) {
  ValidationContext ctx;  // path_exists unset: std::filesystem
  JobSpec spec = ValidSpec();
  const char* tmp = std::getenv("TEST_TMPDIR");
  ASSERT_NE(tmp, nullptr);
  spec.mutable_data()->set_data_dir(tmp);
  EXPECT_THAT(ValidateJobSpec(spec, ctx), IsEmpty());
  spec.mutable_data()->set_data_dir(std::string(tmp) + "/no/such/dir");
  EXPECT_THAT(ValidateJobSpec(spec, ctx),
              ElementsAre(HasSubstr("data.data_dir: directory")));
}

TEST(NormalizeJobSpecTest, FillsDefaultsAndTensors) {
  std::vector<std::string> problems = {"stale"};
  absl::StatusOr<JobSpec> spec =
      NormalizeJobSpec(ValidSpec(), Context(), &problems);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_THAT(problems, IsEmpty());
  EXPECT_EQ(spec->partition_bytes(), 1u << 20);
  EXPECT_EQ(spec->consistency().step_deadline_ms(), 60000u);
  EXPECT_EQ(spec->on_worker_failure(), FAIL);
  EXPECT_EQ(spec->tensors_size(), 6);
  EXPECT_EQ(spec->wire().format(), FP32);
  EXPECT_FLOAT_EQ(spec->wire().topk_fraction(), 1.0f);
  // SGD gets no Adam defaults.
  EXPECT_FALSE(spec->optimizer().has_beta1());
  EXPECT_FALSE(spec->optimizer().has_epsilon());
  // User values survive.
  EXPECT_EQ(spec->name(), "fmnist-mlp");
  EXPECT_FLOAT_EQ(spec->optimizer().momentum(), 0.9f);
}

TEST(NormalizeJobSpecTest, KeepsExplicitValues) {
  JobSpec in = ValidSpec();
  in.set_partition_bytes(65536);
  in.mutable_consistency()->set_step_deadline_ms(5000);
  in.set_on_worker_failure(SHRINK);
  in.mutable_wire()->set_format(BF16);
  in.mutable_wire()->set_topk_fraction(0.01f);
  absl::StatusOr<JobSpec> spec = NormalizeJobSpec(in, Context());
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->wire().format(), BF16);
  EXPECT_FLOAT_EQ(spec->wire().topk_fraction(), 0.01f);
  EXPECT_EQ(spec->partition_bytes(), 65536u);
  EXPECT_EQ(spec->consistency().step_deadline_ms(), 5000u);
  EXPECT_EQ(spec->on_worker_failure(), SHRINK);
}

TEST(NormalizeJobSpecTest, OptimizerDefaultsPerKind) {
  JobSpec in = ValidSpec();
  in.mutable_optimizer()->Clear();
  in.mutable_optimizer()->set_kind(ADAM);
  in.mutable_optimizer()->set_learning_rate(0.001f);
  in.mutable_optimizer()->set_beta2(0.98f);
  absl::StatusOr<JobSpec> adam = NormalizeJobSpec(in, Context());
  ASSERT_TRUE(adam.ok()) << adam.status();
  EXPECT_FLOAT_EQ(adam->optimizer().beta1(), 0.9f);
  EXPECT_FLOAT_EQ(adam->optimizer().beta2(), 0.98f);
  EXPECT_FLOAT_EQ(adam->optimizer().epsilon(), 1e-8f);

  in.mutable_optimizer()->Clear();
  in.mutable_optimizer()->set_kind(ADAGRAD);
  in.mutable_optimizer()->set_learning_rate(0.01f);
  absl::StatusOr<JobSpec> adagrad = NormalizeJobSpec(in, Context());
  ASSERT_TRUE(adagrad.ok()) << adagrad.status();
  EXPECT_FLOAT_EQ(adagrad->optimizer().epsilon(), 1e-10f);
  EXPECT_FALSE(adagrad->optimizer().has_beta1());
}

TEST(NormalizeJobSpecTest, RejectsWithEveryProblemInTheMessage) {
  JobSpec in = ValidSpec();
  in.clear_name();
  in.mutable_data()->set_epochs(0);
  std::vector<std::string> problems;
  absl::StatusOr<JobSpec> spec = NormalizeJobSpec(in, Context(), &problems);
  ASSERT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(spec.status().message(),
            "job spec has 2 problems: name: must be set; data.epochs: must "
            "be >= 1");
  EXPECT_THAT(problems,
              ElementsAre("name: must be set", "data.epochs: must be >= 1"));
}

// The lab workload (ModelSpec.lab): no data, its own field checks.
JobSpec LabSpec() {
  return ParseSpec(R"pb(
    name: "lab-10m"
    model {
      lab { parameters: 10000000 layers: 8 compute_ms: 5 steps_per_epoch: 20 }
    }
    data { batch_size: 32 epochs: 1 }
    optimizer { kind: SGD learning_rate: 0.5 }
    consistency { mode: BSP }
    num_workers: 4
  )pb");
}

// configs/jobs/fashion_cnn.pbtxt's model, on fashion-mnist and on the
// synthetic set (784 floats per example, whatever the model says).
TEST(ValidateJobSpecTest, CnnSpecIsValidAndGetsConvTensorsFirst) {
  JobSpec spec = ValidSpec();
  *spec.mutable_model() = ParseSpec(R"pb(
                            model {
                              cnn {
                                height: 28
                                width: 28
                                channels: 1
                                conv { filters: 32 kernel: 5 }
                                conv { filters: 64 kernel: 5 }
                                hidden: 1024
                                num_classes: 10
                              }
                            }
                          )pb")
                              .model();
  EXPECT_THAT(ValidateJobSpec(spec, Context()), IsEmpty());
  absl::StatusOr<JobSpec> normalized = NormalizeJobSpec(spec, Context());
  ASSERT_TRUE(normalized.ok()) << normalized.status();
  ASSERT_EQ(normalized->tensors_size(), 8);
  EXPECT_EQ(normalized->tensors(0).name(), "conv0/w");
  EXPECT_EQ(normalized->tensors(2).shape(0), 800u);
  EXPECT_EQ(normalized->tensors(4).name(), "fc0/w");
  EXPECT_EQ(normalized->tensors(4).shape(0), 3136u);
  spec.mutable_data()->set_dataset("synthetic");
  spec.mutable_data()->set_synthetic_train(100);
  spec.mutable_data()->set_synthetic_test(10);
  EXPECT_THAT(ValidateJobSpec(spec, Context()), IsEmpty());
}

TEST(ValidateJobSpecTest, LabSpecIsValidAndGetsThePeersTensors) {
  EXPECT_THAT(ValidateJobSpec(LabSpec(), Context()), IsEmpty());
  absl::StatusOr<JobSpec> spec = NormalizeJobSpec(LabSpec(), Context());
  ASSERT_TRUE(spec.ok()) << spec.status();
  ASSERT_EQ(spec->tensors_size(), 16);
  EXPECT_EQ(spec->tensors(0).name(), "lab0/w");
  EXPECT_EQ(spec->tensors(0).shape(0), 1248976u);
  EXPECT_EQ(spec->tensors(15).name(), "lab7/b");
  EXPECT_EQ(spec->tensors(15).shape(0), 1024u);
}

struct LabCase {
  std::string name;
  std::function<void(JobSpec&)> mutate;
  std::vector<std::string> problems;
};

class LabSpecTest : public ::testing::TestWithParam<LabCase> {};

TEST_P(LabSpecTest, ListsExactlyTheExpectedProblems) {
  JobSpec spec = LabSpec();
  GetParam().mutate(spec);
  EXPECT_THAT(ValidateJobSpec(spec, Context()),
              ElementsAreArray(GetParam().problems));
}

LabModel* Lab(JobSpec& s) { return s.mutable_model()->mutable_lab(); }

INSTANTIATE_TEST_SUITE_P(
    Table, LabSpecTest,
    ::testing::ValuesIn(std::vector<LabCase>{
        {"NoLayers",
         [](JobSpec& s) { Lab(s)->set_layers(0); },
         {"model.lab.layers: must be in [1, 1024], got 0"}},
        {"TooManyLayers",
         [](JobSpec& s) { Lab(s)->set_layers(1025); },
         {"model.lab.layers: must be in [1, 1024], got 1025"}},
        {"TooFewParameters",
         [](JobSpec& s) { Lab(s)->set_parameters(8 * 1025 - 1); },
         {"model.lab.parameters: must be in [8200, 1073741824] for 8 layers "
          "(1025+ floats per layer), got 8199"}},
        {"TooManyParameters",
         [](JobSpec& s) { Lab(s)->set_parameters((uint64_t{1} << 30) + 1); },
         {"model.lab.parameters: must be in [8200, 1073741824] for 8 layers "
          "(1025+ floats per layer), got 1073741825"}},
        {"NegativeCompute",
         [](JobSpec& s) { Lab(s)->set_compute_ms(-1); },
         {"model.lab.compute_ms: must be in [0, 60000], got -1"}},
        {"ComputeOverAMinute",
         [](JobSpec& s) { Lab(s)->set_compute_ms(60001); },
         {"model.lab.compute_ms: must be in [0, 60000], got 60001"}},
        {"NaNCompute",
         [](JobSpec& s) { Lab(s)->set_compute_ms(std::nan("")); },
         {"model.lab.compute_ms: must be in [0, 60000], got nan"}},
        {"InfiniteCompute",
         [](JobSpec& s) { Lab(s)->set_compute_ms(HUGE_VAL); },
         {"model.lab.compute_ms: must be in [0, 60000], got inf"}},
        {"NoSteps",
         [](JobSpec& s) { Lab(s)->set_steps_per_epoch(0); },
         {"model.lab.steps_per_epoch: must be >= 1"}},
        {"DataFields",
         [](JobSpec& s) {
           s.mutable_data()->set_dataset("fashion-mnist");
           s.mutable_data()->set_data_dir("/data/fashion-mnist");
           s.mutable_data()->set_synthetic_train(10);
           s.mutable_data()->set_synthetic_test(10);
           s.mutable_data()->set_max_train_examples(10);
           s.mutable_data()->set_train_file("/data/train.tsv");
           s.mutable_data()->set_test_file("/data/test.tsv");
           s.set_eval_every(5);
         },
         {"data.dataset: a lab model reads no data; leave it unset",
          "data.data_dir: a lab model reads no data; leave it unset",
          "data.synthetic_train: a lab model reads no data; leave it unset",
          "data.synthetic_test: a lab model reads no data; leave it unset",
          "data.max_train_examples: a lab model reads no data; leave it "
          "unset",
          "data.train_file: a lab model reads no data; leave it unset",
          "data.test_file: a lab model reads no data; leave it unset",
          "eval_every: a lab model reads no data; leave it unset"}},
        {"BatchSizeStillCounts",
         [](JobSpec& s) { s.mutable_data()->set_batch_size(0); },
         {"data.batch_size: must be in [1, 65536], got 0"}},
        {"SmallPartitionsTooManyChunks",
         [](JobSpec& s) {
           Lab(s)->set_parameters(uint64_t{1} << 30);
           s.set_partition_bytes(4096);
         },
         {"partition_bytes: the model needs 1048576 chunks of 4096 bytes, "
          "more than the 65536 a placement may hold; raise it"}},
    }),
    [](const ::testing::TestParamInfo<LabCase>& info) {
      return info.param.name;
    });

JobSpec CustomSpec() {
  return ParseSpec(R"pb(
    name: "torch-cnn"
    model {
      custom {
        tensors {
          name: "conv1.weight"
          shape: [ 32, 1, 5, 5 ]
          init { kind: UNIFORM scale: 0.2 }
        }
        tensors {
          name: "conv1.bias"
          shape: 32
          init { kind: ZEROS }
        }
      }
    }
    data { batch_size: 64 }
    optimizer { kind: SGD learning_rate: 0.1 }
    consistency { mode: BSP }
    num_workers: 2
  )pb");
}

TEST(ValidateJobSpecTest, CustomSpecIsValidAndKeepsItsTensors) {
  EXPECT_THAT(ValidateJobSpec(CustomSpec(), Context()), IsEmpty());
  absl::StatusOr<JobSpec> spec = NormalizeJobSpec(CustomSpec(), Context());
  ASSERT_TRUE(spec.ok()) << spec.status();
  ASSERT_EQ(spec->tensors_size(), 2);
  EXPECT_EQ(spec->tensors(0).name(), "conv1.weight");
  EXPECT_EQ(spec->tensors(0).shape_size(), 4);
  EXPECT_EQ(spec->tensors(1).name(), "conv1.bias");
}

TEST(ValidateJobSpecTest, CustomSpecReadsNoDataOfTheWorkers) {
  JobSpec spec = CustomSpec();
  spec.mutable_data()->set_dataset("fashion-mnist");
  spec.mutable_data()->set_epochs(3);
  spec.mutable_data()->set_batch_size(0);
  spec.set_eval_every(10);
  spec.mutable_model()->mutable_custom()->mutable_tensors(1)->set_name(
      "conv1.weight");
  const std::string why =
      "a custom model's training script reads its own data and evaluates "
      "itself; leave it unset";
  EXPECT_THAT(
      ValidateJobSpec(spec, Context()),
      ElementsAre("model.custom.tensors[1].name: \"conv1.weight\" is listed "
                  "twice",
                  "data.dataset: " + why, "eval_every: " + why,
                  "data.batch_size: must be in [1, 65536], got 0",
                  "data.epochs: a custom model's training script decides when "
                  "it is done; leave it unset"));
}

}  // namespace
}  // namespace ps
