#include "worker/data/idx.h"

#include <zlib.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

using ::testing::HasSubstr;

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return absl::StrCat(dir != nullptr ? dir : "/tmp", "/", name);
}

void WriteFile(const std::string& path, const std::vector<uint8_t>& bytes) {
  FILE* f = std::fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr) << path;
  ASSERT_EQ(std::fwrite(bytes.data(), 1, bytes.size(), f), bytes.size());
  ASSERT_EQ(std::fclose(f), 0);
}

void PutBigEndian(std::vector<uint8_t>* out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out->push_back(v >> shift);
}

// An idx file: magic, dims, then `data_bytes` bytes 0, 1, 2, ...
std::vector<uint8_t> Idx(uint32_t magic, const std::vector<uint32_t>& dims,
                         size_t data_bytes) {
  std::vector<uint8_t> out;
  PutBigEndian(&out, magic);
  for (uint32_t d : dims) PutBigEndian(&out, d);
  for (size_t i = 0; i < data_bytes; ++i) out.push_back(i % 251);
  return out;
}

std::vector<uint8_t> Gzip(const std::vector<uint8_t>& in) {
  z_stream zs = {};
  EXPECT_EQ(
      deflateInit2(&zs, 6, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY),
      Z_OK);
  std::vector<uint8_t> out(deflateBound(&zs, in.size()) + 64);
  zs.next_in = const_cast<Bytef*>(in.data());
  zs.avail_in = in.size();
  zs.next_out = out.data();
  zs.avail_out = out.size();
  EXPECT_EQ(deflate(&zs, Z_FINISH), Z_STREAM_END);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

TEST(ReadIdxImagesTest, ReadsPlainAndGzippedAlike) {
  const std::vector<uint8_t> file = Idx(0x803, {3, 4, 5}, 60);
  const std::string plain = TempPath("images-plain");
  // The name has no .gz on purpose: gzip is detected from the content.
  const std::string gz = TempPath("images-gz");
  WriteFile(plain, file);
  WriteFile(gz, Gzip(file));
  for (const std::string& path : {plain, gz}) {
    absl::StatusOr<IdxImages> images = ReadIdxImages(path);
    ASSERT_TRUE(images.ok()) << images.status();
    EXPECT_EQ(images->count, 3u);
    EXPECT_EQ(images->rows, 4u);
    EXPECT_EQ(images->cols, 5u);
    ASSERT_EQ(images->pixels.size(), 60u);
    for (size_t i = 0; i < 60; ++i) EXPECT_EQ(images->pixels[i], i % 251);
  }
}

TEST(ReadIdxLabelsTest, ReadsLabels) {
  const std::string path = TempPath("labels");
  WriteFile(path, Gzip(Idx(0x801, {7}, 7)));
  absl::StatusOr<std::vector<uint8_t>> labels = ReadIdxLabels(path);
  ASSERT_TRUE(labels.ok()) << labels.status();
  EXPECT_EQ(*labels, (std::vector<uint8_t>{0, 1, 2, 3, 4, 5, 6}));
}

TEST(ReadIdxImagesTest, ZeroImagesIsAnEmptySet) {
  const std::string path = TempPath("empty-images");
  WriteFile(path, Idx(0x803, {0, 28, 28}, 0));
  absl::StatusOr<IdxImages> images = ReadIdxImages(path);
  ASSERT_TRUE(images.ok()) << images.status();
  EXPECT_EQ(images->count, 0u);
}

TEST(ReadMaybeGzippedTest, ReadsConcatenatedMembers) {
  const std::vector<uint8_t> a = {1, 2, 3}, b = {4, 5};
  std::vector<uint8_t> file = Gzip(a);
  const std::vector<uint8_t> gb = Gzip(b);
  file.insert(file.end(), gb.begin(), gb.end());
  const std::string path = TempPath("two-members");
  WriteFile(path, file);
  absl::StatusOr<std::vector<uint8_t>> bytes = ReadMaybeGzipped(path);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_EQ(*bytes, (std::vector<uint8_t>{1, 2, 3, 4, 5}));
}

struct BadFileCase {
  std::string name;
  std::vector<uint8_t> bytes;
  bool labels;  // read with ReadIdxLabels instead of ReadIdxImages
  absl::StatusCode code;
  std::string message;
};

std::vector<BadFileCase> BadFiles() {
  const std::vector<uint8_t> good = Idx(0x803, {10, 28, 28}, 7840);
  const std::vector<uint8_t> gz = Gzip(good);
  std::vector<uint8_t> truncated_gz(gz.begin(), gz.begin() + gz.size() / 2);
  std::vector<uint8_t> corrupt_gz = gz;
  // Inside the deflate data (the gzip header is 10 bytes).
  for (size_t i = 20; i < 40; ++i) corrupt_gz[i] ^= 0xa5;
  std::vector<uint8_t> bad_crc = gz;
  bad_crc[bad_crc.size() - 6] ^= 0xff;  // the CRC32 in the trailer
  std::vector<uint8_t> garbage_after = gz;
  garbage_after.push_back(0x42);
  std::vector<uint8_t> short_data = good;
  short_data.resize(short_data.size() - 1);
  std::vector<uint8_t> long_data = good;
  long_data.push_back(0);
  return {
      {"empty", {}, false, absl::StatusCode::kDataLoss, "shorter than"},
      {"short_header",
       {0, 0, 8, 3, 0, 0},
       false,
       absl::StatusCode::kDataLoss,
       "shorter than"},
      {"bad_magic", Idx(0x12345678, {10, 28, 28}, 7840), false,
       absl::StatusCode::kDataLoss, "bad magic"},
      {"float_type", Idx(0xd03, {10, 28, 28}, 7840 * 4), false,
       absl::StatusCode::kDataLoss, "bad magic"},
      {"labels_as_images", Idx(0x801, {10}, 10), false,
       absl::StatusCode::kDataLoss, "bad magic"},
      {"images_as_labels", good, true, absl::StatusCode::kDataLoss,
       "bad magic"},
      {"zero_rows", Idx(0x803, {10, 0, 28}, 0), false,
       absl::StatusCode::kDataLoss, "dimension 1 is zero"},
      {"huge_dims", Idx(0x803, {0xffffffff, 0xffffffff, 0xffffffff}, 8), false,
       absl::StatusCode::kDataLoss, "overflow"},
      {"short_data", short_data, false, absl::StatusCode::kDataLoss,
       "truncated"},
      {"trailing_data", long_data, false, absl::StatusCode::kDataLoss,
       "trailing bytes"},
      {"short_labels", Idx(0x801, {10}, 9), true, absl::StatusCode::kDataLoss,
       "truncated"},
      {"truncated_gz", truncated_gz, false, absl::StatusCode::kDataLoss,
       "truncated gzip"},
      {"gz_header_only", std::vector<uint8_t>(gz.begin(), gz.begin() + 10),
       false, absl::StatusCode::kDataLoss, "truncated gzip"},
      {"corrupt_gz", corrupt_gz, false, absl::StatusCode::kDataLoss,
       "corrupt gzip"},
      {"bad_crc", bad_crc, false, absl::StatusCode::kDataLoss, "corrupt gzip"},
      {"garbage_after_gz", garbage_after, false, absl::StatusCode::kDataLoss,
       "garbage after"},
  };
}

class BadFileTest : public ::testing::TestWithParam<BadFileCase> {};

TEST_P(BadFileTest, FailsNamingTheFile) {
  const BadFileCase& c = GetParam();
  const std::string path = TempPath(c.name);
  WriteFile(path, c.bytes);
  const absl::Status status =
      c.labels ? ReadIdxLabels(path).status() : ReadIdxImages(path).status();
  EXPECT_EQ(status.code(), c.code) << status;
  EXPECT_THAT(status.message(), HasSubstr(path));
  EXPECT_THAT(status.message(), HasSubstr(c.message));
}

INSTANTIATE_TEST_SUITE_P(All, BadFileTest, ::testing::ValuesIn(BadFiles()),
                         [](const auto& info) { return info.param.name; });

TEST(ReadIdxImagesTest, MissingFileIsNotFound) {
  const std::string path = TempPath("does-not-exist");
  const absl::Status status = ReadIdxImages(path).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound) << status;
  EXPECT_THAT(status.message(), HasSubstr(path));
}

}  // namespace
}  // namespace ps
