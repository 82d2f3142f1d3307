#include "worker/client/sparse_wire.h"

#include <string>
#include <vector>

#include "grpcpp/support/slice.h"
#include "gtest/gtest.h"
#include "proto/ps.pb.h"

namespace ps {
namespace {

std::string Flat(const grpc::ByteBuffer& b) {
  std::vector<grpc::Slice> slices;
  EXPECT_TRUE(b.Dump(&slices).ok());
  std::string out;
  for (const grpc::Slice& s : slices) {
    out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  return out;
}

template <typename T>
std::string Bytes(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()),
                     v.size() * sizeof(T));
}

// `bytes` as a ByteBuffer of slices of `step` bytes.
grpc::ByteBuffer Cut(const std::string& bytes, size_t step) {
  std::vector<grpc::Slice> slices;
  for (size_t at = 0; at < bytes.size(); at += step) {
    slices.emplace_back(bytes.substr(at, step));
  }
  return grpc::ByteBuffer(slices.data(), slices.size());
}

TEST(SparseWireTest, RequestIsByteIdenticalToProtobuf) {
  std::vector<SparseRowsOut> grads(2), pulls(1);
  grads[0].table = "emb";
  for (uint64_t i = 0; i < 900; ++i) grads[0].ids.push_back(i * 7);
  grads[0].values.assign(900 * 4, 0.5f);
  grads[1].table = "small";
  grads[1].ids = {3};
  grads[1].values = {1, 2};
  pulls[0].table = "emb";
  pulls[0].ids = grads[0].ids;
  SparseRequestHead head;
  head.job_id = "job";
  head.worker = 2;
  head.step = 1ull << 40;
  head.attempt = 3;
  head.push = true;
  SparseExchangeRequest want;
  want.set_job_id("job");
  want.set_worker(2);
  want.set_step(1ull << 40);
  want.set_attempt(3);
  want.set_push(true);
  for (const SparseRowsOut& g : grads) {
    SparseRows* r = want.add_gradients();
    r->set_table(g.table);
    r->set_ids(Bytes(g.ids));
    r->set_values(Bytes(g.values));
  }
  SparseRows* p = want.add_pull();
  p->set_table("emb");
  p->set_ids(Bytes(pulls[0].ids));
  EXPECT_EQ(Flat(EncodeSparseRequest(head, grads, pulls)),
            want.SerializeAsString());
  // The same through borrowed views.
  std::vector<SparseRowsRef> grad_refs;
  for (const SparseRowsOut& g : grads) {
    grad_refs.push_back({g.table, g.ids, g.values});
  }
  const SparseRowsRef pull_ref{"emb", pulls[0].ids, {}};
  EXPECT_EQ(Flat(EncodeSparseRequest(head, grad_refs, {&pull_ref, 1})),
            want.SerializeAsString());
  // A part of a split step: part and parts follow the rows.
  head.part = 2;
  head.parts = 300;
  want.set_part(2);
  want.set_parts(300);
  EXPECT_EQ(Flat(EncodeSparseRequest(head, grad_refs, {&pull_ref, 1})),
            want.SerializeAsString());
  // The rows' shard (replicated jobs): written even when 0, last.
  for (uint32_t shard : {0u, 5u}) {
    head.table_shard = shard;
    want.set_table_shard(shard);
    EXPECT_EQ(Flat(EncodeSparseRequest(head, grad_refs, {&pull_ref, 1})),
              want.SerializeAsString());
  }
  // The placement epoch the rows were routed by: after it (0: left off).
  head.placement_epoch = 300;
  want.set_placement_epoch(300);
  EXPECT_EQ(Flat(EncodeSparseRequest(head, grad_refs, {&pull_ref, 1})),
            want.SerializeAsString());
  EXPECT_EQ(Flat(EncodeSparseRequest({}, absl::Span<const SparseRowsRef>(),
                                     absl::Span<const SparseRowsRef>())),
            "");
}

TEST(SparseWireTest, ReplyRowsGoWhereAskedFromAnyCut) {
  std::vector<SparseRowsOut> pulls(2);
  pulls[0].table = "a";
  pulls[0].ids = {5, 6, 7};
  pulls[1].table = "b";
  pulls[1].ids = {9};
  const std::vector<size_t> dims = {2, 3};
  SparseExchangeResponse resp;
  resp.set_version(12);
  resp.set_stale(true);
  std::vector<float> a = {1, 2, 3, 4, 5, 6}, b = {7, 8, 9};
  SparseRows* r = resp.add_rows();
  r->set_table("a");
  r->set_ids(Bytes(pulls[0].ids));
  r->set_values(Bytes(a));
  r = resp.add_rows();
  r->set_table("b");
  r->set_ids(Bytes(pulls[1].ids));
  r->set_values(Bytes(b));
  const std::string bytes = resp.SerializeAsString();
  for (size_t step : {1u, 3u, 1000u}) {
    // Rows in reverse order, to show the destinations are the caller's.
    std::vector<float> out_a(6, 0), out_b(3, 0);
    SparseReplyInfo info;
    ASSERT_TRUE(ReadSparseReply(
                    Cut(bytes, step), pulls, dims,
                    [&](size_t j, size_t i) {
                      return j == 0 ? out_a.data() + (2 - i) * 2 : out_b.data();
                    },
                    &info)
                    .ok());
    EXPECT_EQ(out_a, (std::vector<float>{5, 6, 3, 4, 1, 2}));
    EXPECT_EQ(out_b, b);
    EXPECT_EQ(info.version, 12u);
    EXPECT_TRUE(info.stale);
    EXPECT_FALSE(info.duplicate);
    EXPECT_EQ(info.bytes, bytes.size());
  }
}

TEST(SparseWireTest, AReplyThatDoesNotAnswerThePullCopiesNothing) {
  std::vector<SparseRowsOut> pulls(2);
  pulls[0].table = "a";
  pulls[0].ids = {5};
  pulls[1].table = "b";
  pulls[1].ids = {9};
  const std::vector<size_t> dims = {1, 1};
  SparseExchangeResponse resp;
  std::vector<float> one = {1};
  SparseRows* r = resp.add_rows();
  r->set_table("a");
  r->set_ids(Bytes(pulls[0].ids));
  r->set_values(Bytes(one));
  r = resp.add_rows();
  r->set_table("b");
  r->set_ids(Bytes(pulls[0].ids));  // the wrong id
  r->set_values(Bytes(one));
  float a = 0, b = 0;
  SparseReplyInfo info;
  const absl::Status s = ReadSparseReply(
      Cut(resp.SerializeAsString(), 7), pulls, dims,
      [&](size_t j, size_t) { return j == 0 ? &a : &b; }, &info);
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_NE(s.message().find("rows[1]"), std::string::npos) << s;
  EXPECT_EQ(a, 0.0f);
  const std::string cut = resp.SerializeAsString().substr(0, 9);
  EXPECT_EQ(ReadSparseReply(
                Cut(cut, 4), pulls, dims,
                [&](size_t j, size_t) { return j == 0 ? &a : &b; }, &info)
                .code(),
            absl::StatusCode::kInternal);
}

}  // namespace
}  // namespace ps
