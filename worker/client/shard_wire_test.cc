// One call's messages against protobuf, without sockets: requests are
// byte-identical to protobuf's, replies in any legal encoding land in the
// right place, and replies that do not match the group are refused.
#include "worker/client/shard_wire.h"

#include <string>
#include <tuple>
#include <vector>

#include "core/wire_format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/ps.pb.h"

namespace ps {
namespace {

using ::testing::HasSubstr;

// The reply bytes cut into slices of `n` bytes.
grpc::ByteBuffer Buffer(const std::string& bytes, size_t n) {
  std::vector<grpc::Slice> slices;
  for (size_t at = 0; at < bytes.size(); at += n) {
    slices.emplace_back(bytes.substr(at, n));
  }
  return grpc::ByteBuffer(slices.data(), slices.size());
}

std::string Bytes(const float* v, size_t n) {
  return std::string(reinterpret_cast<const char*>(v), n * sizeof(float));
}

// Tensor "w" of 7 floats in chunks of 3, 0 (empty), 4; chunks 0 and 2 on
// shard 1, chunk 1 on shard 0.
RequestPlan Plan() {
  Assignment a;
  TensorSpec* t = a.mutable_spec()->add_tensors();
  t->set_name("w");
  t->add_shape(7);
  a.mutable_placement()->set_num_shards(2);
  const uint64_t offsets[] = {0, 3, 3}, lengths[] = {3, 0, 4};
  const uint32_t shards[] = {1, 0, 1};
  for (uint32_t i = 0; i < 3; ++i) {
    ChunkPlacement* c = a.mutable_placement()->add_chunks();
    c->set_chunk_id(i);
    c->set_tensor("w");
    c->set_offset(offsets[i]);
    c->set_length(lengths[i]);
    c->set_shard(shards[i]);
  }
  a.add_shard_addresses("s0");
  a.add_shard_addresses("s1");
  return *RequestPlan::Create(a, RequestPlanOptions());
}

int released = 0;
void Release(void*) { ++released; }

TEST(ShardWireTest, PushAndPullAreByteIdenticalToProtobuf) {
  const RequestPlan plan = Plan();
  const RequestGroup& group = plan.model_groups()[1];  // shard 1: 0, 2
  ASSERT_EQ(group.shard, 1u);
  const std::vector<float> grad = {1, 2, 3, 4, 5, 6, 7};
  const std::vector<uint64_t> versions = {9, 0, 1ull << 35};
  RequestHead head;
  head.job_id = "j";
  head.worker = 2;
  head.step = 300;
  head.attempt = 1;
  head.min_version = 300;
  released = 0;
  int borrowed = 0;
  {
    grpc::ByteBuffer push = EncodePush(head, plan, group, versions, grad.data(),
                                       &Release, nullptr, &borrowed);
    PushPullRequest expected;
    expected.set_job_id("j");
    expected.set_worker(2);
    expected.set_step(300);
    expected.set_attempt(1);
    ChunkData* c = expected.add_gradients();
    c->set_version(9);
    c->set_data(Bytes(grad.data(), 3));
    c = expected.add_gradients();
    c->set_chunk_id(2);
    c->set_version(1ull << 35);
    c->set_data(Bytes(grad.data() + 3, 4));
    EXPECT_EQ(Flatten(push), expected.SerializeAsString());
    EXPECT_EQ(borrowed, 2);
  }
  EXPECT_EQ(released, 2);  // every borrowed slice let go with the buffer
  PullRequest pull;
  pull.set_job_id("j");
  pull.set_worker(2);
  pull.set_step(300);
  pull.set_min_version(300);
  pull.add_chunk_ids(0);
  pull.add_chunk_ids(2);
  EXPECT_EQ(Flatten(EncodePull(head, plan, group)), pull.SerializeAsString());
}

TEST(ShardWireTest, RepliesLandInTheirChunks) {
  const RequestPlan plan = Plan();
  const RequestGroup& group = plan.model_groups()[1];
  const std::vector<float> values = {1, 2, 3, 4, 5, 6, 7};
  PushPullResponse reply;
  ChunkData* c = reply.add_parameters();
  c->set_version(4);
  c->set_data(Bytes(values.data(), 3));
  c = reply.add_parameters();
  c->set_chunk_id(2);
  c->set_version(5);
  c->set_data(Bytes(values.data() + 3, 4));
  reply.set_duplicates(1);
  for (size_t n : {size_t{1}, size_t{5}, size_t{1000}}) {
    std::vector<float> params(7, 0.0f);
    DecodedReply got;
    absl::Status s = DecodeReply(Buffer(reply.SerializeAsString(), n), plan,
                                 group, true, params.data(), &got);
    ASSERT_TRUE(s.ok()) << s;
    EXPECT_EQ(params, values);
    EXPECT_EQ(got.data_bytes, 28u);
    ASSERT_EQ(got.versions.size(), 2u);
    EXPECT_EQ(got.versions[1], std::make_pair(2u, uint64_t{5}));
  }
  // A push's reply carries no chunks.
  PushResponse push_reply;
  push_reply.set_duplicates(3);
  DecodedReply got;
  EXPECT_TRUE(DecodeReply(Buffer(push_reply.SerializeAsString(), 1), plan,
                          group, false, nullptr, &got)
                  .ok());
}

TEST(ShardWireTest, EncodedPushesAreByteIdenticalToProtobuf) {
  const RequestPlan plan = Plan();
  const RequestGroup& group = plan.model_groups()[1];  // shard 1: 0, 2
  const std::vector<uint64_t> versions = {9, 0, 7};
  const std::string bf16("\x80\x3f\x00\x40\x40\x40", 6);  // 1, 2, 3
  const std::string sparse_data("\x00\x3c", 2);           // FP16 1.0
  const std::string sparse_offsets("\x03\0\0\0", 4);      // offset 3
  const std::vector<PushPayload> payloads = {
      {BF16, bf16, ""}, {FP16, sparse_data, sparse_offsets}};
  RequestHead head;
  head.job_id = "j";
  head.step = 4;
  released = 0;
  int borrowed = 0;
  {
    grpc::ByteBuffer push = EncodePush(head, plan, group, versions, nullptr,
                                       &Release, nullptr, &borrowed, payloads);
    PushPullRequest expected;
    expected.set_job_id("j");
    expected.set_step(4);
    ChunkData* c = expected.add_gradients();
    c->set_version(9);
    c->set_data(bf16);
    c->set_format(BF16);
    c = expected.add_gradients();
    c->set_chunk_id(2);
    c->set_version(7);
    c->set_data(sparse_data);
    c->set_format(FP16);
    c->set_indices(sparse_offsets);
    EXPECT_EQ(Flatten(push), expected.SerializeAsString());
    EXPECT_EQ(borrowed, 2);
  }
  EXPECT_EQ(released, 2);
}

TEST(ShardWireTest, NarrowRepliesAreDecodedByTheirOwnFormat) {
  const RequestPlan plan = Plan();
  const RequestGroup& group = plan.model_groups()[1];
  PullResponse reply;
  ChunkData* c = reply.add_parameters();
  c->set_format(FP16);
  c->set_data(std::string("\x00\x3c\x00\xc0\x00\x38", 6));  // 1 -2 .5
  c = reply.add_parameters();
  c->set_chunk_id(2);
  const std::vector<float> fp32 = {70000, 5, 6, 7};  // an FP16 fallback
  c->set_data(Bytes(fp32.data(), 4));
  std::vector<float> params(7, 0.0f);
  DecodedReply got;
  absl::Status s = DecodeReply(Buffer(reply.SerializeAsString(), 3), plan,
                               group, true, params.data(), &got);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(params, (std::vector<float>{1, -2, 0.5f, 70000, 5, 6, 7}));
  EXPECT_EQ(got.data_bytes, 22u);
  EXPECT_EQ(got.dense_bytes, 28u);

  PullResponse bad = reply;
  bad.mutable_parameters(0)->set_format(static_cast<WireFormat>(5));
  PullResponse sparse = reply;
  sparse.mutable_parameters(0)->set_indices(std::string(4, '\0'));
  PullResponse short_bf16 = reply;
  short_bf16.mutable_parameters(0)->set_format(BF16);
  short_bf16.mutable_parameters(0)->mutable_data()->resize(4);
  for (const auto& [name, msg, error] :
       std::vector<std::tuple<std::string, PullResponse, std::string>>{
           {"unknown format", bad, "chunk 0 in format 5"},
           {"sparse parameters", sparse, "in format FP16, sparse"},
           {"short", short_bf16,
            "chunk 0 with 4 bytes; expected chunk 0 with 6 (BF16)"}}) {
    SCOPED_TRACE(name);
    DecodedReply ignored;
    s = DecodeReply(Buffer(msg.SerializeAsString(), 3), plan, group, true,
                    params.data(), &ignored);
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
    EXPECT_THAT(std::string(s.message()), HasSubstr(error));
  }
}

TEST(ShardWireTest, RefusesRepliesThatDoNotMatch) {
  const RequestPlan plan = Plan();
  const RequestGroup& group = plan.model_groups()[1];
  const std::vector<float> values(7, 1.0f);
  PullResponse one;
  one.add_parameters()->set_data(Bytes(values.data(), 3));
  PullResponse wrong = one;
  wrong.mutable_parameters(0)->set_chunk_id(2);
  struct Case {
    std::string name, reply;
    bool has_chunks;
    std::string error;
  };
  const std::vector<Case> cases = {
      {"too few", one.SerializeAsString(), true, "shard 1 returned 1 chunks"},
      {"push with chunks", one.SerializeAsString(), false,
       "more than the 0 chunks"},
      {"wrong chunk", wrong.SerializeAsString(), true,
       "chunk 2 with 12 bytes; expected chunk 0 with 12"},
      {"truncated", one.SerializeAsString().substr(0, 5), true,
       "shard 1 returned a malformed reply: malformed"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    std::vector<float> params(7, 0.0f);
    DecodedReply got;
    absl::Status s = DecodeReply(Buffer(c.reply, 3), plan, group, c.has_chunks,
                                 params.data(), &got);
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
    EXPECT_THAT(std::string(s.message()), HasSubstr(c.error));
  }
}

TEST(ShardWireTest, HeldChunksAreByteIdenticalToProtobuf) {
  const RequestPlan plan = Plan();
  const RequestGroup& group = plan.model_groups()[1];  // shard 1: 0, 2
  const std::vector<float> grad = {1, 2, 3, 4, 5, 6, 7};
  const std::vector<uint64_t> versions = {9, 0, 0};
  const std::vector<uint64_t> bases = {0, kNotHeld};  // holds chunk 0 at v0
  RequestHead head;
  head.job_id = "j";
  head.step = 1;
  int borrowed = 0;
  PushPullRequest push;
  push.set_job_id("j");
  push.set_step(1);
  ChunkData* c = push.add_gradients();
  c->set_version(9);
  c->set_data(Bytes(grad.data(), 3));
  c = push.add_gradients();
  c->set_chunk_id(2);
  c->set_data(Bytes(grad.data() + 3, 4));
  push.add_held()->set_chunk_id(0);  // version 0 stays off the wire
  EXPECT_EQ(Flatten(EncodePush(head, plan, group, versions, grad.data(),
                               &Release, nullptr, &borrowed, {}, bases)),
            push.SerializeAsString());
  PullRequest pull;
  pull.set_job_id("j");
  pull.set_step(1);
  pull.add_chunk_ids(0);
  pull.add_chunk_ids(2);
  HeldChunk* h = pull.add_held();
  h->set_chunk_id(2);
  h->set_version(1ull << 40);
  EXPECT_EQ(Flatten(EncodePull(head, plan, group, {kNotHeld, 1ull << 40})),
            pull.SerializeAsString());
}

// Placement.epoch as PushPullRequest / PullRequest field 7 and PushRequest
// field 6: protobuf's bytes at epoch 3, parsed back by the generated
// messages; at epoch 0 nothing, so the bytes are those of a head without it.
TEST(ShardWireTest, PlacementEpochIsItsFieldAndAbsentAtZero) {
  const RequestPlan plan = Plan();
  const RequestGroup& group = plan.model_groups()[1];  // shard 1: 0, 2
  const std::vector<float> grad = {1, 2, 3, 4, 5, 6, 7};
  const std::vector<uint64_t> versions = {9, 0, 0};
  const std::vector<uint64_t> bases = {kNotHeld, 5};  // holds chunk 2 at v5
  for (uint64_t epoch : {uint64_t{0}, uint64_t{3}}) {
    SCOPED_TRACE(epoch);
    RequestHead head;
    head.job_id = "j";
    head.worker = 1;
    head.step = 8;
    head.min_version = 8;
    head.placement_epoch = epoch;
    RequestHead before = head;  // as encoded before placement epochs
    before.placement_epoch = 0;
    int borrowed = 0;

    PushPullRequest push_pull;
    push_pull.set_job_id("j");
    push_pull.set_worker(1);
    push_pull.set_step(8);
    ChunkData* c = push_pull.add_gradients();
    c->set_version(9);
    c->set_data(Bytes(grad.data(), 3));
    c = push_pull.add_gradients();
    c->set_chunk_id(2);
    c->set_data(Bytes(grad.data() + 3, 4));
    HeldChunk* h = push_pull.add_held();
    h->set_chunk_id(2);
    h->set_version(5);
    push_pull.set_placement_epoch(epoch);
    const std::string got_push_pull =
        Flatten(EncodePush(head, plan, group, versions, grad.data(), &Release,
                           nullptr, &borrowed, {}, bases));
    EXPECT_EQ(got_push_pull, push_pull.SerializeAsString());
    PushPullRequest parsed_push_pull;
    ASSERT_TRUE(parsed_push_pull.ParseFromString(got_push_pull));
    EXPECT_EQ(parsed_push_pull.placement_epoch(), epoch);
    EXPECT_EQ(parsed_push_pull.held_size(), 1);

    head.push_message = PushMessage::kPush;
    before.push_message = PushMessage::kPush;
    PushRequest push;
    push.set_job_id("j");
    push.set_worker(1);
    push.set_step(8);
    *push.mutable_gradients() = push_pull.gradients();
    push.set_placement_epoch(epoch);
    const std::string got_push =
        Flatten(EncodePush(head, plan, group, versions, grad.data(), &Release,
                           nullptr, &borrowed));
    EXPECT_EQ(got_push, push.SerializeAsString());
    PushRequest parsed_push;
    ASSERT_TRUE(parsed_push.ParseFromString(got_push));
    EXPECT_EQ(parsed_push.placement_epoch(), epoch);

    PullRequest pull;
    pull.set_job_id("j");
    pull.set_worker(1);
    pull.set_step(8);
    pull.set_min_version(8);
    pull.add_chunk_ids(0);
    pull.add_chunk_ids(2);
    h = pull.add_held();
    h->set_chunk_id(2);
    h->set_version(5);
    pull.set_placement_epoch(epoch);
    const std::string got_pull = Flatten(EncodePull(head, plan, group, bases));
    EXPECT_EQ(got_pull, pull.SerializeAsString());
    PullRequest parsed_pull;
    ASSERT_TRUE(parsed_pull.ParseFromString(got_pull));
    EXPECT_EQ(parsed_pull.placement_epoch(), epoch);

    const std::string push_before =
        Flatten(EncodePush(before, plan, group, versions, grad.data(), &Release,
                           nullptr, &borrowed));
    const std::string pull_before =
        Flatten(EncodePull(before, plan, group, bases));
    if (epoch == 0) {  // today's bytes, unchanged
      EXPECT_EQ(got_push, push_before);
      EXPECT_EQ(got_pull, pull_before);
    } else {  // two more bytes: the tag and the varint 3
      EXPECT_EQ(got_push.size(), push_before.size() + 2);
      EXPECT_EQ(got_pull.size(), pull_before.size() + 2);
    }
  }
}

// A delta of chunk `id` on `base`: `values` at `offsets`, in `format`.
void AddDelta(PullResponse* r, uint32_t id, uint64_t base,
              const std::vector<uint32_t>& offsets,
              const std::vector<float>& values, WireFormat format = FP32) {
  ChunkData* c = r->add_parameters();
  c->set_chunk_id(id);
  c->set_version(base + 1);
  c->set_base_version(base);
  c->set_format(EncodeValues(format, values, c->mutable_data()));
  for (uint32_t o : offsets) AppendOffset(o, c->mutable_indices());
}

TEST(ShardWireTest, DeltasLandOnTheHeldCopy) {
  const RequestPlan plan = Plan();
  const RequestGroup& group = plan.model_groups()[1];  // chunks 0 (3), 2 (4)
  PullResponse reply;
  AddDelta(&reply, 0, 9, {1}, {42});
  AddDelta(&reply, 2, 0, {0, 3}, {1.5f, -2.0f}, BF16);
  std::vector<float> params = {1, 2, 3, 4, 5, 6, 7};
  DecodedReply got;
  absl::Status s = DecodeReply(Buffer(reply.SerializeAsString(), 2), plan,
                               group, true, params.data(), &got, {9, 0});
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(params, (std::vector<float>{1, 42, 3, 1.5f, 5, 6, -2.0f}));
  EXPECT_EQ(got.deltas, 2u);
  EXPECT_EQ(got.data_bytes, 4u + 4 + 2 * 2 + 2 * 4);  // values + offsets
  EXPECT_EQ(got.versions[1], std::make_pair(2u, uint64_t{1}));
  // Nothing changed: an empty delta.
  PullResponse empty;
  AddDelta(&empty, 0, 10, {}, {});
  AddDelta(&empty, 2, 1, {}, {});
  const std::vector<float> before = params;
  s = DecodeReply(Buffer(empty.SerializeAsString(), 3), plan, group, true,
                  params.data(), &got, {10, 1});
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(params, before);
}

TEST(ShardWireTest, RefusesBadDeltasAndLeavesParamsUntouched) {
  const RequestPlan plan = Plan();
  const RequestGroup& group = plan.model_groups()[1];
  struct Case {
    std::string name;
    PullResponse reply;
    std::vector<uint64_t> bases;
    std::string error;
  };
  std::vector<Case> cases(6);
  cases[0] = {"not asked for", {}, {}, ""};
  AddDelta(&cases[0].reply, 0, 9, {1}, {42});
  cases[0].error =
      "parameters[0].base_version: a delta of chunk 0 on version 9, but this "
      "worker asked for it in full";
  cases[1] = {"another base",
              cases[0].reply,
              {8, kNotHeld},
              "parameters[0].base_version: a delta of chunk 0 on version 9, "
              "but this worker holds version 8"};
  cases[2] = {"offset out of range",
              {},
              {9, kNotHeld},
              "parameters[0].indices: offset 3 at entry 0"};
  AddDelta(&cases[2].reply, 0, 9, {3}, {42});
  cases[3] = {"offsets not ascending",
              {},
              {9, kNotHeld},
              "parameters[0].indices: offset 0 at entry 1"};
  AddDelta(&cases[3].reply, 0, 9, {1, 0}, {42, 43});
  cases[4] = {
      "values and offsets disagree", {}, {9, kNotHeld}, "parameters[0].data"};
  AddDelta(&cases[4].reply, 0, 9, {0, 1}, {42});
  // A good delta first, a bad one after: neither is written.
  cases[5] = {"second chunk bad",
              {},
              {9, 0},
              "parameters[1].indices: offset 4 at entry 0"};
  AddDelta(&cases[5].reply, 0, 9, {1}, {42});
  AddDelta(&cases[5].reply, 2, 0, {4}, {1});
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    std::vector<float> params = {1, 2, 3, 4, 5, 6, 7};
    const std::vector<float> before = params;
    PullResponse reply = c.reply;
    if (reply.parameters_size() == 1) {  // chunk 2 in full
      ChunkData* full = reply.add_parameters();
      full->set_chunk_id(2);
      full->set_data(Bytes(before.data(), 4));
    }
    DecodedReply got;
    absl::Status s = DecodeReply(Buffer(reply.SerializeAsString(), 3), plan,
                                 group, true, params.data(), &got, c.bases);
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
    EXPECT_THAT(std::string(s.message()), HasSubstr(c.error));
    EXPECT_EQ(params, before);
  }
}

}  // namespace
}  // namespace ps
