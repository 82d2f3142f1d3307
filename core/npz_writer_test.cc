#include "core/npz_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace ps {
namespace {

uint64_t Le(const std::string& s, size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) {
    v = (v << 8) | static_cast<unsigned char>(s[at + i]);
  }
  return v;
}

TEST(NpzWriterTest, Crc32MatchesTheZipCheckValue) {
  EXPECT_EQ(ZipCrc32("123456789"), 0xCBF43926u);
  EXPECT_EQ(ZipCrc32("6789", ZipCrc32("12345")), 0xCBF43926u);
}

TEST(NpzWriterTest, NpyHeaderIsPaddedAndNamesDtypeAndShape) {
  struct Case {
    std::vector<uint64_t> shape;
    std::string want;
  };
  for (const Case& c : std::vector<Case>{{{}, "'shape': (), }"},
                                         {{3}, "'shape': (3,), }"},
                                         {{2, 3}, "'shape': (2,3), }"}}) {
    std::vector<float> v(c.shape.empty() ? 1 : 6, 1.5f);
    if (c.shape.size() == 1) v.resize(3);
    const std::string npy = EncodeNpy(NpyArray::Float32("x", c.shape, v));
    ASSERT_EQ(npy.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
    const size_t header = Le(npy, 8, 2);
    EXPECT_EQ((10 + header) % 64, 0u);
    const std::string h = npy.substr(10, header);
    EXPECT_NE(h.find("'descr': '<f4'"), std::string::npos) << h;
    EXPECT_NE(h.find(c.want), std::string::npos) << h;
    EXPECT_EQ(h.back(), '\n');
    EXPECT_EQ(npy.size(), 10 + header + v.size() * 4);
  }
}

TEST(NpzWriterTest, ArchiveHasOneStoredEntryPerArray) {
  std::vector<NpyArray> arrays;
  arrays.push_back(NpyArray::Float32("fc1.weight", {2, 2}, {1, 2, 3, 4}));
  arrays.push_back(NpyArray::Bytes("__job_spec__", "{\"name\":\"a\"}"));
  absl::StatusOr<std::string> zip = EncodeNpz(arrays);
  ASSERT_TRUE(zip.ok()) << zip.status();
  // End of central directory: 2 entries; its offset points at a central
  // header whose local header holds the first .npy, CRC included.
  const size_t eocd = zip->size() - 22;
  ASSERT_EQ(Le(*zip, eocd, 4), 0x06054b50u);
  EXPECT_EQ(Le(*zip, eocd + 10, 2), 2u);
  const size_t central = Le(*zip, eocd + 16, 4);
  ASSERT_EQ(Le(*zip, central, 4), 0x02014b50u);
  ASSERT_EQ(Le(*zip, 0, 4), 0x04034b50u);
  const size_t name_bytes = Le(*zip, 26, 2);
  EXPECT_EQ(zip->substr(30, name_bytes), "fc1.weight.npy");
  const std::string npy = EncodeNpy(arrays[0]);
  EXPECT_EQ(zip->substr(30 + name_bytes, npy.size()), npy);
  EXPECT_EQ(Le(*zip, 14, 4), ZipCrc32(npy));
  EXPECT_EQ(Le(*zip, central + 16, 4), ZipCrc32(npy));
}

TEST(NpzWriterTest, RefusesRepeatedOrEmptyNames) {
  std::vector<NpyArray> arrays;
  arrays.push_back(NpyArray::Float32("w", {1}, {1}));
  arrays.push_back(NpyArray::Float32("w", {1}, {2}));
  EXPECT_EQ(EncodeNpz(arrays).status().code(),
            absl::StatusCode::kInvalidArgument);
  arrays.back().name = "";
  EXPECT_EQ(EncodeNpz(arrays).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(NpzWriterTest, WritesAtomicallyAndLeavesNothingOnError) {
  const std::string dir = ::testing::TempDir();
  const std::string path = dir + "/model.npz";
  std::vector<NpyArray> arrays;
  arrays.push_back(NpyArray::Float32("b", {2}, {0.5f, -1}));
  ASSERT_TRUE(WriteNpzFile(path, arrays).ok());
  std::ifstream in(path, std::ios::binary);
  std::stringstream got;
  got << in.rdbuf();
  EXPECT_EQ(got.str(), *EncodeNpz(arrays));

  const std::string bad = dir + "/no/such/dir/model.npz";
  absl::Status st = WriteNpzFile(bad, arrays);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("no/such/dir/model.npz"), std::string::npos)
      << st;
  EXPECT_NE(::access(bad.c_str(), F_OK), 0);
}

}  // namespace
}  // namespace ps
