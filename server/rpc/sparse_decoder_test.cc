#include "server/rpc/sparse_decoder.h"

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "proto/ps.pb.h"
#include "server/rpc/testing/pieces.h"

namespace ps {
namespace {

std::string Bytes(const void* p, size_t n) {
  return std::string(static_cast<const char*>(p), n);
}

SparseExchangeRequest Sample() {
  SparseExchangeRequest req;
  req.set_job_id("job-ü");
  req.set_worker(3);
  req.set_step(41);
  req.set_attempt(2);
  req.set_push(true);
  req.set_part(300);  // two-byte varints
  req.set_parts(1000);
  req.set_table_shard(0);  // optional: present though 0
  req.set_placement_epoch(1ull << 35);
  std::vector<uint64_t> ids = {5, 1ull << 40, 7, 9};
  std::vector<float> grads(ids.size() * 4);
  for (size_t i = 0; i < grads.size(); ++i) grads[i] = 0.25f * i;
  SparseRows* g = req.add_gradients();
  g->set_table("emb");
  g->set_ids(Bytes(ids.data(), ids.size() * 8));
  g->set_values(Bytes(grads.data(), grads.size() * 4));
  SparseRows* p = req.add_pull();
  p->set_table("emb");
  p->set_ids(Bytes(ids.data(), 3 * 8));
  SparseRows* q = req.add_pull();
  q->set_table("other");
  std::vector<uint64_t> many(700);
  for (size_t i = 0; i < many.size(); ++i) many[i] = i * 977;
  q->set_ids(Bytes(many.data(), many.size() * 8));
  return req;
}

// Everything the tables read of a request, as one string.
std::string Fields(const SparseRequestIn& r) {
  std::string out =
      r.job_id + "|" + std::to_string(r.worker) + "|" + std::to_string(r.step) +
      "|" + std::to_string(r.attempt) + "|" + std::to_string(r.push) + "|" +
      std::to_string(r.part) + "/" + std::to_string(r.parts) + "|" +
      std::to_string(r.table_shard) + "|" + std::to_string(r.placement_epoch);
  auto rows = [&](const std::vector<SparseRowsIn>& list, const char* name) {
    for (const SparseRowsIn& x : list) {
      out += std::string("|") + name + ":" + x.table + ":" +
             std::to_string(x.ids_bytes) + ":" +
             std::to_string(x.values_bytes) + ":" +
             Bytes(x.ids.data(), x.ids.size() * 8) + ":" +
             Bytes(x.values.data(), x.values.size() * 4);
    }
  };
  rows(r.gradients, "g");
  rows(r.pull, "p");
  return out;
}

// Decodes `bytes` cut at `cuts` and compares with protobuf's parser.
void ExpectSameAsProtobuf(const std::string& bytes, std::vector<size_t> cuts) {
  Pieces p(bytes, std::move(cuts));
  SparseRequestIn got;
  const absl::Status s = DecodeSparseExchangeRequest(p.views, &got);
  SparseExchangeRequest want;
  const bool ok = want.ParseFromString(bytes);
  ASSERT_EQ(s.ok(), ok) << s;
  if (!ok) {
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    return;
  }
  EXPECT_EQ(Fields(got), Fields(SparseRequestFromProto(want)));
}

TEST(SparseDecoderTest, DecodesLikeProtobufWhereverTheBytesAreCut) {
  const std::string bytes = Sample().SerializeAsString();
  for (size_t step : {1u, 3u, 7u, 13u, 512u, 4001u}) {
    std::vector<size_t> cuts;
    for (size_t c = step; c < bytes.size(); c += step) cuts.push_back(c);
    ExpectSameAsProtobuf(bytes, cuts);
  }
  SparseRequestIn got;
  Pieces p(bytes, {100});
  ASSERT_TRUE(DecodeSparseExchangeRequest(p.views, &got).ok());
  ASSERT_EQ(got.gradients.size(), 1u);
  EXPECT_EQ(got.gradients[0].ids[1], 1ull << 40);
  EXPECT_EQ(got.gradients[0].values[5], 1.25f);
  ASSERT_EQ(got.pull.size(), 2u);
  EXPECT_EQ(got.pull[1].ids[699], 699u * 977);
  EXPECT_EQ(got.part, 300u);
  EXPECT_EQ(got.parts, 1000u);
  EXPECT_EQ(got.table_shard, 0);
  SparseRequestIn unset;
  SparseExchangeRequest plain = Sample();
  plain.clear_table_shard();
  const std::string plain_bytes = plain.SerializeAsString();
  Pieces q(plain_bytes, {});
  ASSERT_TRUE(DecodeSparseExchangeRequest(q.views, &unset).ok());
  EXPECT_EQ(unset.table_shard, -1);
}

TEST(SparseDecoderTest, AcceptsAndRefusesWhatProtobufDoes) {
  const std::string bytes = Sample().SerializeAsString();
  // Every prefix: truncated in a field (refused) or at a field boundary.
  for (size_t n = 0; n <= bytes.size(); n += (n < 200 ? 1 : 97)) {
    const std::string prefix = bytes.substr(0, n);
    ExpectSameAsProtobuf(prefix, {n / 2});
  }
  // Corruptions of single bytes, with a fixed seed; cut where corrupted.
  std::mt19937 rng(2026);
  for (int i = 0; i < 400; ++i) {
    std::string bad = bytes;
    const size_t at = rng() % std::min<size_t>(bad.size(), 200);
    bad[at] = static_cast<char>(rng());
    // Groups (wire types 3 and 4) are refused where protobuf keeps them as
    // unknown fields (the file comment); leave those corruptions out.
    const uint8_t b = static_cast<uint8_t>(bad[at]);
    if ((b & 7) == 3 || (b & 7) == 4) continue;
    ExpectSameAsProtobuf(bad, {at});
  }
}

TEST(SparseDecoderTest, UnknownRepeatedAndMistypedFields) {
  std::string bytes = Sample().SerializeAsString();
  bytes += std::string("\x10\x05", 2);              // worker = 5: last wins
  bytes += std::string("\xa0\x06\x01", 3);          // field 100 varint
  bytes += std::string("\x1d\x01\x02\x03\x04", 5);  // step as fixed32
  bytes += std::string("\x28\x80\x01", 3);          // push = 128: true
  // A pull entry with ids twice (the last wins), a ragged tail of 3 bytes
  // and an unknown field inside.
  std::string rows("\x0a\x01t\x12\x08", 5);
  rows += std::string(8, '\x01');
  rows += std::string("\x12\x0b", 2) + std::string(11, '\x02');
  rows += std::string("\x20\x07", 2);
  bytes += std::string("\x3a", 1) + static_cast<char>(rows.size()) + rows;
  ExpectSameAsProtobuf(bytes, {3, 50});
  SparseRequestIn got;
  Pieces p(bytes, {});
  ASSERT_TRUE(DecodeSparseExchangeRequest(p.views, &got).ok());
  EXPECT_EQ(got.worker, 5u);
  EXPECT_TRUE(got.push);
  ASSERT_EQ(got.pull.size(), 3u);
  EXPECT_EQ(got.pull[2].ids_bytes, 11u);
  ASSERT_EQ(got.pull[2].ids.size(), 1u);
  EXPECT_EQ(got.pull[2].ids[0], 0x0202020202020202ull);
}

TEST(SparseDecoderTest, RefusesStringsThatAreNotUtf8NamingThem) {
  SparseExchangeRequest req;
  req.set_worker(1);
  const std::string base = req.SerializeAsString();
  {
    const std::string bytes = base + std::string("\x0a\x02\xc3\x28", 4);
    SparseRequestIn got;
    const absl::Status s =
        DecodeSparseExchangeRequest(Pieces(bytes, {}).views, &got);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("job_id"), std::string::npos) << s;
  }
  {
    const std::string bytes = base + std::string("\x32\x04\x0a\x02\xc3\x28", 6);
    SparseRequestIn got;
    const absl::Status s =
        DecodeSparseExchangeRequest(Pieces(bytes, {}).views, &got);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("rows.table"), std::string::npos) << s;
  }
}

TEST(SparseDecoderTest, RefusesALengthBeyondTheMessageWithoutAllocating) {
  // A pull entry claiming 2^31 - 1 bytes of ids in a 12-byte message.
  const std::string bytes("\x3a\xff\xff\xff\xff\x07\x12\x00\x00\x00\x00", 11);
  SparseRequestIn got;
  const absl::Status s =
      DecodeSparseExchangeRequest(Pieces(bytes, {}).views, &got);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  SparseExchangeRequest want;
  EXPECT_FALSE(want.ParseFromString(bytes));
}

TEST(SparseDecoderTest, EmptyRequestIsTheEmptyMessage) {
  SparseRequestIn got;
  got.worker = 9;
  ASSERT_TRUE(DecodeSparseExchangeRequest({}, &got).ok());
  EXPECT_EQ(got.worker, 0u);
  EXPECT_TRUE(got.gradients.empty() && got.pull.empty());
}

}  // namespace
}  // namespace ps
