#include "core/wire_codec.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/ps.pb.h"

namespace ps {
namespace {

using ::testing::HasSubstr;

std::string Join(const std::vector<WirePiece>& pieces,
                 const std::string& tail) {
  std::string out;
  for (const WirePiece& p : pieces) {
    if (p.is_borrowed) {
      out.append(p.borrowed.data(), p.borrowed.size());
    } else {
      out += p.owned;
    }
  }
  return out + tail;
}

// Cuts `bytes` into pieces of `n` bytes (the last shorter).
std::vector<absl::string_view> Cut(const std::string& bytes, size_t n) {
  std::vector<absl::string_view> pieces;
  for (size_t at = 0; at < bytes.size(); at += n) {
    pieces.push_back(absl::string_view(bytes).substr(at, n));
  }
  return pieces;
}

// Decodes field-1 ChunkData lists into a PushPullResponse (parameters).
absl::Status DecodeReply(const std::vector<absl::string_view>& pieces,
                         PushPullResponse* out) {
  WireReader in(pieces);
  return DecodeChunkList(kReplyChunksField, &in, [&](const ChunkDataView& v) {
    ChunkData* c = out->add_parameters();
    c->set_chunk_id(static_cast<uint32_t>(v.chunk_id));
    c->set_version(v.version);
    std::string data(v.data_bytes, '\0');
    CopyChunkData(v, &in, data.data());
    c->set_data(data);
    c->set_format(static_cast<WireFormat>(v.format));
    std::string indices(v.indices_bytes, '\0');
    CopyChunkIndices(v, &in, indices.data());
    c->set_indices(indices);
    if (v.has_base_version) c->set_base_version(v.base_version);
    return absl::OkStatus();
  });
}

PushPullRequest SampleRequest() {
  PushPullRequest r;
  r.set_job_id("job-7");
  r.set_worker(3);
  r.set_step(1ull << 40);
  r.set_attempt(2);
  const std::vector<size_t> sizes = {0, 8, 4096, 12, 70000};
  for (size_t i = 0; i < sizes.size(); ++i) {
    ChunkData* c = r.add_gradients();
    c->set_chunk_id(i == 0 ? 0 : static_cast<uint32_t>(300 * i));
    c->set_version(i % 2 == 0 ? 0 : 1000 + i);
    std::string data(sizes[i], '\0');
    for (size_t k = 0; k < data.size(); ++k) data[k] = static_cast<char>(k);
    c->set_data(data);
    // Chunks in the narrow formats, one of them sparse (the codec does not
    // check the payloads, only carries them).
    if (i == 2) c->set_format(BF16);
    if (i == 3) {
      c->set_format(FP16);
      c->set_indices(std::string("\x01\0\0\0\x05\0\0\0", 8));
      c->set_base_version(999);
    }
    // A delta on version 0: the field has presence, so 0 is on the wire.
    if (i == 1) c->set_base_version(0);
  }
  // Delta pulls: chunks the worker holds (one at version 0).
  HeldChunk* h = r.add_held();
  h->set_chunk_id(300);
  h->set_version(0);
  h = r.add_held();
  h->set_chunk_id(0);
  h->set_version(1ull << 35);
  return r;
}

TEST(WireCodecTest, EncoderIsByteIdenticalToProtobuf) {
  const PushPullRequest r = SampleRequest();
  for (size_t copy_below : {size_t{0}, size_t{16}, size_t{1} << 20}) {
    SCOPED_TRACE(copy_below);
    std::string head;
    PutBytesField(kRequestJobIdTag, r.job_id(), &head);
    PutVarintField(kRequestWorkerTag, r.worker(), &head);
    PutVarintField(kRequestStepTag, r.step(), &head);
    PutVarintField(kRequestAttemptTag, r.attempt(), &head);
    std::vector<ChunkDataRef> chunks;
    for (const ChunkData& c : r.gradients()) {
      std::optional<uint64_t> base;
      if (c.has_base_version()) base = c.base_version();
      chunks.push_back({c.chunk_id(), c.version(), c.data(),
                        static_cast<uint64_t>(c.format()), c.indices(), base});
    }
    std::vector<WirePiece> pieces;
    EncodeChunkList(kRequestGradientsTag, chunks, copy_below, &head, &pieces);
    for (const HeldChunk& h : r.held()) {
      PutHeldChunk(h.chunk_id(), h.version(), &head);
    }
    EXPECT_EQ(Join(pieces, head), r.SerializeAsString());
    size_t borrowed = 0;
    for (const WirePiece& p : pieces) borrowed += p.is_borrowed;
    EXPECT_EQ(borrowed, copy_below == 0 ? 4u : copy_below == 16 ? 2u : 0u);
  }
}

TEST(WireCodecTest, DecoderRoundTripsProtobufInAnyPieces) {
  PushPullResponse expected;
  const PushPullRequest sample = SampleRequest();
  for (const ChunkData& c : sample.gradients()) {
    *expected.add_parameters() = c;
  }
  expected.set_duplicates(5);
  expected.set_stale(1);
  const std::string bytes = expected.SerializeAsString();
  for (size_t n : {size_t{1}, size_t{3}, size_t{4096}, bytes.size()}) {
    SCOPED_TRACE(n);
    PushPullResponse got;
    ASSERT_TRUE(DecodeReply(Cut(bytes, n), &got).ok());
    ASSERT_EQ(got.parameters_size(), expected.parameters_size());
    for (int i = 0; i < got.parameters_size(); ++i) {
      EXPECT_EQ(got.parameters(i).SerializeAsString(),
                expected.parameters(i).SerializeAsString());
    }
  }
}

TEST(WireCodecTest, DecoderReadsGradientsOfARequest) {
  const PushPullRequest r = SampleRequest();
  const std::string bytes = r.SerializeAsString();
  std::vector<absl::string_view> pieces = Cut(bytes, 7);
  WireReader in(pieces);
  int seen = 0;
  ASSERT_TRUE(
      DecodeChunkList(kRequestGradientsField, &in, [&](const ChunkDataView& v) {
        const ChunkData& c = r.gradients(seen++);
        EXPECT_EQ(v.chunk_id, c.chunk_id());
        EXPECT_EQ(v.data_bytes, c.data().size());
        EXPECT_EQ(v.format, static_cast<uint64_t>(c.format()));
        EXPECT_EQ(v.indices_bytes, c.indices().size());
        EXPECT_EQ(v.has_base_version, c.has_base_version());
        EXPECT_EQ(v.base_version, c.base_version());
        return absl::OkStatus();
      }).ok());
  EXPECT_EQ(seen, r.gradients_size());
}

TEST(WireCodecTest, VisitorErrorStopsDecoding) {
  const std::string bytes = SampleRequest().SerializeAsString();
  std::vector<absl::string_view> pieces = {bytes};
  WireReader in(pieces);
  int seen = 0;
  absl::Status s =
      DecodeChunkList(kRequestGradientsField, &in, [&](const ChunkDataView&) {
        ++seen;
        return absl::AbortedError("enough");
      });
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(seen, 1);
}

TEST(WireCodecTest, TruncatedInputIsRejectedOrShort) {
  PushPullResponse full;
  const PushPullRequest sample = SampleRequest();
  for (const ChunkData& c : sample.gradients()) {
    *full.add_parameters() = c;
  }
  const std::string bytes = full.SerializeAsString();
  for (size_t cut = 1; cut < bytes.size(); cut += 97) {
    SCOPED_TRACE(cut);
    PushPullResponse got;
    const std::string prefix = bytes.substr(0, cut);
    absl::Status s = DecodeReply(Cut(prefix, 5), &got);
    if (s.ok()) {
      // Only a cut between two elements leaves a valid (shorter) message.
      EXPECT_LT(got.parameters_size(), full.parameters_size());
    } else {
      EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
      EXPECT_THAT(std::string(s.message()), HasSubstr("malformed"));
      EXPECT_THAT(std::string(s.message()), HasSubstr("at byte"));
    }
  }
}

// A 5-byte tag whose last byte carries bits beyond 32: protobuf keeps the
// low 32 bits (here an unknown varint field, skipped), and so does the
// decoder (the fuzzer found it refusing what protobuf took).
TEST(WireCodecTest, ATagIsReadModulo2To32AsProtobufReadsIt) {
  PushPullResponse expected;
  ChunkData* c = expected.add_parameters();
  c->set_chunk_id(3);
  c->set_version(7);
  std::string bytes = expected.SerializeAsString();
  bytes += std::string("\xb0\x91\x8c\x8f\x40", 5);  // tag 0x40f0308b0
  bytes += std::string("\xff\xff\x40", 3);          // its varint value
  PushPullResponse parsed;
  ASSERT_TRUE(parsed.ParseFromString(bytes));
  PushPullResponse got;
  ASSERT_TRUE(DecodeReply({bytes}, &got).ok());
  EXPECT_EQ(got.parameters_size(), 1);
  EXPECT_EQ(got.parameters(0).version(), 7u);
  // Six bytes are too many for a tag, for both.
  std::string six = expected.SerializeAsString() +
                    std::string("\xb0\x91\x8c\x8f\xc0\x01\x00", 7);
  EXPECT_FALSE(parsed.ParseFromString(six));
  EXPECT_FALSE(DecodeReply({six}, &got).ok());
}

TEST(WireCodecTest, MalformedInputNamesWhatBroke) {
  struct Case {
    std::string name, bytes, error;
  };
  std::string group, overlong(11, '\xff'), overrun;
  group.push_back(static_cast<char>(Tag(5, 3)));
  overrun.push_back(static_cast<char>(kReplyChunksTag));
  overrun.push_back(2);  // a ChunkData of 2 bytes whose field needs 3
  overrun.push_back(static_cast<char>(kChunkVersionTag));
  overrun += "\x80\x01";
  std::string truncated_data;
  PutChunkDataHead(kReplyChunksTag, 1, 0, 8, &truncated_data);
  truncated_data += "abc";
  std::string bad_base;  // base_version's varint cut short
  bad_base.push_back(static_cast<char>(kReplyChunksTag));
  bad_base.push_back(2);
  bad_base.push_back(static_cast<char>(kChunkBaseVersionTag));
  bad_base.push_back('\x80');
  const std::vector<Case> cases = {
      {"truncated base_version", bad_base, "malformed ChunkData.base_version"},
      {"group wire type", group, "malformed message (field) at byte 1"},
      {"over-long varint", overlong, "malformed message (tag)"},
      {"overrun", overrun, "malformed ChunkData (overrun)"},
      {"truncated data", truncated_data, "ChunkData.data (truncated)"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    PushPullResponse got;
    absl::Status s = DecodeReply({c.bytes}, &got);
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
    EXPECT_THAT(std::string(s.message()), HasSubstr(c.error));
  }
}

}  // namespace
}  // namespace ps
