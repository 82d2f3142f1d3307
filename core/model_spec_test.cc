#include "core/model_spec.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace ps {
namespace {

ModelSpec Softmax(uint32_t in, uint32_t classes) {
  ModelSpec s;
  s.mutable_softmax()->set_input_dim(in);
  s.mutable_softmax()->set_num_classes(classes);
  return s;
}

ModelSpec Mlp(uint32_t in, std::vector<uint32_t> hidden, uint32_t classes) {
  ModelSpec s;
  s.mutable_mlp()->set_input_dim(in);
  for (uint32_t h : hidden) s.mutable_mlp()->add_hidden(h);
  s.mutable_mlp()->set_num_classes(classes);
  return s;
}

struct Want {
  std::string name;
  std::vector<uint64_t> shape;
  InitKind init;
};

void ExpectTensors(const ModelSpec& spec, const std::vector<Want>& want) {
  const std::vector<TensorSpec> got = ModelTensors(spec);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].name(), want[i].name);
    EXPECT_EQ(
        std::vector<uint64_t>(got[i].shape().begin(), got[i].shape().end()),
        want[i].shape)
        << want[i].name;
    EXPECT_EQ(got[i].init().kind(), want[i].init) << want[i].name;
  }
}

TEST(ModelSpecTest, SoftmaxTensors) {
  const ModelSpec spec = Softmax(784, 10);
  ExpectTensors(spec,
                {{"fc0/w", {784, 10}, GLOROT_UNIFORM}, {"fc0/b", {10}, ZEROS}});
  EXPECT_EQ(NumParameters(ModelTensors(spec)), 7850u);
  EXPECT_EQ(ModelLayerWidths(spec), (std::vector<uint32_t>{784, 10}));
}

TEST(ModelSpecTest, MlpTensorsInFlatLayoutOrder) {
  const ModelSpec spec = Mlp(784, {256, 128}, 10);
  ExpectTensors(spec, {{"fc0/w", {784, 256}, GLOROT_UNIFORM},
                       {"fc0/b", {256}, ZEROS},
                       {"fc1/w", {256, 128}, GLOROT_UNIFORM},
                       {"fc1/b", {128}, ZEROS},
                       {"fc2/w", {128, 10}, GLOROT_UNIFORM},
                       {"fc2/b", {10}, ZEROS}});
  EXPECT_EQ(NumParameters(ModelTensors(spec)),
            784u * 256 + 256 + 256 * 128 + 128 + 128 * 10 + 10);
}

TEST(ModelSpecTest, MlpWithoutHiddenLayersIsLinear) {
  ExpectTensors(Mlp(5, {}, 3),
                {{"fc0/w", {5, 3}, GLOROT_UNIFORM}, {"fc0/b", {3}, ZEROS}});
}

struct BadSpec {
  ModelSpec spec;
  std::string message;
};

TEST(ModelSpecTest, InvalidSpecsNameTheField) {
  const std::vector<BadSpec> cases = {
      {ModelSpec(), "model: no model set"},
      {Softmax(0, 10), "model.softmax.input_dim: must be > 0"},
      {Softmax(784, 0), "model.softmax.num_classes: must be >= 2"},
      {Softmax(784, 1), "model.softmax.num_classes: must be >= 2, got 1"},
      {Softmax(kMaxModelDim + 1, 10),
       "model.softmax.input_dim: 16777217 exceeds the limit"},
      {Mlp(0, {4}, 3), "model.mlp.input_dim: must be > 0"},
      {Mlp(4, {8, 0}, 3), "model.mlp.hidden[1]: must be > 0"},
      {Mlp(4, {8}, 1), "model.mlp.num_classes: must be >= 2"},
      {Mlp(1 << 16, {1 << 15}, 10), "parameters (the limit) by layer fc0"},
  };
  for (const BadSpec& c : cases) {
    const absl::Status s = ValidateModelSpec(c.spec);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.message;
    EXPECT_NE(s.message().find(c.message), std::string::npos)
        << "got: " << s.message();
    EXPECT_TRUE(ModelTensors(c.spec).empty()) << c.message;
  }
}

TEST(ModelSpecTest, ValidSpecsPass) {
  for (const ModelSpec& s : {Softmax(784, 10), Softmax(1, 2),
                             Mlp(784, {256, 128}, 10), Mlp(3, {}, 2)}) {
    EXPECT_TRUE(ValidateModelSpec(s).ok()) << s.DebugString();
  }
}

}  // namespace
}  // namespace ps
