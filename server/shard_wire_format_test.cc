// Shard tests. Wire formats: BF16/FP16 and sparse (top-k) gradients are
// decoded into dense FP32 and aggregated exactly like their dense
// decoding; parameters go out in the job's format, FP32 for a chunk whose
// values do not fit; the stats count wire and dense bytes.
#include <string>
#include <vector>

#include "core/wire_format.h"
#include "gtest/gtest.h"
#include "server/shard.h"
#include "server/testing/shard_test_util.h"

namespace ps {
namespace shard_test {
namespace {

// `dense` as `format`, and sparse on every third element when `sparse`.
ChunkData Encoded(uint32_t chunk, const std::vector<float>& dense,
                  WireFormat format, bool sparse) {
  ChunkData g;
  g.set_chunk_id(chunk);
  std::vector<float> values;
  std::string indices;
  for (uint32_t i = 0; i < dense.size(); ++i) {
    if (sparse && i % 3 != 0) continue;
    values.push_back(dense[i]);
    if (sparse) AppendOffset(i, &indices);
  }
  g.set_format(EncodeValues(format, values, g.mutable_data()));
  g.set_indices(indices);
  return g;
}

// What the shard decodes from `g` (chunk of `n` floats).
std::vector<float> DecodedGradient(const ChunkData& g, uint64_t n) {
  std::vector<float> out(n);
  DecodePayload(g.format(), g.data(), g.indices(), absl::MakeSpan(out));
  return out;
}

TEST(ShardWireFormatTest, EncodedGradientsAggregateLikeTheirDenseDecoding) {
  const RegisterJobRequest reg = Registration("j", Spec(BSP, 2));
  Shard encoded(Options(0)), dense(Options(0));
  RegisterJobResponse resp;
  ASSERT_TRUE(encoded.RegisterJob(reg, &resp).ok());
  ASSERT_TRUE(dense.RegisterJob(reg, &resp).ok());
  const WireFormat formats[] = {BF16, FP16};
  std::vector<std::unique_ptr<PushPullCall>> calls;
  for (uint64_t step = 0; step < 3; ++step) {
    for (uint32_t w = 0; w < 2; ++w) {
      PushPullRequest a, b;
      for (PushPullRequest* r : {&a, &b}) {
        r->set_job_id("j");
        r->set_worker(w);
        r->set_step(step);
      }
      for (uint32_t c : AllChunks()) {
        const uint64_t n = ChunkLength(reg, c);
        const ChunkData g = Encoded(c, Gradient(w, step, c, n), formats[w],
                                    /*sparse=*/(c + w) % 2 == 0);
        *a.add_gradients() = g;
        ChunkData* d = b.add_gradients();
        d->set_chunk_id(c);
        d->set_data(Bytes(DecodedGradient(g, n)));
      }
      calls.push_back(StartPushPull(encoded, a));
      calls.push_back(StartPushPull(dense, b));
    }
    for (auto& call : calls) {
      ASSERT_TRUE(call->done.WaitForNotificationWithTimeout(absl::Seconds(30)));
      ASSERT_TRUE(call->status.ok()) << call->status;
    }
    calls.clear();
  }
  EXPECT_EQ(Checksum(encoded, "j"), Checksum(dense, "j"));
  const JobStats s = StatsOf(encoded, "j");
  EXPECT_EQ(s.dense_bytes_in(), 3u * 2 * 310 * 4);
  // Half the bytes per value; sparse chunks: a third of the values, each
  // with a 4-byte offset.
  EXPECT_LT(s.bytes_in(), s.dense_bytes_in() * 6 / 10);
  EXPECT_DOUBLE_EQ(s.compression_ratio_in(),
                   static_cast<double>(s.dense_bytes_in()) / s.bytes_in());
  EXPECT_DOUBLE_EQ(s.wire_bytes_in_per_step(), s.bytes_in() / 6.0);
  EXPECT_DOUBLE_EQ(s.compression_ratio_out(), 1.0);  // FP32 job
  EXPECT_EQ(s.wire_fallback_chunks(), 0u);
}

TEST(ShardWireFormatTest, ParametersGoInTheJobsFormatOrFp32WhenTheyDoNotFit) {
  JobSpec spec = Spec(ASP, 1);
  spec.mutable_wire()->set_format(FP16);
  // Tensor w (chunks 0-2) starts beyond FP16's range, b (chunk 3) within.
  spec.mutable_tensors(0)->mutable_init()->set_kind(CONSTANT);
  spec.mutable_tensors(0)->mutable_init()->set_value(1e5f);
  const RegisterJobRequest reg = Registration("h", spec);
  Shard shard(Options(0));
  RegisterJobResponse resp;
  ASSERT_TRUE(shard.RegisterJob(reg, &resp).ok());
  auto pull = StartPull(shard, "h", 0, 0);
  ASSERT_TRUE(pull->done.WaitForNotificationWithTimeout(absl::Seconds(30)));
  ASSERT_TRUE(pull->status.ok()) << pull->status;
  ASSERT_EQ(pull->resp.parameters_size(), 4);
  for (int i = 0; i < 3; ++i) {
    const ChunkData& c = pull->resp.parameters(i);
    EXPECT_EQ(c.format(), WIRE_FORMAT_UNSPECIFIED) << i;
    EXPECT_EQ(Floats(c.data()), std::vector<float>(100, 1e5f));
  }
  const ChunkData& b = pull->resp.parameters(3);
  EXPECT_EQ(b.format(), FP16);
  EXPECT_EQ(b.data().size(), 2u * 10);
  const JobStats s = StatsOf(shard, "h");
  EXPECT_EQ(s.wire_fallback_chunks(), 3u);
  EXPECT_EQ(s.bytes_out(), 3u * 400 + 20);
  EXPECT_EQ(s.dense_bytes_out(), 310u * 4);

  // An FP16 gradient is applied as its exact decoding.
  PushPullRequest push;
  push.set_job_id("h");
  *push.add_gradients() =
      Encoded(3, std::vector<float>(10, 0.5f), FP16, /*sparse=*/false);
  auto call = StartPushPull(shard, push);
  ASSERT_TRUE(call->done.WaitForNotificationWithTimeout(absl::Seconds(30)));
  ASSERT_TRUE(call->status.ok()) << call->status;
  EXPECT_EQ(call->resp.parameters(0).format(), FP16);
}

TEST(ShardWireFormatTest, MalformedChunksChangeNothing) {
  const RegisterJobRequest reg = Registration("m", Spec(ASP, 1));
  Shard shard(Options(0));
  RegisterJobResponse resp;
  ASSERT_TRUE(shard.RegisterJob(reg, &resp).ok());
  const uint64_t before = Checksum(shard, "m");
  struct Case {
    std::string name;
    ChunkData chunk;
    std::string reason, mentions;
  };
  ChunkData unknown = Encoded(0, std::vector<float>(100, 1), FP32, false);
  unknown.set_format(static_cast<WireFormat>(6));
  ChunkData descending = Encoded(0, std::vector<float>(100, 1), FP32, true);
  std::string& idx = *descending.mutable_indices();
  std::swap(idx[0], idx[4]);  // offsets 3, 0, 6, ...
  ChunkData short_data = Encoded(0, std::vector<float>(100, 1), BF16, true);
  short_data.mutable_data()->resize(short_data.data().size() - 2);
  const std::vector<Case> cases = {
      {"unknown format", unknown, "bad_format", "gradients[1].format: 6"},
      {"descending", descending, "bad_indices",
       "gradients[1].indices: offset 0 at entry 1 (byte 4)"},
      {"short data", short_data, "wrong_size", "gradients[1].data"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    PushPullRequest push;
    push.set_job_id("m");
    // A valid chunk first: nothing of the request may be applied.
    *push.add_gradients() =
        Encoded(3, std::vector<float>(10, 1), BF16, /*sparse=*/true);
    *push.add_gradients() = c.chunk;
    auto call = StartPushPull(shard, push);
    ASSERT_TRUE(call->done.WaitForNotificationWithTimeout(absl::Seconds(30)));
    EXPECT_EQ(call->status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(call->status.message().find(c.mentions), std::string::npos)
        << call->status;
    EXPECT_EQ(Rejected(StatsOf(shard, "m"), c.reason), 1u);
  }
  EXPECT_EQ(Checksum(shard, "m"), before);
}

}  // namespace
}  // namespace shard_test
}  // namespace ps
