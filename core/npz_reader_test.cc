#include "core/npz_reader.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

using ::testing::HasSubstr;

// numpy.savez(f, w=numpy.arange(6, dtype=numpy.float32).reshape(2, 3)),
// numpy 1.24: a zip64 extra field in the local header, sizes in both.
const std::string& NumpyFile() {
  static const std::string* bytes = new std::string(
      "\x50\x4b\x03\x04\x14\x00\x00\x00\x00\x00\x00\x00\x21\x00\x4f\xe9"
      "\x00\x2a\x98\x00\x00\x00\x98\x00\x00\x00\x05\x00\x14\x00\x77\x2e"
      "\x6e\x70\x79\x01\x00\x10\x00\x98\x00\x00\x00\x00\x00\x00\x00\x98"
      "\x00\x00\x00\x00\x00\x00\x00\x93\x4e\x55\x4d\x50\x59\x01\x00\x76"
      "\x00\x7b\x27\x64\x65\x73\x63\x72\x27\x3a\x20\x27\x3c\x66\x34\x27"
      "\x2c\x20\x27\x66\x6f\x72\x74\x72\x61\x6e\x5f\x6f\x72\x64\x65\x72"
      "\x27\x3a\x20\x46\x61\x6c\x73\x65\x2c\x20\x27\x73\x68\x61\x70\x65"
      "\x27\x3a\x20\x28\x32\x2c\x20\x33\x29\x2c\x20\x7d\x20\x20\x20\x20"
      "\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20"
      "\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20"
      "\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20"
      "\x20\x20\x20\x20\x20\x20\x0a\x00\x00\x00\x00\x00\x00\x80\x3f\x00"
      "\x00\x00\x40\x00\x00\x40\x40\x00\x00\x80\x40\x00\x00\xa0\x40\x50"
      "\x4b\x01\x02\x14\x03\x14\x00\x00\x00\x00\x00\x00\x00\x21\x00\x4f"
      "\xe9\x00\x2a\x98\x00\x00\x00\x98\x00\x00\x00\x05\x00\x00\x00\x00"
      "\x00\x00\x00\x00\x00\x00\x00\x80\x01\x00\x00\x00\x00\x77\x2e\x6e"
      "\x70\x79\x50\x4b\x05\x06\x00\x00\x00\x00\x01\x00\x01\x00\x33\x00"
      "\x00\x00\xcf\x00\x00\x00\x00\x00"

      ,
      280);
  return *bytes;
}

google::protobuf::RepeatedPtrField<TensorSpec> Tensors(
    std::vector<std::pair<std::string, std::vector<uint64_t>>> specs) {
  google::protobuf::RepeatedPtrField<TensorSpec> out;
  for (auto& [name, shape] : specs) {
    TensorSpec* t = out.Add();
    t->set_name(name);
    for (uint64_t d : shape) t->add_shape(d);
  }
  return out;
}

std::string Written() {
  std::vector<NpyArray> arrays;
  arrays.push_back(NpyArray::Float32("fc0/w", {2, 3}, {1, 2, 3, 4, 5, 6}));
  arrays.push_back(NpyArray::Float32("fc0/b", {3}, {-1, 0, 1}));
  arrays.push_back(NpyArray::Bytes("__job_spec__", "{}"));
  return *EncodeNpz(arrays);
}

TEST(NpzReaderTest, ReadsWhatTheWriterWrites) {
  absl::StatusOr<std::vector<NpyArray>> arrays = DecodeNpz(Written());
  ASSERT_TRUE(arrays.ok()) << arrays.status();
  ASSERT_EQ(arrays->size(), 3u);
  absl::StatusOr<NpzTensors> t =
      MatchTensors(*arrays, Tensors({{"fc0/b", {3}}, {"fc0/w", {2, 3}}}), "f");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_THAT(t->at("fc0/w"), ::testing::ElementsAre(1, 2, 3, 4, 5, 6));
  EXPECT_THAT(t->at("fc0/b"), ::testing::ElementsAre(-1, 0, 1));
}

TEST(NpzReaderTest, ReadsWhatNumpyWrites) {
  absl::StatusOr<std::vector<NpyArray>> arrays = DecodeNpz(NumpyFile());
  ASSERT_TRUE(arrays.ok()) << arrays.status();
  absl::StatusOr<NpzTensors> t =
      MatchTensors(*arrays, Tensors({{"w", {2, 3}}}), "f");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_THAT(t->at("w"), ::testing::ElementsAre(0, 1, 2, 3, 4, 5));
}

TEST(NpzReaderTest, RefusesMissingTensorsAndOtherShapesNamingThem) {
  const std::vector<NpyArray> arrays = *DecodeNpz(Written());
  struct Case {
    std::vector<std::pair<std::string, std::vector<uint64_t>>> tensors;
    std::string error;
  };
  const std::vector<Case> cases = {
      {{{"fc1/w", {2, 3}}}, "tensor \"fc1/w\" (shape [2, 3]) is not in m.npz"},
      {{{"fc0/w", {3, 2}}},
       "tensor \"fc0/w\": shape [3, 2] in the job, [2, 3] in m.npz"},
      {{{"fc0/b", {3, 1}}}, "tensor \"fc0/b\": shape [3, 1] in the job"},
      {{{"__job_spec__", {}}}, "dtype '|S2' in m.npz"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<NpzTensors> t =
        MatchTensors(arrays, Tensors(c.tensors), "m.npz");
    EXPECT_TRUE(absl::IsInvalidArgument(t.status())) << c.error;
    EXPECT_THAT(t.status().message(), HasSubstr(c.error));
  }
}

TEST(NpzReaderTest, EveryTruncationIsRefused) {
  for (const std::string& file : {Written(), NumpyFile()}) {
    for (size_t n = 0; n < file.size(); ++n) {
      EXPECT_FALSE(DecodeNpz(absl::string_view(file).substr(0, n)).ok()) << n;
    }
  }
}

TEST(NpzReaderTest, EveryFlippedByteIsRefusedOrHarmless) {
  // A flip in the data fails the CRC; one in a header fails a check or
  // lands in a field the reader ignores. Never a crash.
  const std::string good = Written();
  int refused = 0;
  for (size_t i = 0; i < good.size(); ++i) {
    std::string bad = good;
    bad[i] ^= 0x5A;
    if (!DecodeNpz(bad).ok()) ++refused;
  }
  EXPECT_GT(refused, static_cast<int>(good.size()) / 2);
  std::string bad = good;
  bad[good.find("\x93NUMPY") + 130] ^= 1;  // in fc0/w's data
  EXPECT_THAT(DecodeNpz(bad).status().message(), HasSubstr("CRC-32 mismatch"));
}

TEST(NpzReaderTest, RefusesCompressedEntriesAndOtherFiles) {
  std::string deflated = Written();
  deflated[8] = 8;  // local header: method deflate
  const size_t central = deflated.find("PK\x01\x02");
  deflated[central + 10] = 8;
  EXPECT_THAT(DecodeNpz(deflated).status().message(),
              HasSubstr("compressed (numpy.savez_compressed)"));
  EXPECT_THAT(DecodeNpz("just some text, not a zip at all").status().message(),
              HasSubstr("not a zip file"));
  EXPECT_THAT(ReadNpzFile("/nonexistent/m.npz").status().message(),
              HasSubstr("/nonexistent/m.npz: cannot open"));
}

}  // namespace
}  // namespace ps
