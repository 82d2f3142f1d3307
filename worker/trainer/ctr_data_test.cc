#include "worker/trainer/ctr_data.h"

#include <unistd.h>
#include <zlib.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/data/ctr_example.h"
#include "worker/data/ctr_synthetic.h"
#include "worker/trainer/ctr_data_tsv.h"

namespace ps {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return absl::StrCat(dir != nullptr ? dir : "/tmp", "/", name);
}

// Row `i` of a hand-made file: C1 holds i + 1 in hex (so a batch names its
// rows), the label is i % 2, I1 = i, and I2, I3 and C2 are missing.
std::string Row(int i) {
  std::vector<std::string> cells = {absl::StrCat(i % 2), absl::StrCat(i), "",
                                    ""};
  for (int j = 3; j < kCtrDenseFeatures; ++j) cells.push_back("1");
  cells.push_back(absl::StrFormat("%x", i + 1));
  cells.push_back("");
  for (int f = 2; f < kCtrCategoricalFields; ++f) cells.push_back("a0");
  return absl::StrJoin(cells, "\t");
}

// Lines 0..n-1: Row(i), except the lines in `bad`, which do not parse.
std::string FileText(int n, const std::set<int>& bad) {
  std::string text;
  for (int i = 0; i < n; ++i) {
    if (bad.count(i) > 0) {
      absl::StrAppend(&text, i % 2 == 0 ? "2\tnot a label\n" : "0\t1\t2\n");
    } else {
      absl::StrAppend(&text, Row(i), "\n");
    }
  }
  return text;
}

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  ASSERT_TRUE(out.good()) << path;
}

// The row numbers (i of Row(i)) of a batch, in order.
std::vector<int> RowsOf(const CtrBatch& batch) {
  std::vector<int> rows;
  for (size_t b = 0; b < batch.size; ++b) {
    rows.push_back(
        static_cast<int>(CtrIdValue(batch.ids[b * kCtrCategoricalFields])) - 1);
  }
  return rows;
}

JobSpec TsvJob(const std::string& train, const std::string& test,
               uint32_t batch) {
  JobSpec job;
  job.mutable_data()->set_dataset(kCriteoTsvDatasetName);
  job.mutable_data()->set_train_file(train);
  job.mutable_data()->set_test_file(test);
  job.mutable_data()->set_batch_size(batch);
  job.mutable_data()->set_epochs(1);
  return job;
}

CtrDataOptions Rank(uint32_t rank, uint32_t workers) {
  CtrDataOptions o;
  o.rank = rank;
  o.num_workers = workers;
  o.test_set = rank == 0;
  return o;
}

std::vector<std::vector<int>> Batches(CtrDataSource& source, uint64_t from,
                                      uint64_t to) {
  std::vector<std::vector<int>> out;
  CtrBatch batch;
  for (uint64_t t = from; t < to; ++t) {
    absl::Status s = source.TrainBatch(t, &batch);
    EXPECT_TRUE(s.ok()) << "step " << t << ": " << s;
    out.push_back(RowsOf(batch));
  }
  return out;
}

// 20 lines, bad at 3, 6 and 7; 2 ranks, batches of 3. Rank 0 owns the even
// lines, 9 of them good; rank 1 the odd ones, 8 good: 2 steps per epoch.
class TsvSourceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    train_ = TempPath("train.tsv");
    test_ = TempPath("test.tsv");
    WriteFile(train_, FileText(20, {3, 6, 7}));
    WriteFile(test_, FileText(5, {2}));
  }
  std::string train_, test_;
};

TEST_F(TsvSourceTest, RanksTakeAlternateLinesAndSkipBadRows) {
  auto r0 = CreateCtrDataSource(TsvJob(train_, test_, 3), Rank(0, 2));
  auto r1 = CreateCtrDataSource(TsvJob(train_, test_, 3), Rank(1, 2));
  ASSERT_TRUE(r0.ok()) << r0.status();
  ASSERT_TRUE(r1.ok()) << r1.status();
  EXPECT_EQ((*r0)->steps_per_epoch(), 2u);
  EXPECT_EQ((*r1)->steps_per_epoch(), 2u);
  // Two epochs: each reads the file again from the top.
  const std::vector<std::vector<int>> want0 = {
      {0, 2, 4}, {8, 10, 12}, {0, 2, 4}, {8, 10, 12}};
  const std::vector<std::vector<int>> want1 = {
      {1, 5, 9}, {11, 13, 15}, {1, 5, 9}, {11, 13, 15}};
  EXPECT_EQ(Batches(**r0, 0, 4), want0);
  EXPECT_EQ(Batches(**r1, 0, 4), want1);
}

TEST_F(TsvSourceTest, CountsEachRanksGoodRows) {
  CtrTsvSource::Options o;
  o.train_path = train_;
  o.test_path = test_;
  o.batch_size = 3;
  o.data = Rank(0, 2);
  auto source = CtrTsvSource::Create(o);
  ASSERT_TRUE(source.ok()) << source.status();
  EXPECT_EQ((*source)->train_count().lines, 20u);
  EXPECT_EQ((*source)->train_count().bad_rows, 3u);
  EXPECT_THAT((*source)->train_count().good_per_rank, ElementsAre(9, 8));
  EXPECT_EQ((*source)->test_rows(), 4u);
}

// A batch is a function of the step: a source that starts at step 3 (a
// restart) or jumps back reads what the sequential one read.
TEST_F(TsvSourceTest, AnyStepReadsTheSameBatch) {
  auto seq = CreateCtrDataSource(TsvJob(train_, test_, 3), Rank(1, 2));
  auto jump = CreateCtrDataSource(TsvJob(train_, test_, 3), Rank(1, 2));
  ASSERT_TRUE(seq.ok() && jump.ok());
  const std::vector<std::vector<int>> all = Batches(**seq, 0, 6);
  EXPECT_EQ(Batches(**jump, 3, 4)[0], all[3]);
  EXPECT_EQ(Batches(**jump, 1, 2)[0], all[1]);
  EXPECT_EQ(Batches(**jump, 4, 6),
            std::vector<std::vector<int>>(all.begin() + 4, all.begin() + 6));
}

TEST_F(TsvSourceTest, ParsesMissingValues) {
  auto source = CreateCtrDataSource(TsvJob(train_, test_, 3), Rank(0, 1));
  ASSERT_TRUE(source.ok()) << source.status();
  CtrBatch batch;
  ASSERT_TRUE((*source)->TrainBatch(0, &batch).ok());
  const CtrExample e = batch.Get(2);  // Row(2)
  EXPECT_EQ(e.label, 0.0f);
  EXPECT_FLOAT_EQ(e.dense[0], std::log1p(2.0f));
  EXPECT_EQ(e.dense[1], 0.0f);  // missing
  EXPECT_EQ(e.dense[2], 0.0f);  // missing
  EXPECT_FLOAT_EQ(e.dense[3], std::log1p(1.0f));
  EXPECT_EQ(e.ids[0], CtrId(0, 3));
  EXPECT_EQ(e.ids[1], CtrId(1, kCtrMissingValue));
  EXPECT_EQ(e.ids[2], CtrId(2, 0xa0));
  EXPECT_EQ(batch.labels[1], 1.0f);  // Row(1)
}

TEST_F(TsvSourceTest, MaxTrainExamplesTakesTheFirstLines) {
  JobSpec job = TsvJob(train_, test_, 2);
  job.mutable_data()->set_max_train_examples(10);  // lines 0..9, 3 bad
  auto source = CreateCtrDataSource(job, Rank(1, 2));
  ASSERT_TRUE(source.ok()) << source.status();
  // Rank 0: 0 2 4 8 (4 good); rank 1: 1 5 9 (3 good) -> 1 step of 2.
  EXPECT_EQ((*source)->steps_per_epoch(), 1u);
  EXPECT_EQ(Batches(**source, 0, 2),
            (std::vector<std::vector<int>>{{1, 5}, {1, 5}}));
}

TEST_F(TsvSourceTest, TestSetInChunksWithoutTeacher) {
  auto source = CreateCtrDataSource(TsvJob(train_, test_, 3), Rank(0, 2));
  ASSERT_TRUE(source.ok()) << source.status();
  for (int pass = 0; pass < 2; ++pass) {
    std::vector<std::vector<int>> chunks;
    ASSERT_TRUE((*source)
                    ->ForEachTestBatch(2,
                                       [&](const CtrBatch& b, const double* t) {
                                         EXPECT_EQ(t, nullptr);
                                         chunks.push_back(RowsOf(b));
                                         return absl::OkStatus();
                                       })
                    .ok());
    EXPECT_EQ(chunks, (std::vector<std::vector<int>>{{0, 1}, {3, 4}}));
  }
  // fn's error stops the pass and comes back.
  absl::Status s =
      (*source)->ForEachTestBatch(3, [](const CtrBatch&, const double*) {
        return absl::AbortedError("stop");
      });
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted);
  // Only the evaluating rank has a test set.
  auto r1 = CreateCtrDataSource(TsvJob(train_, "/nonexistent", 3), Rank(1, 2));
  ASSERT_TRUE(r1.ok()) << r1.status();
  EXPECT_EQ(
      (*r1)
          ->ForEachTestBatch(2, [](const CtrBatch&,
                                   const double*) { return absl::OkStatus(); })
          .code(),
      absl::StatusCode::kFailedPrecondition);
}

TEST_F(TsvSourceTest, ReadsGzipAndRelativePaths) {
  const std::string gz = TempPath("train.tsv.gz");
  const std::string text = FileText(20, {3, 6, 7});
  gzFile out = gzopen(gz.c_str(), "wb");
  ASSERT_NE(out, nullptr);
  ASSERT_EQ(gzwrite(out, text.data(), text.size()),
            static_cast<int>(text.size()));
  ASSERT_EQ(gzclose(out), Z_OK);
  JobSpec job = TsvJob("train.tsv.gz", "test.tsv", 3);
  job.mutable_data()->set_data_dir(TempPath(""));
  auto source = CreateCtrDataSource(job, Rank(0, 2));
  ASSERT_TRUE(source.ok()) << source.status();
  EXPECT_EQ(Batches(**source, 0, 2),
            (std::vector<std::vector<int>>{{0, 2, 4}, {8, 10, 12}}));
}

TEST_F(TsvSourceTest, ErrorsNameTheFieldOrFile) {
  auto missing = CreateCtrDataSource(TsvJob("/nonexistent/train.tsv", test_, 3),
                                     Rank(0, 2));
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("/nonexistent/train.tsv"));

  // 9 and 8 good rows: no batch of 9 for rank 1.
  auto small = CreateCtrDataSource(TsvJob(train_, test_, 9), Rank(0, 2));
  EXPECT_EQ(small.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(small.status().message(),
              HasSubstr("data.train_file: " + train_ +
                        " has 17 good rows in 20 lines (3 bad), fewest 8"));

  const std::string all_bad = TempPath("all_bad.tsv");
  WriteFile(all_bad, FileText(4, {0, 1, 2, 3}));
  auto no_test = CreateCtrDataSource(TsvJob(train_, all_bad, 3), Rank(0, 2));
  EXPECT_EQ(no_test.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(no_test.status().message(),
              HasSubstr("data.test_file: " + all_bad + " has no good row"));

  JobSpec unset = TsvJob(train_, test_, 3);
  unset.mutable_data()->clear_test_file();
  EXPECT_THAT(CreateCtrDataSource(unset, Rank(0, 2)).status().message(),
              HasSubstr("data.test_file: must be set"));
  JobSpec mnist = TsvJob(train_, test_, 3);
  mnist.mutable_data()->set_dataset("fashion-mnist");
  EXPECT_THAT(CreateCtrDataSource(mnist, Rank(0, 2)).status().message(),
              HasSubstr("data.dataset: a ctr model trains on"));
  EXPECT_EQ(
      CreateCtrDataSource(TsvJob(train_, test_, 3), Rank(2, 2)).status().code(),
      absl::StatusCode::kInvalidArgument);
}

// The file shrinks after the count pass: kDataLoss naming it, no crash.
TEST_F(TsvSourceTest, FileChangedAfterCountIsDataLoss) {
  auto source = CreateCtrDataSource(TsvJob(train_, test_, 3), Rank(1, 2));
  ASSERT_TRUE(source.ok()) << source.status();
  WriteFile(train_, FileText(12, {3, 6, 7}));
  CtrBatch batch;
  ASSERT_TRUE((*source)->TrainBatch(0, &batch).ok());
  absl::Status s = (*source)->TrainBatch(1, &batch);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_THAT(s.message(), HasSubstr(train_));
  // The file restored, the failed step reads again from the top.
  WriteFile(train_, FileText(20, {3, 6, 7}));
  ASSERT_TRUE((*source)->TrainBatch(1, &batch).ok());
  EXPECT_THAT(RowsOf(batch), ElementsAre(11, 13, 15));
}

TEST(SyntheticSourceTest, IsTheGeneratorsSlice) {
  JobSpec job;
  job.set_seed(7);
  job.mutable_data()->set_dataset(kCtrSyntheticDatasetName);
  job.mutable_data()->set_batch_size(16);
  job.mutable_data()->set_synthetic_train(100);  // 50 per rank: 3 steps
  job.mutable_data()->set_synthetic_test(40);
  auto source = CreateCtrDataSource(job, Rank(1, 2));
  ASSERT_TRUE(source.ok()) << source.status();
  EXPECT_EQ((*source)->steps_per_epoch(), 3u);
  CtrSyntheticConfig config;
  config.seed = 7;
  absl::StatusOr<CtrSyntheticGenerator> gen =
      CtrSyntheticGenerator::Create(config);
  ASSERT_TRUE(gen.ok());
  CtrBatch got, want;
  ASSERT_TRUE((*source)->TrainBatch(4, &got).ok());  // epoch 1, step 1
  gen->GenerateBatch(50 + 16, 16, &want);
  EXPECT_EQ(got.ids, want.ids);
  EXPECT_EQ(got.dense, want.dense);
  EXPECT_EQ(got.labels, want.labels);
  // Rank 1 has no test set; rank 0's comes in chunks with the teacher.
  EXPECT_EQ(
      (*source)
          ->ForEachTestBatch(8, [](const CtrBatch&,
                                   const double*) { return absl::OkStatus(); })
          .code(),
      absl::StatusCode::kFailedPrecondition);
  auto r0 = CreateCtrDataSource(job, Rank(0, 2));
  ASSERT_TRUE(r0.ok());
  std::vector<size_t> sizes;
  ASSERT_TRUE((*r0)
                  ->ForEachTestBatch(16,
                                     [&](const CtrBatch& b, const double* t) {
                                       EXPECT_NE(t, nullptr);
                                       sizes.push_back(b.size);
                                       return absl::OkStatus();
                                     })
                  .ok());
  EXPECT_THAT(sizes, ElementsAreArray({16u, 16u, 8u}));

  job.mutable_data()->set_synthetic_train(31);  // 15 per rank < 16
  EXPECT_THAT(CreateCtrDataSource(job, Rank(0, 2)).status().message(),
              HasSubstr("data.synthetic_train"));
}

TEST(SyntheticSourceTest, TakesTheJobsCardinalitiesAndExponent) {
  JobSpec job;
  job.set_seed(3);
  DataSpec* d = job.mutable_data();
  d->set_dataset(kCtrSyntheticDatasetName);
  d->set_batch_size(64);
  d->set_synthetic_train(128);
  d->set_synthetic_test(8);
  CtrSyntheticConfig config;
  config.seed = 3;
  config.zipf_exponent = 0.5;
  for (int f = 0; f < kCtrCategoricalFields; ++f) {
    config.cardinalities[f] = 2 + f;
    d->add_ctr_cardinalities(2 + f);
  }
  d->set_ctr_zipf_exponent(0.5);
  auto source = CreateCtrDataSource(job, Rank(0, 1));
  ASSERT_TRUE(source.ok()) << source.status();
  absl::StatusOr<CtrSyntheticGenerator> gen =
      CtrSyntheticGenerator::Create(config);
  ASSERT_TRUE(gen.ok());
  CtrBatch got, want;
  ASSERT_TRUE((*source)->TrainBatch(1, &got).ok());
  gen->GenerateBatch(64, 64, &want);
  EXPECT_EQ(got.ids, want.ids);
  EXPECT_EQ(got.labels, want.labels);
  // Every value below its field's cardinality, and the small fields full.
  std::set<uint64_t> field0;
  for (size_t i = 0; i < got.size; ++i) {
    for (int f = 0; f < kCtrCategoricalFields; ++f) {
      const uint64_t id = got.ids[i * kCtrCategoricalFields + f];
      ASSERT_EQ(CtrIdField(id), f);
      ASSERT_LT(CtrIdValue(id), static_cast<uint64_t>(2 + f));
      if (f == 0) field0.insert(CtrIdValue(id));
    }
  }
  EXPECT_THAT(field0, ElementsAre(0u, 1u));

  d->set_ctr_cardinalities(4, 0);
  EXPECT_EQ(CreateCtrDataSource(job, Rank(0, 1)).status().message(),
            "data.ctr_cardinalities[4] = 0: want 1 <= value < 2^32");
  d->set_ctr_cardinalities(4, 6);
  d->add_ctr_cardinalities(9);
  EXPECT_THAT(CreateCtrDataSource(job, Rank(0, 1)).status().message(),
              HasSubstr("data.ctr_cardinalities: has 27 values"));
}

TEST(ResolveDataPathTest, RelativeToTheDirectory) {
  EXPECT_EQ(ResolveDataPath("", "a.tsv"), "a.tsv");
  EXPECT_EQ(ResolveDataPath("/d", "a.tsv"), "/d/a.tsv");
  EXPECT_EQ(ResolveDataPath("/d/", "a.tsv"), "/d/a.tsv");
  EXPECT_EQ(ResolveDataPath("/d", "/e/a.tsv"), "/e/a.tsv");
}

}  // namespace
}  // namespace ps
