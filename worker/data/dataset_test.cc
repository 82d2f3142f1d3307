#include "worker/data/dataset.h"

#include <sys/stat.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr char kFashionDir[] = "/usr/share/datasets/fashion-mnist";

std::string TempDir(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  const std::string path =
      absl::StrCat(dir != nullptr ? dir : "/tmp", "/", name);
  mkdir(path.c_str(), 0755);  // EEXIST is fine
  return path;
}

void WriteFile(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  ASSERT_TRUE(f.good()) << path;
}

void PutBigEndian(std::vector<uint8_t>* out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out->push_back(v >> shift);
}

std::vector<uint8_t> Images(uint32_t count, uint32_t rows, uint32_t cols,
                            uint8_t value) {
  std::vector<uint8_t> out;
  PutBigEndian(&out, 0x803);
  PutBigEndian(&out, count);
  PutBigEndian(&out, rows);
  PutBigEndian(&out, cols);
  out.insert(out.end(), size_t{count} * rows * cols, value);
  return out;
}

std::vector<uint8_t> Labels(const std::vector<uint8_t>& labels) {
  std::vector<uint8_t> out;
  PutBigEndian(&out, 0x801);
  PutBigEndian(&out, labels.size());
  out.insert(out.end(), labels.begin(), labels.end());
  return out;
}

// Writes a complete small image data set to `dir`.
void WriteImageSet(const std::string& dir, uint32_t train, uint32_t test) {
  std::vector<uint8_t> train_labels(train), test_labels(test);
  for (uint32_t i = 0; i < train; ++i) train_labels[i] = i % 10;
  for (uint32_t i = 0; i < test; ++i) test_labels[i] = (i + 3) % 10;
  WriteFile(dir + "/train-images-idx3-ubyte", Images(train, 2, 3, 255));
  WriteFile(dir + "/train-labels-idx1-ubyte", Labels(train_labels));
  WriteFile(dir + "/t10k-images-idx3-ubyte", Images(test, 2, 3, 0));
  WriteFile(dir + "/t10k-labels-idx1-ubyte", Labels(test_labels));
}

TEST(DatasetTest, PixelsAreNormalised) {
  absl::StatusOr<Dataset> d =
      Dataset::FromPixels({0, 51, 255, 102}, {1, 0}, 2, 2, 0.5f, 0.25f);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->size(), 2u);
  float x[4];
  int32_t y[2];
  d->CopyRange(0, 2, x, y);
  EXPECT_FLOAT_EQ(x[0], (0.0f - 0.5f) / 0.25f);
  EXPECT_FLOAT_EQ(x[1], (0.2f - 0.5f) / 0.25f);
  EXPECT_FLOAT_EQ(x[2], (1.0f - 0.5f) / 0.25f);
  EXPECT_FLOAT_EQ(x[3], (0.4f - 0.5f) / 0.25f);
  EXPECT_EQ(y[0], 1);
  EXPECT_EQ(y[1], 0);
  const uint32_t order[] = {1, 0};
  float g[4];
  d->Gather(order, g, y);
  EXPECT_EQ(g[0], x[2]);
  EXPECT_EQ(g[3], x[1]);
  EXPECT_EQ(y[0], 0);
  EXPECT_EQ(y[1], 1);
}

TEST(DatasetTest, RejectsBadInput) {
  EXPECT_THAT(
      Dataset::FromPixels({1, 2, 3}, {0, 1}, 2, 2, 0, 1).status().message(),
      HasSubstr("pixels"));
  EXPECT_THAT(Dataset::FromPixels({1, 2}, {0}, 2, 2, 0, 0).status().message(),
              HasSubstr("stddev"));
  EXPECT_THAT(Dataset::FromFeatures({1, 2}, {2}, 2, 2).status().message(),
              HasSubstr("labels[0] = 2"));
  EXPECT_THAT(Dataset::FromFeatures({1, 2}, {-1}, 2, 2).status().message(),
              HasSubstr("labels[0] = -1"));
}

TEST(LoadIdxDatasetTest, CountMismatchNamesBothFiles) {
  const std::string dir = TempDir("mismatch");
  WriteFile(dir + "/images", Images(5, 2, 2, 7));
  WriteFile(dir + "/labels", Labels({0, 1, 2, 3}));
  const absl::Status s =
      LoadIdxDataset(dir + "/images", dir + "/labels", 0, 1).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_THAT(s.message(),
              AllOf(HasSubstr(dir + "/images"), HasSubstr(dir + "/labels"),
                    HasSubstr("5 images"), HasSubstr("4 labels")));
}

TEST(LoadIdxDatasetTest, LabelOutOfRangeNamesTheFile) {
  const std::string dir = TempDir("bad-label");
  WriteFile(dir + "/images", Images(2, 2, 2, 7));
  WriteFile(dir + "/labels", Labels({3, 10}));
  const absl::Status s =
      LoadIdxDataset(dir + "/images", dir + "/labels", 0, 1).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_THAT(s.message(), AllOf(HasSubstr(dir + "/labels"),
                                 HasSubstr("label 10 of example 1")));
}

TEST(LoadDatasetTest, ReadsAnImageSetFromTheDataDir) {
  const std::string dir = TempDir("tiny-mnist");
  WriteImageSet(dir, 20, 7);
  DataSpec spec;
  spec.set_dataset("mnist");
  absl::StatusOr<TrainTestData> data = LoadDataset(spec, dir, 1);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->train->size(), 20u);
  EXPECT_EQ(data->test->size(), 7u);
  EXPECT_EQ(data->train->dim(), 6u);
  EXPECT_EQ(data->train->num_classes(), 10u);
  EXPECT_EQ(data->test->label(0), 3);
  float x[6];
  data->train->CopyExample(4, x);
  EXPECT_FLOAT_EQ(x[0], (1.0f - 0.1307f) / 0.3081f);

  // data.data_dir overrides the worker's dir; max_train_examples truncates.
  spec.set_data_dir(dir);
  spec.set_max_train_examples(8);
  data = LoadDataset(spec, "/nonexistent", 1);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->train->size(), 8u);
  EXPECT_EQ(data->test->size(), 7u);
}

TEST(LoadDatasetTest, MissingFilesAreNamed) {
  const std::string dir = TempDir("empty-dir");
  DataSpec spec;
  spec.set_dataset("fashion-mnist");
  const absl::Status s = LoadDataset(spec, dir, 1).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
  EXPECT_THAT(s.message(), HasSubstr(dir + "/train-images-idx3-ubyte.gz"));
}

TEST(LoadDatasetTest, CorruptTestLabelsAreNamed) {
  const std::string dir = TempDir("corrupt-set");
  WriteImageSet(dir, 20, 7);
  WriteFile(dir + "/t10k-labels-idx1-ubyte", {0, 0, 8, 1, 0});
  DataSpec spec;
  spec.set_dataset("mnist");
  const absl::Status s = LoadDataset(spec, dir, 1).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_THAT(s.message(), HasSubstr(dir + "/t10k-labels-idx1-ubyte"));
}

TEST(LoadDatasetTest, RejectsBadSpecsNamingTheField) {
  struct Case {
    std::string dataset;
    uint32_t train, test;
    std::string field;
  };
  for (const Case& c : std::vector<Case>{
           {"imagenet", 0, 0, "data.dataset"},
           {"", 0, 0, "data.dataset"},
           {"synthetic", 0, 10, "data.synthetic_train"},
           {"synthetic", 10, 0, "data.synthetic_test"},
       }) {
    DataSpec spec;
    spec.set_dataset(c.dataset);
    spec.set_synthetic_train(c.train);
    spec.set_synthetic_test(c.test);
    const absl::Status s = LoadDataset(spec, "", 1).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_THAT(s.message(), HasSubstr(c.field)) << c.dataset;
  }
}

TEST(SyntheticTest, SeededAndSized) {
  DataSpec spec;
  spec.set_dataset("synthetic");
  spec.set_synthetic_train(300);
  spec.set_synthetic_test(50);
  absl::StatusOr<TrainTestData> a = LoadDataset(spec, "", 7);
  absl::StatusOr<TrainTestData> b = LoadDataset(spec, "", 7);
  absl::StatusOr<TrainTestData> c = LoadDataset(spec, "", 8);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ(a->train->size(), 300u);
  EXPECT_EQ(a->test->size(), 50u);
  EXPECT_EQ(a->train->dim(), 784u);
  EXPECT_EQ(a->train->num_classes(), 10u);
  std::vector<float> xa(784), xb(784), xc(784);
  a->train->CopyExample(123, xa.data());
  b->train->CopyExample(123, xb.data());
  c->train->CopyExample(123, xc.data());
  EXPECT_EQ(xa, xb);
  EXPECT_NE(xa, xc);
  std::vector<int> per_class(10);
  for (size_t i = 0; i < a->train->size(); ++i) ++per_class[a->train->label(i)];
  for (int n : per_class) EXPECT_GT(n, 10);

  // A truncated synthetic set is a prefix of the full one.
  spec.set_max_train_examples(200);
  absl::StatusOr<TrainTestData> d = LoadDataset(spec, "", 7);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->train->size(), 200u);
  d->train->CopyExample(123, xc.data());
  EXPECT_EQ(xa, xc);
  EXPECT_EQ(d->train->label(199), a->train->label(199));
}

TEST(SyntheticTest, NearestCentroidSeparatesTheClasses) {
  // The class means of the training set classify the test set almost
  // perfectly: the set is (nearly) linearly separable as documented.
  TrainTestData data = MakeSyntheticData(2000, 500, 3);
  const size_t dim = data.train->dim();
  std::vector<double> mean(10 * dim);
  std::vector<int> count(10);
  std::vector<float> x(dim);
  for (size_t i = 0; i < data.train->size(); ++i) {
    data.train->CopyExample(i, x.data());
    const int y = data.train->label(i);
    ++count[y];
    for (size_t j = 0; j < dim; ++j) mean[y * dim + j] += x[j];
  }
  for (int c = 0; c < 10; ++c) {
    for (size_t j = 0; j < dim; ++j) mean[c * dim + j] /= count[c];
  }
  int correct = 0;
  for (size_t i = 0; i < data.test->size(); ++i) {
    data.test->CopyExample(i, x.data());
    int best = 0;
    double best_d = 1e300;
    for (int c = 0; c < 10; ++c) {
      double d = 0;
      for (size_t j = 0; j < dim; ++j) {
        d += (x[j] - mean[c * dim + j]) * (x[j] - mean[c * dim + j]);
      }
      if (d < best_d) best_d = d, best = c;
    }
    correct += best == data.test->label(i);
  }
  EXPECT_GE(correct, 490);
}

TEST(FashionMnistTest, ReadsTheRealFiles) {
  if (!std::ifstream(absl::StrCat(kFashionDir, "/train-images-idx3-ubyte.gz"))
           .good()) {
    GTEST_SKIP() << "Fashion-MNIST not found in " << kFashionDir;
  }
  DataSpec spec;
  spec.set_dataset("fashion-mnist");
  absl::StatusOr<TrainTestData> data = LoadDataset(spec, kFashionDir, 1);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->train->size(), 60000u);
  EXPECT_EQ(data->test->size(), 10000u);
  EXPECT_EQ(data->train->dim(), 784u);
  // Fashion-MNIST is balanced: 6000 / 1000 examples per class.
  std::vector<int> train_count(10), test_count(10);
  for (size_t i = 0; i < 60000; ++i) ++train_count[data->train->label(i)];
  for (size_t i = 0; i < 10000; ++i) ++test_count[data->test->label(i)];
  EXPECT_EQ(train_count, std::vector<int>(10, 6000));
  EXPECT_EQ(test_count, std::vector<int>(10, 1000));
  // The fixed constants standardise the training set.
  double sum = 0, sum_sq = 0;
  std::vector<float> x(784);
  for (size_t i = 0; i < 60000; ++i) {
    data->train->CopyExample(i, x.data());
    for (float v : x) sum += v, sum_sq += double{v} * v;
  }
  const double n = 60000.0 * 784;
  const double mean = sum / n;
  EXPECT_NEAR(mean, 0.0, 0.01);
  EXPECT_NEAR(std::sqrt(sum_sq / n - mean * mean), 1.0, 0.01);
}

}  // namespace
}  // namespace ps
