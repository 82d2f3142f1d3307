#include "core/npz_stream_writer.h"

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/npz_reader.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return absl::StrCat(dir != nullptr ? dir : "/tmp", "/", name);
}

std::string Bytes(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4);
}

bool Exists(const std::string& path) {
  return ::access(path.c_str(), F_OK) == 0;
}

// Streams `rows` rows of 3 floats in uneven pieces, plus a whole array.
absl::Status WriteSample(NpzStreamWriter& w, int rows,
                         std::vector<float>* values) {
  values->clear();
  for (int i = 0; i < rows * 3; ++i) values->push_back(0.5f * i - 7.0f);
  absl::Status st = w.Begin("emb/values", "<f4", 4, {3});
  const std::string all = Bytes(*values);
  // Pieces that split rows and floats: only the total must be whole rows.
  for (size_t at = 0; st.ok() && at < all.size(); at += 7) {
    st = w.Append(absl::string_view(all).substr(at, 7));
  }
  if (st.ok()) st = w.End();
  if (st.ok()) st = w.Add(NpyArray::Bytes("__job_spec__", "{\"x\": 1}"));
  if (st.ok()) st = w.Begin("empty/ids", "<u8", 8, {});
  if (st.ok()) st = w.End();
  return st;
}

TEST(NpzStreamWriter, StreamedArraysReadBackExactly) {
  const std::string path = TempPath("stream.npz");
  auto w = NpzStreamWriter::Create(path);
  ASSERT_TRUE(w.ok()) << w.status();
  std::vector<float> values;
  ASSERT_TRUE(WriteSample(**w, 1000, &values).ok());
  EXPECT_FALSE(Exists(path));  // not before Commit
  ASSERT_TRUE((*w)->Commit().ok());
  w->reset();
  absl::StatusOr<std::vector<NpyArray>> arrays = ReadNpzFile(path);
  ASSERT_TRUE(arrays.ok()) << arrays.status();
  ASSERT_EQ(arrays->size(), 3u);
  EXPECT_EQ((*arrays)[0].name, "emb/values");
  EXPECT_EQ((*arrays)[0].descr, "<f4");
  EXPECT_EQ((*arrays)[0].shape, (std::vector<uint64_t>{1000, 3}));
  EXPECT_EQ((*arrays)[0].data, Bytes(values));
  EXPECT_EQ((*arrays)[1].data, "{\"x\": 1}");
  EXPECT_EQ((*arrays)[2].shape, (std::vector<uint64_t>{0}));
  EXPECT_TRUE((*arrays)[2].data.empty());
}

TEST(NpzStreamWriter, RefusesPartialRowsAndLeavesNothing) {
  const std::string path = TempPath("partial.npz");
  {
    auto w = NpzStreamWriter::Create(path);
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE((*w)->Begin("v", "<f4", 4, {2}).ok());
    ASSERT_TRUE((*w)->Append(std::string(12, '\0')).ok());
    absl::Status st = (*w)->End();
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
    EXPECT_NE(st.message().find("not whole rows"), std::string::npos) << st;
    EXPECT_FALSE((*w)->Commit().ok());  // the error sticks
  }
  EXPECT_FALSE(Exists(path));
  EXPECT_FALSE(Exists(absl::StrCat(path, ".tmp.", ::getpid())));
}

TEST(NpzStreamWriter, RefusesRepeatedNamesAndMisuse) {
  auto w = NpzStreamWriter::Create(TempPath("misuse.npz"));
  ASSERT_TRUE(w.ok());
  EXPECT_FALSE((*w)->Append("x").ok());
  EXPECT_FALSE((*w)->End().ok());
  ASSERT_TRUE((*w)->Begin("a", "<f4", 4, {}).ok());
  EXPECT_FALSE((*w)->Begin("b", "<f4", 4, {}).ok());  // one open at a time
  EXPECT_FALSE((*w)->Commit().ok());
  ASSERT_TRUE((*w)->End().ok());
  EXPECT_EQ((*w)->Add(NpyArray::Bytes("a", "x")).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*w)->Begin("", "<f4", 4, {}).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(NpzStreamWriter, UnwritableFolderNamesTheFile) {
  auto w = NpzStreamWriter::Create("/nonexistent-folder/x.npz");
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(w.status().message().find("/nonexistent-folder/x.npz.tmp."),
            std::string::npos);
}

// The zip64 records (used from 4 GiB on) forced on a small file: Python's
// zipfile, which numpy.load uses, must read the arrays back.
TEST(NpzStreamWriter, Zip64RecordsReadByNumpy) {
  if (::access("/usr/bin/python3", X_OK) != 0 ||
      std::system("/usr/bin/python3 -c 'import numpy' 2>/dev/null") != 0) {
    GTEST_SKIP() << "no /usr/bin/python3 with numpy to read the file";
  }
  const std::string path = TempPath("zip64.npz");
  NpzStreamWriter::Options o;
  o.zip64_at = 100;  // the 12,000-byte array and later offsets
  auto w = NpzStreamWriter::Create(path, o);
  ASSERT_TRUE(w.ok());
  std::vector<float> values;
  ASSERT_TRUE(WriteSample(**w, 1000, &values).ok());
  ASSERT_TRUE((*w)->Commit().ok());
  const std::string script = TempPath("check.py");
  std::ofstream(script) << "import numpy, sys\n"
                           "z = numpy.load(sys.argv[1])\n"
                           "v = z['emb/values']\n"
                           "assert v.shape == (1000, 3), v.shape\n"
                           "want = numpy.arange(3000, dtype=numpy.float32)\n"
                           "assert (v.ravel() == 0.5 * want - 7).all()\n"
                           "assert z['__job_spec__'].item() == b'{\"x\": 1}'\n"
                           "assert z['empty/ids'].shape == (0,)\n";
  EXPECT_EQ(
      std::system(absl::StrCat("/usr/bin/python3 ", script, " ", path).c_str()),
      0);
}

}  // namespace
}  // namespace ps
