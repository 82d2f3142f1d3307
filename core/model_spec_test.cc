#include "core/model_spec.h"

#include <cmath>
#include <functional>
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

ModelSpec Lab(uint64_t parameters, uint32_t layers, double compute_ms = 0,
              uint32_t steps_per_epoch = 1) {
  ModelSpec s;
  s.mutable_lab()->set_parameters(parameters);
  s.mutable_lab()->set_layers(layers);
  s.mutable_lab()->set_compute_ms(compute_ms);
  s.mutable_lab()->set_steps_per_epoch(steps_per_epoch);
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

// tools/lab/allreduce_peer.py's layout(params, layers), as that script computes
// it (the expected sizes below are its output): per layer a weight of
// params // layers - 1024 floats, then a bias of 1024.
struct PeerLayout {
  uint64_t parameters;
  uint32_t layers;
  uint64_t weight;  // layout()[0]
  uint64_t total;   // sum(layout())
};

TEST(ModelSpecTest, LabTensorsAreTheAllReducePeersLayout) {
  const std::vector<PeerLayout> cases = {
      {10000000, 8, 1248976, 10000000},    {1000000, 4, 248976, 1000000},
      {100000000, 16, 6248976, 100000000}, {1025, 1, 1, 1025},
      {3000001, 3, 998976, 3000000},       {2050, 2, 1, 2050},
  };
  for (const PeerLayout& c : cases) {
    const ModelSpec spec = Lab(c.parameters, c.layers);
    const std::vector<TensorSpec> got = ModelTensors(spec);
    ASSERT_EQ(got.size(), 2u * c.layers) << c.parameters;
    for (uint32_t i = 0; i < c.layers; ++i) {
      const TensorSpec& w = got[2 * i];
      const TensorSpec& b = got[2 * i + 1];
      EXPECT_EQ(w.name(), "lab" + std::to_string(i) + "/w");
      EXPECT_EQ(b.name(), "lab" + std::to_string(i) + "/b");
      ASSERT_EQ(w.shape_size(), 1);
      ASSERT_EQ(b.shape_size(), 1);
      EXPECT_EQ(w.shape(0), c.weight) << c.parameters << " " << i;
      EXPECT_EQ(b.shape(0), 1024u);
      EXPECT_EQ(w.init().kind(), ZEROS);
      EXPECT_EQ(b.init().kind(), ZEROS);
    }
    EXPECT_EQ(NumParameters(got), c.total) << c.parameters;
    EXPECT_TRUE(ModelLayerWidths(spec).empty());
  }
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
      {Lab(1000000, 0), "model.lab.layers: must be in [1, 1024], got 0"},
      {Lab(10000000, 1025), "model.lab.layers: must be in [1, 1024], got 1025"},
      {Lab(0, 1), "model.lab.parameters: must be in [1025, 1073741824]"},
      {Lab(4099, 4), "model.lab.parameters: must be in [4100, "},
      {Lab(kMaxModelParameters + 1, 8), "model.lab.parameters: must be in ["},
      {Lab(1000000, 4, -1), "model.lab.compute_ms: must be in [0, 60000]"},
      {Lab(1000000, 4, 60000.5), "model.lab.compute_ms: must be in [0, 60000]"},
      {Lab(1000000, 4, std::nan("")), "model.lab.compute_ms: must be in"},
      {Lab(1000000, 4, HUGE_VAL), "model.lab.compute_ms: must be in"},
      {Lab(1000000, 4, 5, 0), "model.lab.steps_per_epoch: must be >= 1"},
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
  for (const ModelSpec& s :
       {Softmax(784, 10), Softmax(1, 2), Mlp(784, {256, 128}, 10),
        Mlp(3, {}, 2), Lab(4100, 4), Lab(kMaxModelParameters, 1024, 0),
        Lab(10000000, 8, 60000), Lab(1000000, 1, 0.5)}) {
    EXPECT_TRUE(ValidateModelSpec(s).ok()) << s.DebugString();
  }
}

TEST(ModelSpecTest, CtrModelIsAnMlpOverEmbeddingsAndDenseFeatures) {
  ModelSpec spec;
  spec.mutable_ctr()->set_table("emb");
  spec.mutable_ctr()->set_embedding_dim(16);
  ASSERT_TRUE(ValidateModelSpec(spec).ok());
  // Defaults: 26 fields, 13 dense features, hidden [256, 128], one logit.
  EXPECT_EQ(ModelLayerWidths(spec),
            (std::vector<uint32_t>{26 * 16 + 13, 256, 128, 1}));
  spec.mutable_ctr()->set_fields(3);
  spec.mutable_ctr()->set_dense_features(0);
  spec.mutable_ctr()->add_hidden(8);
  EXPECT_EQ(ModelLayerWidths(spec), (std::vector<uint32_t>{3 * 16, 8, 1}));
  const std::vector<TensorSpec> tensors = ModelTensors(spec);
  ASSERT_EQ(tensors.size(), 4u);
  EXPECT_EQ(tensors[0].name(), "fc0/w");
  EXPECT_EQ(NumParameters(tensors), 48u * 8 + 8 + 8 + 1);

  struct Bad {
    std::function<void(CtrModel*)> change;
    std::string message;
  };
  const std::vector<Bad> cases = {
      {[](CtrModel* m) { m->clear_table(); }, "model.ctr.table: must name"},
      {[](CtrModel* m) { m->set_embedding_dim(0); },
       "model.ctr.embedding_dim: must be in [1, 4096], got 0"},
      {[](CtrModel* m) { m->set_fields(0); },
       "model.ctr.fields: must be in [1, 1024], got 0"},
      {[](CtrModel* m) { m->set_hidden(0, 0); },
       "model.ctr.hidden[0]: must be > 0"},
  };
  for (const Bad& c : cases) {
    ModelSpec bad = spec;
    c.change(bad.mutable_ctr());
    const absl::Status s = ValidateModelSpec(bad);
    EXPECT_NE(s.message().find(c.message), std::string::npos) << s;
    EXPECT_TRUE(ModelTensors(bad).empty());
  }
}

ModelSpec Custom(
    const std::vector<std::pair<std::string, std::vector<uint64_t>>>& tensors) {
  ModelSpec s;
  for (const auto& [name, shape] : tensors) {
    TensorSpec* t = s.mutable_custom()->add_tensors();
    t->set_name(name);
    for (uint64_t d : shape) t->add_shape(d);
    t->mutable_init()->set_kind(UNIFORM);
    t->mutable_init()->set_scale(0.1f);
  }
  return s;
}

TEST(ModelSpecTest, CustomModelIsItsTensorsInOrder) {
  const ModelSpec spec = Custom({{"conv1.weight", {32, 1, 5, 5}},
                                 {"conv1.bias", {32}},
                                 {"fc.weight", {10, 3136}}});
  ASSERT_TRUE(ValidateModelSpec(spec).ok()) << ValidateModelSpec(spec);
  ExpectTensors(spec, {{"conv1.weight", {32, 1, 5, 5}, UNIFORM},
                       {"conv1.bias", {32}, UNIFORM},
                       {"fc.weight", {10, 3136}, UNIFORM}});
  EXPECT_EQ(NumParameters(ModelTensors(spec)), 32u * 25 + 32 + 31360);
  EXPECT_TRUE(ModelLayerWidths(spec).empty());

  struct Bad {
    std::function<void(CustomModel*)> change;
    std::string message;
  };
  const std::vector<Bad> cases = {
      {[](CustomModel* m) { m->clear_tensors(); },
       "model.custom.tensors: must list at least one tensor"},
      {[](CustomModel* m) { m->mutable_tensors(1)->set_name(""); },
       "model.custom.tensors[1].name: must have 1 to 256 characters, got 0"},
      {[](CustomModel* m) { m->mutable_tensors(1)->set_name("a b"); },
       "model.custom.tensors[1].name: invalid character ' ' in \"a b\""},
      {[](CustomModel* m) { m->mutable_tensors(2)->set_name("conv1.bias"); },
       "model.custom.tensors[2].name: \"conv1.bias\" is listed twice"},
      {[](CustomModel* m) { m->mutable_tensors(0)->clear_shape(); },
       "model.custom.tensors[0].shape: must have 1 to 8 dimensions, got 0"},
      {[](CustomModel* m) { m->mutable_tensors(0)->set_shape(2, 0); },
       "model.custom.tensors[0].shape[2]: must be in [1, 1073741824], got 0"},
      {[](CustomModel* m) {
         m->mutable_tensors(2)->set_shape(0, uint64_t{1} << 20);
         m->mutable_tensors(2)->set_shape(1, uint64_t{1} << 20);
       },
       "parameters (the limit) by model.custom.tensors[2] \"fc.weight\""},
      {[](CustomModel* m) { m->mutable_tensors(1)->clear_init(); },
       "model.custom.tensors[1].init.kind: must be set"},
      {[](CustomModel* m) {
         m->mutable_tensors(1)->mutable_init()->set_scale(-1);
       },
       "model.custom.tensors[1].init.scale: must be >= 0, got -1"},
      {[](CustomModel* m) {
         m->mutable_tensors(0)->mutable_init()->set_kind(GLOROT_UNIFORM);
         m->mutable_tensors(0)->mutable_init()->set_scale(0);
       },
       "model.custom.tensors[0].shape: GLOROT_UNIFORM needs a 1-D or 2-D "
       "shape, got 4-D"},
  };
  for (const Bad& c : cases) {
    ModelSpec bad = spec;
    c.change(bad.mutable_custom());
    const absl::Status s = ValidateModelSpec(bad);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.message;
    EXPECT_NE(s.message().find(c.message), std::string::npos)
        << "want: " << c.message << "\ngot: " << s.message();
    EXPECT_TRUE(ModelTensors(bad).empty()) << c.message;
  }
}

ModelSpec Cnn(std::vector<std::pair<uint32_t, uint32_t>> convs,
              std::vector<uint32_t> hidden = {64}) {
  ModelSpec s;
  ps::Cnn* m = s.mutable_cnn();
  m->set_height(28);
  m->set_width(28);
  m->set_channels(1);
  for (auto [filters, kernel] : convs) {
    ConvLayer* c = m->add_conv();
    c->set_filters(filters);
    c->set_kernel(kernel);
  }
  for (uint32_t h : hidden) m->add_hidden(h);
  m->set_num_classes(10);
  return s;
}

TEST(ModelSpecTest, CnnTensorsAreConvsThenDenseLayers) {
  const ModelSpec spec = Cnn({{32, 5}, {64, 5}}, {1024});
  ExpectTensors(spec, {{"conv0/w", {25, 32}, HE_NORMAL},
                       {"conv0/b", {32}, ZEROS},
                       {"conv1/w", {800, 64}, HE_NORMAL},
                       {"conv1/b", {64}, ZEROS},
                       {"fc0/w", {7 * 7 * 64, 1024}, GLOROT_UNIFORM},
                       {"fc0/b", {1024}, ZEROS},
                       {"fc1/w", {1024, 10}, GLOROT_UNIFORM},
                       {"fc1/b", {10}, ZEROS}});
  EXPECT_EQ(ModelLayerWidths(spec),
            (std::vector<uint32_t>{7 * 7 * 64, 1024, 10}));
  const std::vector<ConvLayerShape> layers = CnnConvLayers(spec.cnn());
  ASSERT_EQ(layers.size(), 2u);
  EXPECT_EQ(layers[1].in_h, 14u);
  EXPECT_EQ(layers[1].in_c, 32u);
  EXPECT_EQ(layers[1].pool, 2u);  // the default
  EXPECT_EQ(layers[1].out_w, 7u);
}

TEST(ModelSpecTest, CnnPoolOfOneKeepsTheSizeAndOddSizesRoundDown) {
  ModelSpec spec = Cnn({{4, 3}, {2, 1}}, {});
  spec.mutable_cnn()->set_height(7);
  spec.mutable_cnn()->mutable_conv(0)->set_pool(1);
  spec.mutable_cnn()->mutable_conv(1)->set_pool(3);
  ASSERT_TRUE(ValidateModelSpec(spec).ok());
  // conv1 sees 7 x 28 x 4 and pools to 2 x 9.
  EXPECT_EQ(ModelLayerWidths(spec), (std::vector<uint32_t>{2 * 9 * 2, 10}));
}

TEST(ModelSpecTest, InvalidCnnSpecsNameTheField) {
  struct Case {
    std::function<void(ps::Cnn*)> edit;
    std::string message;
  };
  const Case cases[] = {
      {[](ps::Cnn* m) { m->set_height(0); }, "model.cnn.height: must be > 0"},
      {[](ps::Cnn* m) { m->set_channels(0); }, "model.cnn.channels"},
      {[](ps::Cnn* m) { m->clear_conv(); }, "model.cnn.conv: must hold"},
      {[](ps::Cnn* m) { m->mutable_conv(1)->set_kernel(4); },
       "model.cnn.conv[1].kernel: must be odd"},
      {[](ps::Cnn* m) { m->mutable_conv(0)->set_kernel(0); },
       "model.cnn.conv[0].kernel: must be odd"},
      {[](ps::Cnn* m) { m->mutable_conv(0)->set_filters(0); },
       "model.cnn.conv[0].filters: must be in [1, "},
      {[](ps::Cnn* m) { m->mutable_conv(1)->set_pool(0); },
       "model.cnn.conv[1].pool"},
      {[](ps::Cnn* m) { m->mutable_conv(1)->set_pool(15); },
       "model.cnn.conv[1].pool: must be >= 1 and at most the 14 x 14"},
      {[](ps::Cnn* m) { m->mutable_conv(0)->set_kernel(4097); },
       "model.cnn.conv[0].kernel: k * k * c_in"},
      {[](ps::Cnn* m) {
         m->set_height(4096);
         m->set_width(4096);
         m->mutable_conv(0)->set_kernel(5);
       },
       "model.cnn.conv[0].kernel: the im2col patches of one example"},
      {[](ps::Cnn* m) { m->set_hidden(0, 0); },
       "model.cnn.hidden[0]: must be > 0"},
      {[](ps::Cnn* m) { m->set_num_classes(1); },
       "model.cnn.num_classes: must be >= 2"},
      {[](ps::Cnn* m) { m->mutable_conv(0)->set_filters(1u << 16); },
       "model.cnn.conv[0].filters: an output of 28 x 28 x 65536"},
      {[](ps::Cnn* m) {
         m->mutable_conv(0)->set_pool(1);
         m->mutable_conv(1)->set_pool(1);
         m->mutable_conv(1)->set_filters(20000);
         m->set_hidden(0, 100000);
       },
       "parameters (the limit) by layer fc0"},
  };
  for (const Case& c : cases) {
    ModelSpec spec = Cnn({{32, 5}, {64, 5}});
    c.edit(spec.mutable_cnn());
    const absl::Status s = ValidateModelSpec(spec);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.message;
    EXPECT_NE(s.message().find(c.message), std::string::npos)
        << "got: " << s.message();
    EXPECT_TRUE(ModelTensors(spec).empty()) << c.message;
  }
}

}  // namespace
}  // namespace ps
