#include "server/rpc/push_decoder.h"

#include <algorithm>
#include <deque>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "server/rpc/testing/pieces.h"

namespace ps {
namespace {

PushPullRequest Sample() {
  PushPullRequest req;
  req.set_job_id("job-ü");
  req.set_worker(3);
  req.set_step(41);
  req.set_attempt(2);
  req.set_placement_epoch(5);
  ChunkData* dense = req.add_gradients();
  dense->set_chunk_id(7);
  dense->set_version(40);
  std::string floats;
  for (int i = 0; i < 1000; ++i) floats.append(reinterpret_cast<char*>(&i), 4);
  dense->set_data(floats);
  ChunkData* narrow = req.add_gradients();
  narrow->set_chunk_id(9);
  narrow->set_format(BF16);
  narrow->set_data(std::string(300, '\x3f'));
  ChunkData* sparse = req.add_gradients();
  sparse->set_chunk_id(11);
  sparse->set_data(std::string(40, '\x01'));
  sparse->set_indices(std::string(40, '\x02'));
  HeldChunk* held = req.add_held();
  held->set_chunk_id(7);
  held->set_version(39);
  return req;
}

struct Decoded {
  absl::Status status;
  PushPullRequest header;
  GradientsIn gradients;
  std::deque<std::string> owned;
};

std::unique_ptr<Decoded> Decode(const Pieces& p,
                                std::shared_ptr<const void> keep = nullptr) {
  auto d = std::make_unique<Decoded>();
  d->status = DecodePushPullRequest(p.views, keep, &d->header, &d->gradients,
                                    &d->owned);
  return d;
}

// A request's known fields but its gradients (protobuf also keeps unknown
// fields, which the decoder skips).
std::string Fields(const PushPullRequest& r) {
  std::string out = r.job_id() + "|" + std::to_string(r.worker()) + "|" +
                    std::to_string(r.step()) + "|" +
                    std::to_string(r.attempt()) + "|" +
                    std::to_string(r.placement_epoch());
  for (const HeldChunk& h : r.held()) {
    out +=
        "|" + std::to_string(h.chunk_id()) + ":" + std::to_string(h.version());
  }
  return out;
}

// What protobuf's parser makes of the same bytes, as the decoder's output.
void ExpectSameAsProtobuf(const std::string& bytes, const Decoded& d) {
  PushPullRequest want;
  const bool ok = want.ParseFromString(bytes);
  ASSERT_EQ(d.status.ok(), ok) << d.status;
  if (!ok) return;
  ASSERT_EQ(static_cast<int>(d.gradients.size()), want.gradients_size());
  for (int i = 0; i < want.gradients_size(); ++i) {
    const ChunkData& w = want.gradients(i);
    const GradientIn& g = d.gradients[static_cast<size_t>(i)];
    EXPECT_EQ(g.chunk_id, w.chunk_id());
    EXPECT_EQ(g.version, w.version());
    EXPECT_EQ(g.format, static_cast<int>(w.format()));
    EXPECT_EQ(g.data.Flatten(), w.data());
    EXPECT_EQ(g.indices, w.indices());
    EXPECT_EQ(g.has_base_version, w.has_base_version());
    if (!g.plain()) {
      EXPECT_LE(g.data.pieces.size(), 1u);
    }
  }
  EXPECT_EQ(Fields(d.header), Fields(want));
  EXPECT_EQ(d.header.gradients_size(), 0);
}

TEST(PushDecoderTest, DecodesLikeProtobufWhereverTheBytesAreCut) {
  const std::string bytes = Sample().SerializeAsString();
  auto keep = std::make_shared<int>(0);
  for (size_t step : {1u, 7u, 13u, 512u, 4001u}) {
    std::vector<size_t> cuts;
    for (size_t c = step; c < bytes.size(); c += step) cuts.push_back(c);
    Pieces p(bytes, cuts);
    std::unique_ptr<Decoded> d = Decode(p, keep);
    ExpectSameAsProtobuf(bytes, *d);
    // The dense payload stays in the pieces (no copy) and shares the keep.
    const GradientIn& dense = d->gradients[0];
    EXPECT_TRUE(dense.plain());
    EXPECT_EQ(dense.data.keep, keep);
    EXPECT_GE(dense.data.pieces.size(), std::max<size_t>(1, 4000 / step))
        << "cut every " << step;
    EXPECT_LE(dense.data.pieces.size(), 4000 / step + 2)
        << "cut every " << step;
  }
}

TEST(PushDecoderTest, AcceptsAndRefusesWhatProtobufDoes) {
  const std::string bytes = Sample().SerializeAsString();
  // Every prefix: truncated in a field (refused) or at a field boundary.
  for (size_t n = 0; n <= bytes.size(); n += (n < 64 ? 1 : 97)) {
    const std::string prefix = bytes.substr(0, n);
    ExpectSameAsProtobuf(prefix, *Decode(Pieces(prefix, {n / 2})));
  }
  // Corruptions of single bytes, with a fixed seed.
  std::mt19937 rng(2026);
  for (int i = 0; i < 400; ++i) {
    std::string bad = bytes;
    const size_t at = rng() % std::min<size_t>(bad.size(), 80);
    bad[at] = static_cast<char>(rng());
    ExpectSameAsProtobuf(bad, *Decode(Pieces(bad, {at})));
  }
  // Unknown fields, a repeated scalar (the last wins), a known field with
  // another wire type.
  std::string extra = bytes;
  extra += std::string("\x10\x05", 2);              // worker = 5
  extra += std::string("\xa0\x06\x01", 3);          // field 100 varint
  extra += std::string("\x1d\x01\x02\x03\x04", 5);  // step as fixed32
  ExpectSameAsProtobuf(extra, *Decode(Pieces(extra, {5, 9})));
}

TEST(PushDecoderTest, RefusesAJobIdThatIsNotUtf8) {
  PushPullRequest req;
  req.set_worker(1);
  std::string bytes = req.SerializeAsString();
  bytes += std::string("\x0a\x02\xc3\x28", 4);  // job_id = invalid UTF-8
  std::unique_ptr<Decoded> d = Decode(Pieces(bytes, {}));
  EXPECT_EQ(d->status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(d->status.message().find("job_id"), std::string::npos) << d->status;
}

TEST(PushDecoderTest, EmptyRequestIsTheEmptyMessage) {
  std::unique_ptr<Decoded> d = Decode(Pieces("", {}));
  ASSERT_TRUE(d->status.ok()) << d->status;
  EXPECT_TRUE(d->gradients.empty());
  EXPECT_EQ(d->header.ByteSizeLong(), 0u);
}

}  // namespace
}  // namespace ps
