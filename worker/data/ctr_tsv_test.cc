#include "worker/data/ctr_tsv.h"

#include <zlib.h>

#include <cmath>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

using ::testing::HasSubstr;

std::string TestData(const std::string& name) {
  return absl::StrCat(std::getenv("TEST_SRCDIR"), "/",
                      std::getenv("TEST_WORKSPACE"), "/worker/data/testdata/",
                      name);
}

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return absl::StrCat(dir != nullptr ? dir : "/tmp", "/", name);
}

// The hand-made file: values computed by hand from the text.
void ExpectSmallFile(const std::string& path) {
  absl::StatusOr<std::unique_ptr<CtrTsvReader>> reader =
      CtrTsvReader::Open(path);
  ASSERT_TRUE(reader.ok()) << reader.status();
  CtrExample e;
  ASSERT_TRUE(*(*reader)->Next(&e));
  EXPECT_EQ(e.label, 0.0f);
  EXPECT_FLOAT_EQ(e.dense[0], std::log(2.0));  // I1 = 1
  EXPECT_FLOAT_EQ(e.dense[2], std::log(6.0));  // I3 = 5
  EXPECT_EQ(e.dense[3], 0.0f);                 // I4 = 0
  EXPECT_FLOAT_EQ(e.dense[4], 7.2320103f);     // I5 = 1382
  EXPECT_EQ(e.dense[11], 0.0f);                // I12 missing
  EXPECT_EQ(e.ids[0], CtrId(0, 0x68fd1e64));
  EXPECT_EQ(e.ids[21], CtrId(21, kCtrMissingValue));  // C22 missing
  EXPECT_EQ(e.ids[25], CtrId(25, 0x9727dd16));
  EXPECT_TRUE(CheckCtrExample(e).ok());

  ASSERT_TRUE(*(*reader)->Next(&e));
  EXPECT_EQ(e.label, 1.0f);
  EXPECT_EQ(e.dense[0], 0.0f);  // missing
  EXPECT_EQ(e.dense[1], 0.0f);  // -1 -> log(1 + max(-1, 0))
  EXPECT_EQ(e.ids[1], CtrId(1, 0x6c9c9cf3));
  EXPECT_EQ(e.ids[2], CtrId(2, kCtrMissingValue));
  EXPECT_EQ(e.ids[25], CtrId(25, 0xffffffff));  // upper case

  ASSERT_TRUE(*(*reader)->Next(&e));
  EXPECT_FLOAT_EQ(e.dense[2], std::log(45.0));  // I3 = 44
  EXPECT_EQ(e.ids[9], CtrId(9, 0x2b53e5fb));
  EXPECT_EQ((*reader)->line(), 3u);
  absl::StatusOr<bool> end = (*reader)->Next(&e);
  ASSERT_TRUE(end.ok());
  EXPECT_FALSE(*end);
  EXPECT_FALSE(*(*reader)->Next(&e));  // stays at the end
}

TEST(CtrTsvTest, ReadsTheHandMadeFile) {
  ExpectSmallFile(TestData("criteo_small.tsv"));
}

TEST(CtrTsvTest, ReadsGzip) {
  const std::string plain = TestData("criteo_small.tsv");
  const std::string gz = TempPath("criteo_small.tsv.gz");
  {
    FILE* in = std::fopen(plain.c_str(), "rb");
    ASSERT_NE(in, nullptr);
    gzFile out = gzopen(gz.c_str(), "wb");
    ASSERT_NE(out, nullptr);
    char buf[1024];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof(buf), in)) > 0) {
      ASSERT_EQ(gzwrite(out, buf, n), static_cast<int>(n));
    }
    std::fclose(in);
    ASSERT_EQ(gzclose(out), Z_OK);
  }
  ExpectSmallFile(gz);
}

// Each bad row is named by file:line:column and skipped; good rows around
// them still read.
TEST(CtrTsvTest, BadRowsNameFileLineColumn) {
  const std::string path = TestData("criteo_bad.tsv");
  absl::StatusOr<std::unique_ptr<CtrTsvReader>> reader =
      CtrTsvReader::Open(path);
  ASSERT_TRUE(reader.ok()) << reader.status();
  const std::vector<std::string> want = {
      "",  // line 1 is good
      ":2:39: 39 columns, want 40",
      ":3:1: label '2' is not 0 or 1",
      ":4:5: I4 = '12x' is not an integer",
      ":5:21: C7 = 'xyz' is not 1 to 8 hex digits",
      ":6:16: C2 = '123456789' is not 1 to 8 hex digits",
      ":7:1: empty line, want 40 columns",
      ":8:41: more than 40 columns",
      "",  // line 9 is good and has no newline
  };
  CtrExample e;
  for (size_t i = 0; i < want.size(); ++i) {
    absl::StatusOr<bool> got = (*reader)->Next(&e);
    if (want[i].empty()) {
      ASSERT_TRUE(got.ok()) << "line " << i + 1 << ": " << got.status();
      EXPECT_TRUE(*got);
    } else {
      EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
      EXPECT_EQ(got.status().message(), path + want[i]) << "line " << i + 1;
    }
  }
  EXPECT_EQ(e.ids[0], CtrId(0, 0x68fd1e64));  // line 9's
  EXPECT_FALSE(*(*reader)->Next(&e));
}

// Skip moves past any line, good or bad, and keeps the line count.
TEST(CtrTsvTest, SkipPassesEveryLine) {
  absl::StatusOr<std::unique_ptr<CtrTsvReader>> reader =
      CtrTsvReader::Open(TestData("criteo_bad.tsv"));
  ASSERT_TRUE(reader.ok()) << reader.status();
  for (int i = 1; i <= 8; ++i) {
    absl::StatusOr<bool> got = (*reader)->Skip();
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_TRUE(*got);
    EXPECT_EQ((*reader)->line(), static_cast<uint64_t>(i));
  }
  CtrExample e;
  ASSERT_TRUE(*(*reader)->Next(&e));  // line 9
  EXPECT_EQ(e.ids[0], CtrId(0, 0x68fd1e64));
  EXPECT_FALSE(*(*reader)->Skip());
  EXPECT_EQ((*reader)->line(), 9u);
}

TEST(CtrTsvTest, RowTable) {
  std::vector<std::string> good(kCtrTsvColumns, "");
  good[0] = "1";
  struct Case {
    const char* name;
    int column;  // 0-based column to replace
    const char* value;
    const char* want;  // empty: parses
  };
  const Case cases[] = {
      {"all missing", 1, "", ""},
      {"negative", 2, "-3", ""},
      {"big int", 3, "9223372036854775807", ""},
      {"int overflow", 3, "9223372036854775808", "column 4: I3"},
      {"plus sign", 1, "+4", "column 2: I1"},
      {"space", 1, " 4", "column 2: I1"},
      {"float", 1, "1.5", "column 2: I1"},
      {"lone minus", 1, "-", "column 2: I1"},
      {"hex short", 14, "a", ""},
      {"hex 0x", 14, "0x12", "column 15: C1"},
      {"empty label", 0, "", "column 1: label"},
      {"label 01", 0, "01", "column 1: label"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> row = good;
    row[c.column] = c.value;
    CtrExample e;
    const absl::Status s = ParseCtrTsvRow(absl::StrJoin(row, "\t"), &e);
    if (*c.want == '\0') {
      EXPECT_TRUE(s.ok()) << c.name << ": " << s;
    } else {
      EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.name;
      EXPECT_THAT(s.message(), HasSubstr(c.want)) << c.name;
    }
  }
  CtrExample e;
  ASSERT_TRUE(ParseCtrTsvRow(absl::StrJoin(good, "\t") + "\r", &e).ok());
  EXPECT_EQ(e.ids[25], CtrId(25, kCtrMissingValue));
}

TEST(CtrTsvTest, OpenErrorsNameThePath) {
  absl::StatusOr<std::unique_ptr<CtrTsvReader>> reader =
      CtrTsvReader::Open("/nonexistent/criteo.tsv");
  EXPECT_EQ(reader.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(reader.status().message(), HasSubstr("/nonexistent/criteo.tsv"));
}

TEST(CtrTsvTest, TruncatedGzipIsDataLoss) {
  const std::string gz = TempPath("truncated.tsv.gz");
  {
    gzFile out = gzopen(gz.c_str(), "wb");
    ASSERT_NE(out, nullptr);
    std::string text;
    for (int i = 0; i < 2000; ++i) {
      absl::StrAppend(&text, "1", std::string(39, '\t'), "\n");
    }
    ASSERT_EQ(gzwrite(out, text.data(), text.size()),
              static_cast<int>(text.size()));
    ASSERT_EQ(gzclose(out), Z_OK);
  }
  ASSERT_EQ(truncate(gz.c_str(), 30), 0);
  absl::StatusOr<std::unique_ptr<CtrTsvReader>> reader = CtrTsvReader::Open(gz);
  ASSERT_TRUE(reader.ok());
  CtrExample e;
  absl::Status last;
  for (int i = 0; i < 3000; ++i) {
    absl::StatusOr<bool> got = (*reader)->Next(&e);
    if (!got.ok() || !*got) {
      last = got.status();
      break;
    }
  }
  EXPECT_EQ(last.code(), absl::StatusCode::kDataLoss) << last;
  EXPECT_THAT(last.message(), HasSubstr(gz));
  EXPECT_EQ((*reader)->Next(&e).status().code(), absl::StatusCode::kDataLoss);
}

}  // namespace
}  // namespace ps
