// One epoch of Fashion-MNIST with the MLP 784-256-128-10, batch 64, SGD with
// momentum 0.9 and learning rate 0.05 applied by the in-process server: the
// sanity check that data, model and loop train a real set.
#include <fstream>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/model_spec.h"
#include "gtest/gtest.h"
#include "worker/client/testing/fake_parameter_client.h"
#include "worker/trainer/trainer.h"

namespace ps {
namespace {

constexpr char kFashionDir[] = "/usr/share/datasets/fashion-mnist";

TEST(FashionMnistTest, OneEpochOfTheMlpReaches80Percent) {
  if (!std::ifstream(absl::StrCat(kFashionDir, "/train-images-idx3-ubyte.gz"))
           .good()) {
    GTEST_SKIP() << "Fashion-MNIST not found in " << kFashionDir;
  }
  JobSpec job;
  job.set_seed(1);
  Mlp* mlp = job.mutable_model()->mutable_mlp();
  mlp->set_input_dim(784);
  mlp->add_hidden(256);
  mlp->add_hidden(128);
  mlp->set_num_classes(10);
  job.mutable_data()->set_dataset("fashion-mnist");
  job.mutable_data()->set_batch_size(64);
  job.mutable_data()->set_epochs(1);
  job.mutable_optimizer()->set_kind(SGD);
  job.mutable_optimizer()->set_learning_rate(0.05f);
  job.mutable_optimizer()->set_momentum(0.9f);

  FakeParameterServer::Options server_options;
  server_options.learning_rate = 0.05f;
  server_options.momentum = 0.9f;
  FakeParameterServer server(
      *InitialParameters(job.seed(), ModelTensors(job.model())),
      server_options);
  auto client = server.NewClient(0);
  TrainerOptions options;
  options.job = job;
  options.data_dir = kFashionDir;
  absl::StatusOr<std::unique_ptr<Trainer>> trainer =
      Trainer::Create(options, client.get());
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  EXPECT_EQ((*trainer)->total_steps(), 937u);
  Progress last;
  const absl::Status s =
      (*trainer)->Run([&](const Progress& p) { last = p; }, nullptr);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(last.step(), 937u);
  EXPECT_GE(last.test_accuracy(), 0.80f);
  RecordProperty("test_accuracy", absl::StrCat(last.test_accuracy()));
  RecordProperty("samples_per_s", absl::StrCat(last.samples_per_s()));
  std::printf(
      "test accuracy %.4f, %.0f samples/s, data %.2fs compute %.2fs "
      "comm %.2fs elapsed %.2fs\n",
      last.test_accuracy(), last.samples_per_s(), last.data_s(),
      last.compute_s(), last.comm_s(), last.elapsed_s());
}

}  // namespace
}  // namespace ps
