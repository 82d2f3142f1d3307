#include "core/sparse_rows_codec.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "proto/ps.pb.h"

namespace ps {
namespace {

// The pieces and the head, as one string.
std::string Join(const std::vector<WirePiece>& pieces,
                 const std::string& head) {
  std::string out;
  for (const WirePiece& p : pieces) {
    if (p.is_borrowed) {
      out.append(p.borrowed.data(), p.borrowed.size());
    } else {
      out += p.owned;
    }
  }
  return out + head;
}

TEST(SparseRowsCodecTest, ReplyIsByteIdenticalToProtobufAndBorrowsBigFields) {
  const std::string big_ids(8 * 1000, '\x11'), big_values(4 * 16 * 1000, 'v');
  struct Case {
    std::string table, ids, values;
  };
  const std::vector<Case> cases = {
      {"emb", big_ids, big_values},
      {"small", std::string(16, '\x02'), std::string(32, '\x03')},
      {"", "", ""},        // every field left off
      {"t", big_ids, ""},  // a pull of ids only
      {std::string(200, 'n'), "", big_values},
  };
  for (size_t copy_below : {size_t{0}, size_t{4096}, size_t{1} << 30}) {
    SparseExchangeResponse want;
    std::string head;
    std::vector<WirePiece> pieces;
    for (const Case& c : cases) {
      SparseRows* r = want.add_rows();
      r->set_table(c.table);
      r->set_ids(c.ids);
      r->set_values(c.values);
      EncodeSparseRows(kSparseReplyRowsTag, c.table, c.ids, c.values,
                       copy_below, &head, &pieces);
    }
    want.set_version(300);
    want.set_stale(true);
    PutVarintField(kSparseReplyVersionTag, 300, &head);
    PutVarintField(kSparseReplyDuplicateTag, 0, &head);
    PutVarintField(kSparseReplyStaleTag, 1, &head);
    EXPECT_EQ(Join(pieces, head), want.SerializeAsString())
        << "copy_below " << copy_below;
    size_t borrowed = 0;
    for (const WirePiece& p : pieces) borrowed += p.is_borrowed ? 1 : 0;
    EXPECT_EQ(borrowed, copy_below == 0 ? 6u : copy_below == 4096 ? 4u : 0u);
  }
}

TEST(SparseRowsCodecTest, ReplyDecodesInPlaceWhereverTheBytesAreCut) {
  SparseExchangeResponse resp;
  SparseRows* r = resp.add_rows();
  r->set_table("emb");
  r->set_ids(std::string(80, '\x05'));
  r->set_values(std::string(400, '\x06'));
  resp.add_rows()->set_table("empty");
  resp.set_version(7);
  resp.set_duplicate(true);
  const std::string bytes = resp.SerializeAsString();
  for (size_t step : {1u, 5u, 64u, 1000u}) {
    std::vector<std::string> storage;
    for (size_t at = 0; at < bytes.size(); at += step) {
      storage.push_back(bytes.substr(at, step));
    }
    std::vector<absl::string_view> pieces(storage.begin(), storage.end());
    WireReader in(pieces);
    SparseReplyView got;
    ASSERT_TRUE(DecodeSparseReply(&in, &got).ok());
    ASSERT_EQ(got.rows.size(), 2u);
    EXPECT_EQ(got.rows[0].table, "emb");
    EXPECT_EQ(got.rows[1].table, "empty");
    EXPECT_EQ(got.version, 7u);
    EXPECT_TRUE(got.duplicate);
    EXPECT_FALSE(got.stale);
    ASSERT_EQ(got.rows[0].ids_bytes, 80u);
    EXPECT_TRUE(BytesEqual(in, got.rows[0].ids, r->ids()));
    EXPECT_FALSE(BytesEqual(in, got.rows[0].ids, std::string(80, '\x04')));
    std::string values(got.rows[0].values_bytes, '\0');
    in.Seek(got.rows[0].values);
    ASSERT_TRUE(in.Read(values.data(), values.size()));
    EXPECT_EQ(values, r->values());
  }
  // Every truncation inside a field is DataLoss, never a crash.
  for (size_t n = 1; n < bytes.size(); ++n) {
    const std::string cut = bytes.substr(0, n);
    std::vector<absl::string_view> pieces = {cut};
    WireReader in(pieces);
    SparseReplyView got;
    SparseExchangeResponse want;
    const absl::Status s = DecodeSparseReply(&in, &got);
    EXPECT_EQ(s.ok(), want.ParseFromString(cut)) << n << " " << s;
  }
}

}  // namespace
}  // namespace ps
