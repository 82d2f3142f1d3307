#include "server/checkpoint.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/chunking.h"
#include "core/float_bytes.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "server/chunk_state.h"
#include "server/optimizer.h"

namespace ps {
namespace {

using ::testing::HasSubstr;

// ---------------------------------------------------------------------------
// Helpers.

// "w" [30, 10] and "b" [10] in chunks of 100 floats; chunk i on shard i % 2.
RegisterJobRequest Registration(const std::string& id, OptimizerKind kind,
                                uint32_t workers) {
  JobSpec s;
  s.set_name("test");
  s.set_num_workers(workers);
  s.set_seed(7);
  s.set_partition_bytes(400);
  s.mutable_optimizer()->set_kind(kind);
  s.mutable_optimizer()->set_learning_rate(0.01f);
  if (kind == SGD) s.mutable_optimizer()->set_momentum(0.9f);
  s.mutable_consistency()->set_mode(BSP);
  s.mutable_checkpoint()->set_every_steps(1);
  TensorSpec* w = s.add_tensors();
  w->set_name("w");
  w->add_shape(30);
  w->add_shape(10);
  TensorSpec* b = s.add_tensors();
  b->set_name("b");
  b->add_shape(10);
  RegisterJobRequest req;
  req.set_job_id(id);
  *req.mutable_spec() = s;
  req.set_num_workers(workers);
  req.mutable_placement()->set_num_shards(2);
  for (ChunkPlacement& c : CutIntoChunks(s)) {
    c.set_shard(c.chunk_id() % 2);
    *req.mutable_placement()->add_chunks() = c;
  }
  return req;
}

// Awkward bit patterns on purpose: a bitwise round trip must keep them.
float Odd(uint64_t i) {
  switch (i % 7) {
    case 0:
      return -0.0f;
    case 1:
      return std::numeric_limits<float>::denorm_min() * static_cast<float>(i);
    case 2: {
      uint32_t bits = 0x7fc00000u | static_cast<uint32_t>(i);  // NaN payload
      float f;
      std::memcpy(&f, &bits, 4);
      return f;
    }
    default:
      return std::ldexp(static_cast<float>(i) - 50.5f,
                        static_cast<int>(i % 40) - 20);
  }
}

// Shard `shard`'s chunks of `reg` with every kind of state filled in: an
// optimizer that has taken steps, a pending BSP gradient of worker 1 and
// ASP next steps.
JobCheckpoint MakeCheckpoint(const RegisterJobRequest& reg, uint32_t shard,
                             uint64_t sequence) {
  auto opt = Optimizer::Create(reg.spec().optimizer());
  EXPECT_TRUE(opt.ok()) << opt.status();
  JobCheckpoint ck;
  ck.shard_id = shard;
  ck.sequence = sequence;
  ck.step = 41;
  ck.registration = reg;
  ck.active.assign(reg.num_workers(), 1);
  ck.active[0] = 0;
  uint64_t k = 0;
  for (const ChunkPlacement& p : reg.placement().chunks()) {
    if (p.shard() != shard) continue;
    ChunkState s = NewChunkState(p, **opt, reg.num_workers());
    s.version = 41 + p.chunk_id();
    for (float& v : s.values) v = Odd(k++);
    // Two applies leave momentum / moments and a step count behind.
    std::vector<float> g(p.length());
    for (float& x : g) x = std::ldexp(static_cast<float>(k++ % 13) - 6, -3);
    std::vector<float> scratch(p.length(), 0.5f);
    (*opt)->Apply(absl::MakeSpan(scratch), g.data(), 0.5f, &s.optimizer);
    (*opt)->Apply(absl::MakeSpan(scratch), g.data(), 0.5f, &s.optimizer);
    s.pushed[1] = 1;
    std::vector<float> pending(p.length());
    for (float& x : pending) x = Odd(k++);
    if (p.chunk_id() % 2 == 0) {
      s.gradients[1].floats.assign(reinterpret_cast<char*>(pending.data()),
                                   pending.size() * sizeof(float));
    } else {
      // Kept as the request's received pieces (a float split between them).
      std::string bytes;
      EncodeFloats(pending, &bytes);
      auto keep = std::make_shared<std::string>("x" + bytes);
      const absl::string_view all = absl::string_view(*keep).substr(1);
      s.gradients[1].received.pieces = {all.substr(0, 6), all.substr(6)};
      s.gradients[1].received.keep = keep;
    }
    for (uint32_t w = 0; w < reg.num_workers(); ++w) {
      s.next_step[w] = 100 * w + p.chunk_id();
    }
    ck.chunks.push_back(std::move(s));
  }
  return ck;
}

// A pending gradient's floats, wherever it lies.
std::vector<float> PendingFloats(const PendingGradient& g) {
  if (g.received.pieces.empty()) {
    const absl::Span<const float> f = AsFloats(g.floats);
    return std::vector<float>(f.begin(), f.end());
  }
  std::vector<float> out(g.received.size() / sizeof(float));
  DecodeFloats(g.received, absl::MakeSpan(out));
  return out;
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() &&
         std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

void ExpectSame(const JobCheckpoint& want, const JobCheckpoint& got) {
  EXPECT_EQ(got.shard_id, want.shard_id);
  EXPECT_EQ(got.sequence, want.sequence);
  EXPECT_EQ(got.step, want.step);
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(
      got.registration, want.registration));
  EXPECT_EQ(got.active, want.active);
  ASSERT_EQ(got.chunks.size(), want.chunks.size());
  for (size_t i = 0; i < want.chunks.size(); ++i) {
    const ChunkState& a = want.chunks[i];
    const ChunkState& b = got.chunks[i];
    EXPECT_EQ(b.placement.chunk_id(), a.placement.chunk_id());
    EXPECT_EQ(b.version, a.version);
    EXPECT_TRUE(SameBits(b.values, a.values)) << "chunk " << i;
    EXPECT_EQ(b.optimizer.steps, a.optimizer.steps);
    ASSERT_EQ(b.optimizer.slots.size(), a.optimizer.slots.size());
    for (size_t k = 0; k < a.optimizer.slots.size(); ++k) {
      EXPECT_TRUE(SameBits(b.optimizer.slots[k], a.optimizer.slots[k]));
    }
    EXPECT_EQ(b.pushed, a.pushed);
    for (size_t w = 0; w < a.pushed.size(); ++w) {
      if (a.pushed[w]) {
        EXPECT_TRUE(SameBits(PendingFloats(b.gradients[w]),
                             PendingFloats(a.gradients[w])))
            << w;
      }
    }
    EXPECT_EQ(b.next_step, a.next_step);
  }
}

std::string TempDir(const std::string& name) {
  const char* base = std::getenv("TEST_TMPDIR");
  std::string dir = absl::StrCat(base != nullptr ? base : "/tmp", "/", name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void WriteAll(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

std::vector<std::string> Listing(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    names.push_back(e.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::unique_ptr<CheckpointStore> OpenStore(const std::string& dir,
                                           uint32_t shard) {
  absl::StatusOr<std::unique_ptr<CheckpointStore>> s =
      CheckpointStore::Open(dir, shard);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *std::move(s) : nullptr;
}

std::string Encoded(const JobCheckpoint& ck) {
  absl::StatusOr<std::string> bytes = EncodeCheckpoint(ck);
  EXPECT_TRUE(bytes.ok()) << bytes.status();
  return bytes.ok() ? *bytes : "";
}

// ---------------------------------------------------------------------------
// CRC32C.

TEST(Crc32cTest, KnownVectors) {
  // RFC 3720 B.4 and the usual check value.
  EXPECT_EQ(Crc32c(""), 0u);
  EXPECT_EQ(Crc32c("123456789"), 0xE3069283u);
  EXPECT_EQ(Crc32c(std::string(32, '\0')), 0x8A9136AAu);
  EXPECT_EQ(Crc32c(std::string(32, '\xff')), 0x62A8AB43u);
  std::string ascending(32, '\0');
  for (int i = 0; i < 32; ++i) ascending[i] = static_cast<char>(i);
  EXPECT_EQ(Crc32c(ascending), 0x46DD794Eu);
}

TEST(Crc32cTest, ContinuesAcrossPieces) {
  std::string data;
  for (int i = 0; i < 1000; ++i) data.push_back(static_cast<char>(i * 31));
  for (size_t cut : {0u, 1u, 7u, 8u, 9u, 500u, 999u, 1000u}) {
    absl::string_view all(data);
    EXPECT_EQ(Crc32c(all.substr(cut), Crc32c(all.substr(0, cut))), Crc32c(all))
        << cut;
  }
}

// ---------------------------------------------------------------------------
// Format.

TEST(CheckpointFormatTest, RoundTripIsBitwise) {
  for (OptimizerKind kind : {SGD, ADAGRAD, ADAM, ADAMW}) {
    for (uint32_t shard : {0u, 1u}) {
      SCOPED_TRACE(absl::StrCat(OptimizerKind_Name(kind), " shard ", shard));
      const JobCheckpoint ck =
          MakeCheckpoint(Registration("job-1", kind, 3), shard, 9);
      ASSERT_EQ(ck.chunks.size(), 2u);
      const std::string bytes = Encoded(ck);
      absl::StatusOr<JobCheckpoint> back = DecodeCheckpoint(bytes);
      ASSERT_TRUE(back.ok()) << back.status();
      ExpectSame(ck, *back);
      EXPECT_EQ(Encoded(*back), bytes) << "re-encoding changed the bytes";
    }
  }
}

// The incremental encoder (what the shard uses) and the one-shot one agree.
TEST(CheckpointFormatTest, EncoderMatchesEncodeCheckpoint) {
  const JobCheckpoint ck = MakeCheckpoint(Registration("j", ADAM, 2), 1, 3);
  auto opt = Optimizer::Create(ck.registration.spec().optimizer());
  ASSERT_TRUE(opt.ok());
  CheckpointEncoder enc(1, ck.registration, ck.active, **opt);
  for (const ChunkState& c : ck.chunks) enc.AddChunk(c);
  EXPECT_EQ(std::move(enc).Finish(3, 41), Encoded(ck));
}

// Every single-bit change anywhere in the file is caught: by the magic,
// the format, the length or the CRC.
TEST(CheckpointFormatTest, EveryFlippedBitIsRejected) {
  const std::string good =
      Encoded(MakeCheckpoint(Registration("j", SGD, 2), 0, 1));
  ASSERT_TRUE(DecodeCheckpoint(good).ok());
  for (size_t at = 0; at < good.size(); ++at) {
    for (unsigned char bit : {0x01, 0x80}) {
      std::string bad = good;
      bad[at] = static_cast<char>(bad[at] ^ bit);
      absl::StatusOr<JobCheckpoint> got = DecodeCheckpoint(bad);
      ASSERT_FALSE(got.ok()) << "flip at byte " << at;
    }
  }
}

TEST(CheckpointFormatTest, EveryTruncationIsRejected) {
  const std::string good =
      Encoded(MakeCheckpoint(Registration("j", SGD, 2), 0, 1));
  for (size_t n = 0; n < good.size(); ++n) {
    absl::StatusOr<JobCheckpoint> got = DecodeCheckpoint(good.substr(0, n));
    ASSERT_FALSE(got.ok()) << n;
    EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss) << n;
    EXPECT_THAT(std::string(got.status().message()), HasSubstr("truncated"))
        << n;
  }
  absl::StatusOr<JobCheckpoint> longer = DecodeCheckpoint(good + "x");
  EXPECT_THAT(std::string(longer.status().message()),
              HasSubstr("trailing bytes"));
}

TEST(CheckpointFormatTest, HeaderErrorsSayWhatIsWrong) {
  const std::string good =
      Encoded(MakeCheckpoint(Registration("j", SGD, 2), 0, 1));
  struct Case {
    size_t at;
    const char* want;
  };
  for (const Case& c :
       std::vector<Case>{{0, "bad magic"},
                         {8, "format version"},
                         {12, "checksum mismatch"},
                         {16, "checksum mismatch"},
                         {24, "checksum mismatch"},
                         {32, "the header promises"},
                         {40, "checksum mismatch"},
                         {good.size() - 1, "checksum mismatch"}}) {
    std::string bad = good;
    bad[c.at] = static_cast<char>(bad[c.at] ^ 0x04);
    absl::StatusOr<JobCheckpoint> got = DecodeCheckpoint(bad);
    ASSERT_FALSE(got.ok());
    EXPECT_THAT(std::string(got.status().message()), HasSubstr(c.want))
        << "byte " << c.at << ": " << got.status();
  }
}

// Well-formed files whose content contradicts the registration (a CRC only
// protects against accidents).
TEST(CheckpointFormatTest, InconsistentContentIsRejected) {
  struct Case {
    const char* name;
    std::function<void(JobCheckpoint&)> mutate;
    const char* want;
  };
  const std::vector<Case> cases = {
      {"ChunkLength", [](JobCheckpoint& ck) { ck.chunks[0].values.pop_back(); },
       "chunks[0].length: 99, the placement says 100"},
      {"MissingChunk", [](JobCheckpoint& ck) { ck.chunks.pop_back(); },
       "1 chunks, the placement puts 2 on shard 0"},
      {"ChunkOfAnotherShard",
       [](JobCheckpoint& ck) { ck.chunks[1].placement.set_chunk_id(1); },
       "chunks[1].chunk_id: 1 is not the next chunk of shard 0"},
      {"OptimizerStateOfAnotherKind",
       [](JobCheckpoint& ck) {
         OptimizerSpec* o = ck.registration.mutable_spec()->mutable_optimizer();
         o->set_kind(ADAM);
         o->set_momentum(0);
       },
       "chunks[0].optimizer state: saved by optimizer kind 1, this is ADAM"},
      {"NoWorkers",
       [](JobCheckpoint& ck) { ck.registration.set_num_workers(0); },
       "registration.num_workers is 0"},
      {"NoJobId", [](JobCheckpoint& ck) { ck.registration.set_job_id(""); },
       "registration.job_id: empty"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    JobCheckpoint ck = MakeCheckpoint(Registration("j", SGD, 2), 0, 1);
    // Encode with the original optimizer, so only the registration changes.
    auto opt = Optimizer::Create(ck.registration.spec().optimizer());
    ASSERT_TRUE(opt.ok());
    c.mutate(ck);
    CheckpointEncoder enc(ck.shard_id, ck.registration, ck.active, **opt);
    for (const ChunkState& s : ck.chunks) enc.AddChunk(s);
    absl::StatusOr<JobCheckpoint> got =
        DecodeCheckpoint(std::move(enc).Finish(1, 1));
    ASSERT_FALSE(got.ok());
    EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(got.status().message()), HasSubstr(c.want));
  }
}

// ---------------------------------------------------------------------------
// Store.

TEST(CheckpointStoreTest, WriteLeavesOnlyTheFinalFile) {
  const std::string dir = TempDir("only_final");
  auto store = OpenStore(dir, 0);
  const JobCheckpoint ck = MakeCheckpoint(Registration("j", SGD, 2), 0, 1);
  absl::StatusOr<std::string> path = store->Write("j", 1, Encoded(ck));
  ASSERT_TRUE(path.ok()) << path.status();
  EXPECT_EQ(*path, dir + "/j.shard0.000000000001.ckpt");
  EXPECT_EQ(Listing(dir),
            std::vector<std::string>{"j.shard0.000000000001.ckpt"});
  absl::StatusOr<JobCheckpoint> back = store->ReadFile(*path);
  ASSERT_TRUE(back.ok()) << back.status();
  ExpectSame(ck, *back);
}

// A write that fails leaves neither a partial file nor a temporary, and the
// previous checkpoint stays the latest.
TEST(CheckpointStoreTest, FailedWriteLeavesNothingBehind) {
  const std::string dir = TempDir("failed_write");
  auto store = OpenStore(dir, 0);
  const std::string one =
      Encoded(MakeCheckpoint(Registration("j", SGD, 2), 0, 1));
  ASSERT_TRUE(store->Write("j", 1, one).ok());
  // Something in the way of the rename: a directory with the target's name.
  std::filesystem::create_directories(store->PathFor("j", 2) + "/blocker");
  JobCheckpoint two = MakeCheckpoint(Registration("j", SGD, 2), 0, 2);
  absl::StatusOr<std::string> failed = store->Write("j", 2, Encoded(two));
  ASSERT_FALSE(failed.ok());
  EXPECT_THAT(std::string(failed.status().message()),
              HasSubstr(store->PathFor("j", 2)));
  std::filesystem::remove_all(store->PathFor("j", 2));
  EXPECT_EQ(Listing(dir),
            std::vector<std::string>{"j.shard0.000000000001.ckpt"});
  absl::StatusOr<CheckpointStore::Loaded> latest = store->LoadLatest("j");
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(latest->checkpoint.sequence, 1u);
}

// A crash in the middle of a write leaves "<file>.tmp": ignored by reads and
// removed when the store opens again (another shard's temporaries stay).
TEST(CheckpointStoreTest, TemporaryFromACrashIsIgnoredAndCleanedUp) {
  const std::string dir = TempDir("crash_temp");
  {
    auto store = OpenStore(dir, 1);
    ASSERT_TRUE(
        store
            ->Write("j", 1,
                    Encoded(MakeCheckpoint(Registration("j", SGD, 2), 1, 1)))
            .ok());
    const std::string partial =
        Encoded(MakeCheckpoint(Registration("j", SGD, 2), 1, 2));
    WriteAll(store->PathFor("j", 2) + ".tmp",
             partial.substr(0, partial.size() / 2));
    WriteAll(dir + "/j.shard0.000000000005.ckpt.tmp", "other shard's");
    absl::StatusOr<CheckpointStore::Loaded> latest = store->LoadLatest("j");
    ASSERT_TRUE(latest.ok()) << latest.status();
    EXPECT_EQ(latest->checkpoint.sequence, 1u);
    EXPECT_TRUE(latest->rejected.empty());
  }
  auto reopened = OpenStore(dir, 1);
  EXPECT_EQ(Listing(dir),
            (std::vector<std::string>{"j.shard0.000000000005.ckpt.tmp",
                                      "j.shard1.000000000001.ckpt"}));
}

TEST(CheckpointStoreTest, KeepsTheNewestTwo) {
  const std::string dir = TempDir("keep_two");
  auto store = OpenStore(dir, 0);
  const RegisterJobRequest reg = Registration("j", SGD, 2);
  for (uint64_t seq = 1; seq <= 5; ++seq) {
    ASSERT_TRUE(
        store->Write("j", seq, Encoded(MakeCheckpoint(reg, 0, seq))).ok());
  }
  EXPECT_EQ(Listing(dir),
            (std::vector<std::string>{"j.shard0.000000000004.ckpt",
                                      "j.shard0.000000000005.ckpt"}));
  absl::StatusOr<CheckpointStore::Loaded> latest = store->LoadLatest("j");
  ASSERT_TRUE(latest.ok());
  EXPECT_EQ(latest->checkpoint.sequence, 5u);
  EXPECT_EQ(latest->path, store->PathFor("j", 5));
}

// A corrupt (one flipped byte) or truncated newest file is rejected naming
// the file, and the previous one is used; with both bad, the error names
// both.
TEST(CheckpointStoreTest, BadNewestFallsBackToThePrevious) {
  struct Case {
    const char* name;
    std::function<std::string(const std::string&)> damage;
    const char* want;
  };
  const std::vector<Case> cases = {
      {"FlippedByte",
       [](const std::string& b) {
         std::string d = b;
         d[d.size() / 2] = static_cast<char>(d[d.size() / 2] ^ 0x10);
         return d;
       },
       "checksum mismatch"},
      {"Truncated",
       [](const std::string& b) { return b.substr(0, b.size() - 9); },
       "truncated"},
      {"Empty", [](const std::string&) { return std::string(); },
       "truncated: 0 bytes"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string dir = TempDir(std::string("fallback_") + c.name);
    auto store = OpenStore(dir, 0);
    const RegisterJobRequest reg = Registration("j", ADAM, 2);
    const JobCheckpoint older = MakeCheckpoint(reg, 0, 1);
    ASSERT_TRUE(store->Write("j", 1, Encoded(older)).ok());
    ASSERT_TRUE(store->Write("j", 2, Encoded(MakeCheckpoint(reg, 0, 2))).ok());
    const std::string newest = store->PathFor("j", 2);
    WriteAll(newest, c.damage(ReadAll(newest)));

    absl::StatusOr<JobCheckpoint> direct = store->ReadFile(newest);
    ASSERT_FALSE(direct.ok());
    EXPECT_THAT(std::string(direct.status().message()),
                HasSubstr(absl::StrCat("checkpoint ", newest, ": ")));
    EXPECT_THAT(std::string(direct.status().message()), HasSubstr(c.want));

    absl::StatusOr<CheckpointStore::Loaded> latest = store->LoadLatest("j");
    ASSERT_TRUE(latest.ok()) << latest.status();
    EXPECT_EQ(latest->path, store->PathFor("j", 1));
    ExpectSame(older, latest->checkpoint);
    ASSERT_EQ(latest->rejected.size(), 1u);
    EXPECT_THAT(std::string(latest->rejected[0].message()), HasSubstr(newest));

    // Both bad: DATA_LOSS naming both files.
    const std::string first = store->PathFor("j", 1);
    WriteAll(first, c.damage(ReadAll(first)));
    absl::StatusOr<CheckpointStore::Loaded> none = store->LoadLatest("j");
    ASSERT_FALSE(none.ok());
    EXPECT_EQ(none.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_THAT(std::string(none.status().message()), HasSubstr(newest));
    EXPECT_THAT(std::string(none.status().message()), HasSubstr(first));
  }
}

// Shards share a directory; odd job ids survive the file names; a file
// moved under another shard's or job's name is refused.
TEST(CheckpointStoreTest, ShardsAndJobsAreKeptApart) {
  const std::string dir = TempDir("apart");
  auto s0 = OpenStore(dir, 0);
  auto s1 = OpenStore(dir, 1);
  const std::string odd = "a.b/c%d \xc3\xa9";
  const RegisterJobRequest reg = Registration(odd, SGD, 2);
  ASSERT_TRUE(s0->Write(odd, 1, Encoded(MakeCheckpoint(reg, 0, 1))).ok());
  ASSERT_TRUE(s1->Write(odd, 1, Encoded(MakeCheckpoint(reg, 1, 1))).ok());
  ASSERT_TRUE(
      s1->Write("other", 1,
                Encoded(MakeCheckpoint(Registration("other", SGD, 2), 1, 1)))
          .ok());
  EXPECT_EQ(*s0->ListJobs(), std::vector<std::string>{odd});
  EXPECT_EQ(*s1->ListJobs(), (std::vector<std::string>{odd, "other"}));
  absl::StatusOr<CheckpointStore::Loaded> l0 = s0->LoadLatest(odd);
  ASSERT_TRUE(l0.ok()) << l0.status();
  EXPECT_EQ(l0->checkpoint.shard_id, 0u);
  EXPECT_EQ(s0->LoadLatest("other").status().code(),
            absl::StatusCode::kNotFound);

  // Shard 1's file under shard 0's name.
  std::filesystem::copy_file(s1->PathFor(odd, 1), s0->PathFor(odd, 2));
  absl::StatusOr<CheckpointStore::Loaded> moved = s0->LoadLatest(odd);
  ASSERT_TRUE(moved.ok());
  EXPECT_EQ(moved->checkpoint.sequence, 1u);
  ASSERT_EQ(moved->rejected.size(), 1u);
  EXPECT_THAT(std::string(moved->rejected[0].message()),
              HasSubstr("written by shard 1, not shard 0"));
  // Job "other"'s file under the odd job's name.
  std::filesystem::copy_file(s1->PathFor("other", 1), s1->PathFor(odd, 2));
  absl::StatusOr<CheckpointStore::Loaded> wrong = s1->LoadLatest(odd);
  ASSERT_TRUE(wrong.ok());
  ASSERT_EQ(wrong->rejected.size(), 1u);
  EXPECT_THAT(std::string(wrong->rejected[0].message()),
              HasSubstr("holds job \"other\""));

  ASSERT_TRUE(s0->Remove(odd).ok());
  EXPECT_TRUE(s0->ListJobs()->empty());
  EXPECT_EQ(*s1->ListJobs(), (std::vector<std::string>{odd, "other"}));
}

TEST(CheckpointStoreTest, OpenRefusesAFile) {
  const std::string dir = TempDir("open_file");
  WriteAll(dir + "/plain", "x");
  absl::StatusOr<std::unique_ptr<CheckpointStore>> s =
      CheckpointStore::Open(dir + "/plain", 0);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.status().message()), HasSubstr("checkpoint_dir: "));
  EXPECT_THAT(std::string(s.status().message()), HasSubstr(dir + "/plain"));
}

// A reader (psctl export) opens a live psd's directory without creating it
// or removing the psd's temporaries, and finds which shards wrote there.
TEST(CheckpointStoreTest, OpenForReadingChangesNothing) {
  const std::string dir = TempDir("for_reading");
  auto s2 = OpenStore(dir, 2);
  ASSERT_TRUE(
      s2->Write("j", 1,
                Encoded(MakeCheckpoint(Registration("j", SGD, 2), 2, 1)))
          .ok());
  WriteAll(dir + "/j.shard2.000000000002.ckpt.tmp", "a write in progress");
  WriteAll(dir + "/j.shard0.000000000001.ckpt", "corrupt, still a shard 0");
  absl::StatusOr<std::unique_ptr<CheckpointStore>> r =
      CheckpointStore::OpenForReading(dir, 2);
  ASSERT_TRUE(r.ok()) << r.status();
  absl::StatusOr<CheckpointStore::Loaded> l = (*r)->LoadLatest("j");
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ(l->checkpoint.shard_id, 2u);
  EXPECT_EQ(Listing(dir),
            (std::vector<std::string>{"j.shard0.000000000001.ckpt",
                                      "j.shard2.000000000001.ckpt",
                                      "j.shard2.000000000002.ckpt.tmp"}));
  EXPECT_EQ(*CheckpointStore::ShardsIn(dir), (std::vector<uint32_t>{0, 2}));

  for (const std::string& bad :
       {dir + "/missing", dir + "/j.shard0.000000000001.ckpt"}) {
    absl::StatusOr<std::unique_ptr<CheckpointStore>> s =
        CheckpointStore::OpenForReading(bad, 0);
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(s.status().message()), HasSubstr(bad));
  }
  EXPECT_FALSE(std::filesystem::exists(dir + "/missing"));
}

}  // namespace
}  // namespace ps
