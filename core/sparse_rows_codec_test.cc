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
      {"", "", ""},                    // every field left off
      {"t", big_ids, ""},              // a pull of ids only
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
    EXPECT_EQ(borrowed, copy_below == 0      ? 6u
                        : copy_below == 4096 ? 4u
                                             : 0u);
  }
}

}  // namespace
}  // namespace ps
