#include "worker/backend/cpu/kernel_choices.h"

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

using ::testing::HasSubstr;
using ::testing::Optional;

class KernelChoicesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TEST_TMPDIR");
    std::string templ =
        absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/kernel_choices_XXXXXX");
    ASSERT_NE(mkdtemp(templ.data()), nullptr);
    dir_ = templ;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  static std::string Slurp(const std::string& path) {
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }

  std::string dir_;
};

TEST_F(KernelChoicesTest, RecordsInAFileThatTheNextOpenReads) {
  // The folder does not exist yet: the first Record makes it.
  const std::string path = dir_ + "/cache/ps/choices.tsv";
  auto first = KernelChoices::Open(path);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ((*first)->Find("cpu | threads 1 | gemm NN m 64 n 10 k 784"),
            std::nullopt);
  std::string warning = "stale";
  EXPECT_EQ((*first)->Record("cpu | threads 1 | gemm NN m 64 n 10 k 784",
                             "onednn", &warning),
            "onednn");
  EXPECT_EQ(warning, "");
  EXPECT_EQ((*first)->Record("cpu | threads 1 | conv 28x28x1 k5 f32 rows 64",
                             "openblas", &warning),
            "openblas");

  auto second = KernelChoices::Open(path);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_THAT((*second)->Find("cpu | threads 1 | gemm NN m 64 n 10 k 784"),
              Optional(std::string("onednn")));
  EXPECT_THAT((*second)->Find("cpu | threads 1 | conv 28x28x1 k5 f32 rows 64"),
              Optional(std::string("openblas")));
  EXPECT_EQ((*second)->skipped_lines(), 0);
  EXPECT_THAT(Slurp(path), HasSubstr("gemm NN m 64 n 10 k 784\tonednn\n"));
}

TEST_F(KernelChoicesTest, TheFirstProcessToRecordAShapeWins) {
  // Two tables on one file stand for two workerds on one machine that timed
  // the same shape differently: the second takes the first's choice.
  const std::string path = dir_ + "/choices.tsv";
  auto a = KernelChoices::Open(path);
  auto b = KernelChoices::Open(path);
  ASSERT_TRUE(a.ok() && b.ok());
  std::string warning;
  EXPECT_EQ((*b)->Record("shape", "openblas", &warning), "openblas");
  EXPECT_EQ((*a)->Record("shape", "onednn", &warning), "openblas");
  EXPECT_THAT((*a)->Find("shape"), Optional(std::string("openblas")));
  // And a table keeps its own first answer for the rest of its life.
  EXPECT_EQ((*a)->Record("shape", "onednn", &warning), "openblas");
}

TEST_F(KernelChoicesTest, ConcurrentRecordsFromTwoTablesAllReachTheFile) {
  const std::string path = dir_ + "/choices.tsv";
  auto a = KernelChoices::Open(path);
  auto b = KernelChoices::Open(path);
  ASSERT_TRUE(a.ok() && b.ok());
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    KernelChoices* table = (t % 2 == 0 ? *a : *b).get();
    threads.emplace_back([table, t] {
      std::string warning;
      for (int i = 0; i < 10; ++i) {
        table->Record(absl::StrCat("shape ", t, " ", i),
                      i % 2 == 0 ? "onednn" : "openblas", &warning);
        EXPECT_EQ(warning, "");
      }
    });
  }
  for (std::thread& t : threads) t.join();
  auto reread = KernelChoices::Open(path);
  ASSERT_TRUE(reread.ok());
  for (int t = 0; t < 8; ++t) {
    for (int i = 0; i < 10; ++i) {
      EXPECT_THAT((*reread)->Find(absl::StrCat("shape ", t, " ", i)),
                  Optional(std::string(i % 2 == 0 ? "onednn" : "openblas")))
          << t << " " << i;
    }
  }
}

TEST_F(KernelChoicesTest, LinesThatDoNotParseAreSkippedAndCounted) {
  const std::string path = dir_ + "/choices.tsv";
  {
    std::ofstream out(path, std::ios::binary);
    out << "# comment\n"
        << "good\tonednn\n"
        << "no tab here\n"
        << "\topenblas\n"
        << "bad choice\tmkl\n"
        << "trailing\tonednn \n"
        << std::string("\0\xff\x01\tonednn", 10) << "\n"
        << "last\topenblas";  // no final newline
  }
  auto c = KernelChoices::Open(path);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ((*c)->skipped_lines(), 4);
  EXPECT_THAT((*c)->Find("good"), Optional(std::string("onednn")));
  EXPECT_THAT((*c)->Find("last"), Optional(std::string("openblas")));
  EXPECT_EQ((*c)->Find("bad choice"), std::nullopt);
}

TEST_F(KernelChoicesTest, AnUnwritableFileKeepsTheChoiceInMemoryAndSaysSo) {
  // The path's folder would have to be made under a regular file.
  const std::string blocker = dir_ + "/file";
  std::ofstream(blocker) << "x";
  auto c = KernelChoices::Open(blocker + "/choices.tsv");
  ASSERT_TRUE(c.ok()) << c.status();
  std::string warning;
  EXPECT_EQ((*c)->Record("shape", "onednn", &warning), "onednn");
  EXPECT_THAT(warning, HasSubstr("not saved"));
  EXPECT_THAT(warning, HasSubstr(blocker));
  EXPECT_THAT((*c)->Find("shape"), Optional(std::string("onednn")));
}

TEST_F(KernelChoicesTest, AFileThatCannotBeReadIsAnErrorNamingIt) {
  auto c = KernelChoices::Open(dir_);  // a folder
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr(dir_));
}

TEST_F(KernelChoicesTest,
       MemoryOnlyTablesAndKeysThatCannotBeLinesStayInMemory) {
  KernelChoices memory;
  std::string warning;
  EXPECT_EQ(memory.Record("shape", "openblas", &warning), "openblas");
  EXPECT_EQ(warning, "");
  EXPECT_THAT(memory.Find("shape"), Optional(std::string("openblas")));

  const std::string path = dir_ + "/choices.tsv";
  auto c = KernelChoices::Open(path);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ((*c)->Record("a\tb", "onednn", &warning), "onednn");
  EXPECT_FALSE(std::filesystem::exists(path));
}

TEST(DefaultKernelChoicesPathTest, FollowsXdgCacheHomeThenHome) {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  const std::string saved_xdg = xdg != nullptr ? xdg : "";
  const std::string saved_home = home != nullptr ? home : "";
  setenv("XDG_CACHE_HOME", "/x/cache", 1);
  EXPECT_EQ(DefaultKernelChoicesPath(), "/x/cache/ps/cpu_kernel_choices.tsv");
  setenv("XDG_CACHE_HOME", "relative", 1);  // ignored, as the spec says
  setenv("HOME", "/home/u", 1);
  EXPECT_EQ(DefaultKernelChoicesPath(),
            "/home/u/.cache/ps/cpu_kernel_choices.tsv");
  unsetenv("XDG_CACHE_HOME");
  unsetenv("HOME");
  EXPECT_EQ(DefaultKernelChoicesPath(), "");
  if (xdg != nullptr) setenv("XDG_CACHE_HOME", saved_xdg.c_str(), 1);
  if (home != nullptr) setenv("HOME", saved_home.c_str(), 1);
}

}  // namespace
}  // namespace ps
