#include "server/sparse/table_rows.h"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "server/sparse/byte_stream.h"
#include "server/sparse/sparse_table.h"
#include "server/sparse/testing/sparse_table_test_util.h"

namespace ps {
namespace {

using sparse_test::CountingSgd;
using sparse_test::MustCreate;
using sparse_test::PullRows;
using sparse_test::PushConst;
using sparse_test::SaveBytes;
using sparse_test::SmallOptions;

// 500 stored rows (admission 2) over 4 stripes, and pending admissions.
std::unique_ptr<SparseTable> Filled() {
  SparseTable::Options o = SmallOptions();
  o.admission_count = 2;
  auto t = MustCreate(o);
  CountingSgd sgd(o.dim);
  std::vector<uint64_t> ids;
  for (uint64_t i = 0; i < 500; ++i) ids.push_back(i * 7919 + 3);
  for (uint64_t step = 0; step < 3; ++step) {
    EXPECT_TRUE(PushConst(*t, ids, 0.125f * (step + 1), step, sgd).ok());
  }
  EXPECT_TRUE(PushConst(*t, {11, 12, 13}, 1.0f, 4, sgd).ok());  // pending
  return t;
}

struct Rows {
  std::vector<size_t> batches;
  std::map<uint64_t, std::vector<float>> by_id;
};

// Feeds `bytes` to a sink in pieces of `piece` bytes.
absl::Status Decode(const std::string& bytes, size_t piece, size_t batch,
                    Rows* rows, uint32_t dim) {
  TableRowsSink sink(batch, [&](absl::Span<const uint64_t> ids,
                                absl::Span<const float> values) {
    rows->batches.push_back(ids.size());
    for (size_t i = 0; i < ids.size(); ++i) {
      rows->by_id[ids[i]].assign(values.begin() + i * dim,
                                 values.begin() + (i + 1) * dim);
    }
    return absl::OkStatus();
  });
  for (size_t at = 0; at < bytes.size(); at += piece) {
    absl::Status st = sink.Write(absl::string_view(bytes).substr(at, piece));
    if (!st.ok()) return st;
  }
  return sink.Finish();
}

TEST(TableRowsSink, RowsEqualTheTableBitForBit) {
  auto t = Filled();
  const std::string bytes = SaveBytes(*t);
  for (size_t piece : {size_t{1}, size_t{13}, size_t{4096}, bytes.size()}) {
    Rows rows;
    ASSERT_TRUE(Decode(bytes, piece, 64, &rows, 4).ok()) << piece;
    ASSERT_EQ(rows.by_id.size(), 500u) << piece;  // pending ids are not rows
    std::vector<uint64_t> ids;
    std::vector<float> values;
    for (const auto& [id, v] : rows.by_id) {
      ids.push_back(id);
      values.insert(values.end(), v.begin(), v.end());
    }
    EXPECT_EQ(values, PullRows(*t, ids)) << piece;
    for (size_t n : rows.batches) EXPECT_LE(n, 64u);
  }
}

TEST(TableRowsSink, StreamingThroughSaveKeepsBatchesBounded) {
  auto t = Filled();
  uint64_t seen = 0;
  TableRowsSink sink(
      100, [&](absl::Span<const uint64_t> ids, absl::Span<const float> values) {
        EXPECT_LE(ids.size(), 100u);
        EXPECT_EQ(values.size(), ids.size() * 4);
        seen += ids.size();
        return absl::OkStatus();
      });
  ASSERT_TRUE(t->Save(sink).ok());
  ASSERT_TRUE(sink.Finish().ok());
  EXPECT_EQ(seen, 500u);
  EXPECT_EQ(sink.rows(), 500u);
  EXPECT_EQ(sink.dim(), 4u);
  EXPECT_EQ(sink.table_name(), "emb");
}

TEST(TableRowsSink, EmptyTable) {
  auto t = MustCreate(SmallOptions());
  Rows rows;
  ASSERT_TRUE(Decode(SaveBytes(*t), 7, 10, &rows, 4).ok());
  EXPECT_TRUE(rows.by_id.empty());
}

TEST(TableRowsSink, EmitErrorStopsTheSave) {
  auto t = Filled();
  TableRowsSink sink(10,
                     [](absl::Span<const uint64_t>, absl::Span<const float>) {
                       return absl::CancelledError("client went away");
                     });
  EXPECT_EQ(t->Save(sink).code(), absl::StatusCode::kCancelled);
}

TEST(TableRowsSink, RefusesStreamsItDoesNotUnderstand) {
  auto t = Filled();
  const std::string bytes = SaveBytes(*t);
  Rows rows;
  std::string bad = bytes;
  bad[0] = 'X';
  EXPECT_EQ(Decode(bad, 4096, 10, &rows, 4).code(),
            absl::StatusCode::kDataLoss);
  bad = bytes;
  bad[8] = 3;  // version 3
  absl::Status st = Decode(bad, 4096, 10, &rows, 4);
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(st.message().find("version 3"), std::string::npos) << st;
  bad = bytes;
  bad[30] ^= 1;  // the name: header CRC
  EXPECT_EQ(Decode(bad, 4096, 10, &rows, 4).code(),
            absl::StatusCode::kDataLoss);
  // Truncated: Finish says so.
  EXPECT_EQ(
      Decode(bytes.substr(0, bytes.size() - 5), 4096, 10, &rows, 4).code(),
      absl::StatusCode::kDataLoss);
  // Trailing bytes.
  EXPECT_EQ(Decode(bytes + "x", 4096, 10, &rows, 4).code(),
            absl::StatusCode::kDataLoss);
}

}  // namespace
}  // namespace ps
