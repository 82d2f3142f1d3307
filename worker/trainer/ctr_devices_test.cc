#include "worker/trainer/ctr_devices.h"

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/text_proto.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/data/ctr_synthetic.h"

namespace ps {
namespace {

using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

ModelSpec Model() {
  ModelSpec m;
  EXPECT_TRUE(
      ParseTextProto(R"pb(ctr { table: "emb" embedding_dim: 4 hidden: 8 })pb",
                     "model", &m)
          .ok());
  return m;
}

CtrBatch Batch(size_t n) {
  absl::StatusOr<CtrSyntheticGenerator> gen =
      CtrSyntheticGenerator::Create(CtrSyntheticConfig{});
  EXPECT_TRUE(gen.ok());
  CtrBatch b;
  gen->GenerateBatch(/*begin=*/100, n, &b);
  return b;
}

// One step's results on `devices` cpu devices for `batch`.
struct Result {
  std::vector<uint64_t> ids;
  std::vector<float> dense_grad, row_grads;
  double loss = 0.0;
};

Result Step(size_t devices, const CtrBatch& batch) {
  std::vector<std::string> names;
  for (size_t d = 0; d < devices; ++d) names.push_back("cpu:0");
  absl::StatusOr<std::unique_ptr<CtrDevices>> cd =
      CtrDevices::Create(Model(), names, 1, batch.size);
  EXPECT_TRUE(cd.ok()) << cd.status();
  Result r;
  if (!cd.ok()) return r;
  EXPECT_EQ((*cd)->num_devices(), devices);
  EXPECT_TRUE((*cd)->Prepare(batch).ok());
  r.ids.assign((*cd)->unique_ids().begin(), (*cd)->unique_ids().end());
  std::vector<float> params((*cd)->num_parameters());
  for (size_t i = 0; i < params.size(); ++i) params[i] = 0.1f * std::sin(i);
  std::vector<float> rows(r.ids.size() * 4);
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = 0.05f * std::cos(i);
  r.dense_grad.assign(params.size(), -1.0f);
  r.row_grads.assign(rows.size(), -1.0f);
  absl::Status s = (*cd)->ComputeGradient(
      params.data(), rows.data(), r.dense_grad.data(), r.row_grads.data(),
      &r.loss, 1.0f / static_cast<float>(batch.size));
  EXPECT_TRUE(s.ok()) << s;
  return r;
}

void ExpectNear(const std::vector<float>& a, const std::vector<float>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_NEAR(a[i], b[i], 1e-6f + 1e-4f * std::fabs(b[i])) << i;
  }
}

// Split over devices, the step is the whole batch's: the same ids in the
// same order, the same gradients up to the grouping of the sums, and
// bitwise the same again for the same device count.
TEST(CtrDevicesTest, DevicesTogetherComputeTheWholeBatch) {
  const CtrBatch batch = Batch(37);  // 13, 12, 12 over three
  const Result one = Step(1, batch);
  for (size_t devices : {2u, 3u}) {
    const Result many = Step(devices, batch);
    EXPECT_THAT(many.ids, ElementsAreArray(one.ids)) << devices;
    EXPECT_NEAR(many.loss, one.loss, 1e-9 + 1e-6 * one.loss) << devices;
    ExpectNear(many.dense_grad, one.dense_grad);
    ExpectNear(many.row_grads, one.row_grads);
    const Result again = Step(devices, batch);
    EXPECT_EQ(again.dense_grad, many.dense_grad);
    EXPECT_EQ(again.row_grads, many.row_grads);
    EXPECT_EQ(again.loss, many.loss);
  }
  EXPECT_GT(one.loss, 0.0);
}

TEST(CtrDevicesTest, BadDeviceListsAndBatchesNameTheirPart) {
  EXPECT_THAT(CtrDevices::Create(Model(), {}, 1, 8).status().message(),
              HasSubstr("devices: at least one"));
  EXPECT_THAT(CtrDevices::Create(Model(), {"cpu:0", "cpu:0", "cpu:0"}, 1, 2)
                  .status()
                  .message(),
              HasSubstr("devices: 3 devices for a batch of 2 examples"));
  EXPECT_FALSE(CtrDevices::Create(Model(), {"tpu:0"}, 1, 8).ok());

  absl::StatusOr<std::unique_ptr<CtrDevices>> cd =
      CtrDevices::Create(Model(), {"cpu:0", "cpu:0"}, 1, 8);
  ASSERT_TRUE(cd.ok()) << cd.status();
  CtrBatch batch = Batch(8);
  batch.labels[5] = 0.5f;
  absl::Status s = (*cd)->Prepare(batch);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(),
              HasSubstr("device 1 (examples [4, 8)): batch.labels[1]"));
  batch.labels.pop_back();
  EXPECT_THAT((*cd)->Prepare(batch).message(),
              HasSubstr("batch.labels: 7 elements for 8 examples"));
}

}  // namespace
}  // namespace ps
