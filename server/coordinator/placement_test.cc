#include "server/coordinator/placement.h"

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/coordinator/job_validation.h"

namespace ps {
namespace {

using ::testing::HasSubstr;

// The MLP 784-256-128-10 with the given partition size, tensors derived.
JobSpec MlpSpec(uint64_t partition_bytes) {
  JobSpec spec;
  Mlp* mlp = spec.mutable_model()->mutable_mlp();
  mlp->set_input_dim(784);
  mlp->add_hidden(256);
  mlp->add_hidden(128);
  mlp->set_num_classes(10);
  spec.set_partition_bytes(partition_bytes);
  for (TensorSpec& t : ModelTensors(spec.model())) {
    *spec.add_tensors() = std::move(t);
  }
  return spec;
}

std::vector<uint64_t> BytesPerShard(const Placement& p) {
  std::vector<uint64_t> bytes(p.num_shards(), 0);
  for (const ChunkPlacement& c : p.chunks()) bytes[c.shard()] += c.length() * 4;
  return bytes;
}

TEST(CutTensorsIntoChunksTest, CutsInSpecOrderWithShortLastChunk) {
  JobSpec spec;
  spec.set_partition_bytes(40);  // 10 elements
  TensorSpec* a = spec.add_tensors();
  a->set_name("a");
  a->add_shape(5);
  a->add_shape(5);  // 25 elements -> 10, 10, 5
  TensorSpec* b = spec.add_tensors();
  b->set_name("b");
  b->add_shape(10);  // exactly one chunk
  absl::StatusOr<std::vector<ChunkPlacement>> chunks =
      CutTensorsIntoChunks(spec);
  ASSERT_TRUE(chunks.ok()) << chunks.status();
  struct Want {
    std::string tensor;
    uint32_t index;
    uint64_t offset, length;
  };
  const std::vector<Want> want = {
      {"a", 0, 0, 10}, {"a", 1, 10, 10}, {"a", 2, 20, 5}, {"b", 0, 0, 10}};
  ASSERT_EQ(chunks->size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    const ChunkPlacement& c = (*chunks)[i];
    EXPECT_EQ(c.chunk_id(), i);
    EXPECT_EQ(c.tensor(), want[i].tensor);
    EXPECT_EQ(c.index(), want[i].index);
    EXPECT_EQ(c.offset(), want[i].offset);
    EXPECT_EQ(c.length(), want[i].length);
  }
}

TEST(CutTensorsIntoChunksTest, RejectsBadSpecsNamingTheField) {
  struct Case {
    std::string label;
    JobSpec spec;
    std::string message;
  };
  std::vector<Case> cases;
  {
    JobSpec s = MlpSpec(2);
    cases.push_back(
        {"tiny partition", s, "partition_bytes: must be a multiple of 4"});
  }
  {
    JobSpec s = MlpSpec(4096);
    s.clear_tensors();
    cases.push_back({"no tensors", s, "tensors: empty"});
  }
  {
    JobSpec s = MlpSpec(4096);
    s.mutable_tensors(1)->clear_name();
    cases.push_back({"unnamed", s, "tensors[1].name: must not be empty"});
  }
  {
    JobSpec s = MlpSpec(4096);
    s.mutable_tensors(2)->set_name("fc0/w");
    cases.push_back({"duplicate", s, "tensors[2].name: \"fc0/w\" also"});
  }
  {
    JobSpec s = MlpSpec(4096);
    s.mutable_tensors(3)->set_shape(0, 0);
    cases.push_back({"empty shape", s, "tensors[3].shape[0]: must be > 0"});
  }
  {
    JobSpec s = MlpSpec(4096);
    s.mutable_tensors(0)->add_shape(uint64_t{1} << 60);
    cases.push_back({"overflow", s, "tensors[0].shape: too many elements"});
  }
  {
    JobSpec s = MlpSpec(4);  // 235146 one-element chunks
    cases.push_back({"too many chunks", s, "partition_bytes: more than 65536"});
  }
  for (const Case& c : cases) {
    absl::StatusOr<std::vector<ChunkPlacement>> chunks =
        CutTensorsIntoChunks(c.spec);
    EXPECT_EQ(chunks.status().code(), absl::StatusCode::kInvalidArgument)
        << c.label;
    EXPECT_THAT(chunks.status().message(), HasSubstr(c.message)) << c.label;
  }
}

TEST(PlaceChunksTest, RejectsZeroShards) {
  absl::StatusOr<Placement> p = PlaceChunks(MlpSpec(65536), 0);
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(p.status().message(), HasSubstr("num_shards"));
}

TEST(PlaceChunksTest, IsDeterministic) {
  for (uint32_t shards : {1u, 2u, 3u, 4u, 7u}) {
    absl::StatusOr<Placement> a = PlaceChunks(MlpSpec(65536), shards);
    absl::StatusOr<Placement> b = PlaceChunks(MlpSpec(65536), shards);
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_EQ(a->SerializeAsString(), b->SerializeAsString()) << shards;
  }
}

TEST(PlaceChunksTest, CoversEveryElementExactlyOnce) {
  const JobSpec spec = MlpSpec(65536);
  absl::StatusOr<Placement> p = PlaceChunks(spec, 3);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->num_shards(), 3u);
  std::map<std::string, std::vector<int>> hits;
  for (const TensorSpec& t : spec.tensors()) {
    uint64_t n = 1;
    for (uint64_t d : t.shape()) n *= d;
    hits[t.name()].assign(n, 0);
  }
  for (int i = 0; i < p->chunks_size(); ++i) {
    const ChunkPlacement& c = p->chunks(i);
    EXPECT_EQ(c.chunk_id(), static_cast<uint32_t>(i));
    EXPECT_LT(c.shard(), 3u);
    EXPECT_GT(c.length(), 0u);
    EXPECT_LE(c.length() * 4, spec.partition_bytes());
    std::vector<int>& h = hits.at(c.tensor());
    ASSERT_LE(c.offset() + c.length(), h.size());
    for (uint64_t e = c.offset(); e < c.offset() + c.length(); ++e) ++h[e];
  }
  for (const auto& [name, h] : hits) {
    EXPECT_TRUE(std::all_of(h.begin(), h.end(), [](int n) { return n == 1; }))
        << name;
  }
}

TEST(PlaceChunksTest, KeepsChunkIdsInTensorOrder) {
  absl::StatusOr<Placement> p = PlaceChunks(MlpSpec(65536), 4);
  ASSERT_TRUE(p.ok());
  // fc0/w: 200704 elements = 12 full chunks of 16384 + 4096.
  ASSERT_EQ(p->chunks_size(), 14 + 5);
  for (int i = 0; i < 13; ++i) {
    EXPECT_EQ(p->chunks(i).tensor(), "fc0/w");
    EXPECT_EQ(p->chunks(i).index(), static_cast<uint32_t>(i));
  }
  EXPECT_EQ(p->chunks(12).length(), 4096u);
  EXPECT_EQ(p->chunks(13).tensor(), "fc0/b");
  EXPECT_EQ(p->chunks(14).tensor(), "fc1/w");
  EXPECT_EQ(p->chunks(18).tensor(), "fc2/b");
}

TEST(PlaceChunksTest, BalancesBytesAcrossShards) {
  const JobSpec spec = MlpSpec(65536);
  for (uint32_t shards : {2u, 3u, 4u}) {
    absl::StatusOr<Placement> p = PlaceChunks(spec, shards);
    ASSERT_TRUE(p.ok()) << p.status();
    std::vector<uint64_t> bytes = BytesPerShard(*p);
    const uint64_t max = *std::max_element(bytes.begin(), bytes.end());
    const uint64_t min = *std::min_element(bytes.begin(), bytes.end());
    // The greedy's guarantee: loads differ by at most the largest chunk.
    EXPECT_LE(max - min, spec.partition_bytes()) << shards << " shards";
    // For this model that keeps every shard within 30% of the fullest.
    EXPECT_LT(static_cast<double>(max) / min, 1.3) << shards << " shards";
  }
}

TEST(PlaceChunksTest, LargestFirstOntoLeastLoadedLowestIdOnTies) {
  // Chunk lengths 3, 1, 3, 2 (elements): largest first, ties by chunk id.
  JobSpec spec;
  spec.set_partition_bytes(12);
  for (auto [name, n] : std::vector<std::pair<std::string, uint64_t>>{
           {"a", 3}, {"b", 1}, {"c", 3}, {"d", 2}}) {
    TensorSpec* t = spec.add_tensors();
    t->set_name(name);
    t->add_shape(n);
  }
  absl::StatusOr<Placement> p = PlaceChunks(spec, 2);
  ASSERT_TRUE(p.ok()) << p.status();
  // a(3) -> 0; c(3) -> 1; d(2) -> 0 (tie 12/12 bytes); b(1) -> 1 (12 < 20).
  EXPECT_EQ(p->chunks(0).shard(), 0u);
  EXPECT_EQ(p->chunks(2).shard(), 1u);
  EXPECT_EQ(p->chunks(3).shard(), 0u);
  EXPECT_EQ(p->chunks(1).shard(), 1u);
}

TEST(PlaceChunksTest, OneShardHoldsEverything) {
  absl::StatusOr<Placement> p = PlaceChunks(MlpSpec(4096), 1);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->num_shards(), 1u);
  uint64_t bytes = 0;
  for (const ChunkPlacement& c : p->chunks()) {
    EXPECT_EQ(c.shard(), 0u);
    EXPECT_LE(c.length() * 4, 4096u);
    bytes += c.length() * 4;
  }
  EXPECT_EQ(bytes, 4u * (784 * 256 + 256 + 256 * 128 + 128 + 128 * 10 + 10));
}

TEST(PlaceChunksTest, MoreShardsThanChunksLeavesSomeEmpty) {
  JobSpec spec = MlpSpec(1 << 20);  // 6 chunks, one per tensor
  absl::StatusOr<Placement> p = PlaceChunks(spec, 16);
  ASSERT_TRUE(p.ok()) << p.status();
  std::vector<uint64_t> bytes = BytesPerShard(*p);
  // Every chunk alone on its shard, on the lowest ids.
  for (uint32_t s = 0; s < 16; ++s) {
    EXPECT_EQ(bytes[s] > 0, s < static_cast<uint32_t>(p->chunks_size())) << s;
  }
}

TEST(PlaceChunksTest, ReplicasFollowTheRingAndStayBalanced) {
  JobSpec spec = MlpSpec(65536);
  absl::StatusOr<Placement> one = PlaceChunks(spec, 3);
  ASSERT_TRUE(one.ok()) << one.status();
  for (uint32_t k : {2u, 3u}) {
    spec.set_replication(k);
    absl::StatusOr<Placement> p = PlaceChunks(spec, 3);
    ASSERT_TRUE(p.ok()) << p.status();
    std::vector<uint64_t> held(3, 0);
    for (int i = 0; i < p->chunks_size(); ++i) {
      const ChunkPlacement& c = p->chunks(i);
      // Primaries exactly as without replicas (k = 1 is today's placement).
      EXPECT_EQ(c.shard(), one->chunks(i).shard());
      ASSERT_EQ(c.backups_size(), static_cast<int>(k - 1));
      held[c.shard()] += c.length() * 4;
      for (int j = 0; j < c.backups_size(); ++j) {
        EXPECT_EQ(c.backups(j), (c.shard() + j + 1) % 3);
        held[c.backups(j)] += c.length() * 4;
      }
    }
    const uint64_t max = *std::max_element(held.begin(), held.end());
    const uint64_t min = *std::min_element(held.begin(), held.end());
    // Each shard: its primaries plus k - 1 predecessors', each within one
    // chunk of the mean.
    EXPECT_LE(max - min, k * spec.partition_bytes()) << k;
  }
  EXPECT_EQ(one->chunks(0).backups_size(), 0);
}

TEST(PlaceChunksTest, RefusesMoreCopiesThanShards) {
  JobSpec spec = MlpSpec(65536);
  spec.set_replication(3);
  absl::StatusOr<Placement> p = PlaceChunks(spec, 2);
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(p.status().message(), HasSubstr("replication"));
}

// Chunks whose shard differs between `a` and `b`.
int Moved(const Placement& a, const Placement& b) {
  int moved = 0;
  for (int i = 0; i < a.chunks_size(); ++i) {
    moved += a.chunks(i).shard() != b.chunks(i).shard();
  }
  return moved;
}

uint64_t LargestChunkBytes(const Placement& p) {
  uint64_t largest = 0;
  for (const ChunkPlacement& c : p.chunks()) {
    largest = std::max<uint64_t>(largest, c.length() * 4);
  }
  return largest;
}

TEST(PlaceChunksTest, UsesOnlyTheFirstSpecShards) {
  JobSpec spec = MlpSpec(16 * 1024);
  spec.set_shards(2);
  absl::StatusOr<Placement> p = PlaceChunks(spec, 3);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->num_shards(), 3u);
  EXPECT_EQ(BytesPerShard(*p)[2], 0u);
  spec.set_shards(4);
  EXPECT_THAT(PlaceChunks(spec, 3).status().message(),
              HasSubstr("shards: 4, but the cluster has 3"));
}

TEST(RePlaceChunksTest, GrowingMovesFewChunksAndBalances) {
  JobSpec spec = MlpSpec(16 * 1024);
  spec.set_shards(2);
  absl::StatusOr<Placement> two = PlaceChunks(spec, 3);
  ASSERT_TRUE(two.ok()) << two.status();
  absl::StatusOr<Placement> three = RePlaceChunks(*two, 3);
  ASSERT_TRUE(three.ok()) << three.status();
  EXPECT_EQ(three->epoch(), 1u);
  const std::vector<uint64_t> bytes = BytesPerShard(*three);
  const auto [lo, hi] = std::minmax_element(bytes.begin(), bytes.end());
  EXPECT_LE(*hi - *lo, LargestChunkBytes(*three));
  // What the new shard takes moves (about a third of the bytes), and at
  // most a few chunks more to even out the others.
  uint64_t total = 0;
  for (uint64_t b : bytes) total += b;
  const int taken =
      std::count_if(three->chunks().begin(), three->chunks().end(),
                    [](const ChunkPlacement& c) { return c.shard() == 2; });
  EXPECT_GE(Moved(*two, *three), taken);
  EXPECT_LE(Moved(*two, *three), taken + 2);
  EXPECT_LE(bytes[2], total / 3 + LargestChunkBytes(*three));
  // Placed again over the same shards, nothing moves.
  absl::StatusOr<Placement> again = RePlaceChunks(*three, 3);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(Moved(*three, *again), 0);
  EXPECT_EQ(again->epoch(), 2u);
}

TEST(RePlaceChunksTest, ShrinkingMovesOnlyTheLeavingShardsChunks) {
  JobSpec spec = MlpSpec(16 * 1024);
  absl::StatusOr<Placement> three = PlaceChunks(spec, 3);
  ASSERT_TRUE(three.ok());
  absl::StatusOr<Placement> two = RePlaceChunks(*three, 2);
  ASSERT_TRUE(two.ok()) << two.status();
  const std::vector<uint64_t> bytes = BytesPerShard(*two);
  EXPECT_EQ(bytes[2], 0u);
  EXPECT_LE(std::max(bytes[0], bytes[1]) - std::min(bytes[0], bytes[1]),
            LargestChunkBytes(*two));
  int on_two = 0;
  for (const ChunkPlacement& c : three->chunks()) on_two += c.shard() == 2;
  // The leaving shard's chunks move, and at most a few more to rebalance.
  EXPECT_GE(Moved(*three, *two), on_two);
  EXPECT_LE(Moved(*three, *two), on_two + 2);
}

TEST(RePlaceChunksTest, RefusesBadShardCountsAndReplicas) {
  JobSpec spec = MlpSpec(16 * 1024);
  absl::StatusOr<Placement> p = PlaceChunks(spec, 3);
  ASSERT_TRUE(p.ok());
  EXPECT_THAT(RePlaceChunks(*p, 0).status().message(), HasSubstr("shards: 0"));
  EXPECT_THAT(RePlaceChunks(*p, 4).status().message(), HasSubstr("shards: 4"));
  spec.set_replication(3);
  p = PlaceChunks(spec, 3);
  ASSERT_TRUE(p.ok());
  // Three copies on two shards.
  EXPECT_THAT(RePlaceChunks(*p, 2).status().message(),
              HasSubstr("replication: 3 copies need 3 shards, got 2"));
  Placement uneven = *p;
  uneven.mutable_chunks(1)->clear_backups();
  EXPECT_THAT(RePlaceChunks(uneven, 3).status().message(),
              HasSubstr("placement.chunks[1].backups"));
}

// Bytes of the copies (primary and backups) each shard holds.
std::vector<uint64_t> CopyBytesPerShard(const Placement& p) {
  std::vector<uint64_t> bytes(p.num_shards(), 0);
  for (const ChunkPlacement& c : p.chunks()) {
    bytes[c.shard()] += c.length() * 4;
    for (uint32_t b : c.backups()) bytes[b] += c.length() * 4;
  }
  return bytes;
}

// Bytes of the copies `b` places on a shard that held no copy of that
// chunk in `a`: what a re-placement fetches.
uint64_t FetchedBytes(const Placement& a, const Placement& b) {
  uint64_t fetched = 0;
  for (int i = 0; i < b.chunks_size(); ++i) {
    std::vector<uint32_t> had = {a.chunks(i).shard()};
    had.insert(had.end(), a.chunks(i).backups().begin(),
               a.chunks(i).backups().end());
    std::vector<uint32_t> has = {b.chunks(i).shard()};
    has.insert(has.end(), b.chunks(i).backups().begin(),
               b.chunks(i).backups().end());
    for (uint32_t s : has) {
      if (std::find(had.begin(), had.end(), s) == had.end()) {
        fetched += b.chunks(i).length() * 4;
      }
    }
  }
  return fetched;
}

struct ReplicatedMove {
  uint32_t k, from, to;
};

// Grows and shrinks k = 2 and 3 jobs on the first shards of a 4-shard
// cluster: the ring over the new shards, balanced, and few copies fetched.
TEST(RePlaceChunksTest, ReplicatedKeepsTheRingBalancedAndFetchesFew) {
  for (const ReplicatedMove& m : std::vector<ReplicatedMove>{
           {2, 2, 3}, {2, 3, 2}, {2, 2, 4}, {2, 4, 3}, {3, 3, 4}, {3, 4, 3}}) {
    SCOPED_TRACE(::testing::Message()
                 << "k " << m.k << ", " << m.from << " -> " << m.to);
    JobSpec spec = MlpSpec(16 * 1024);
    spec.set_replication(m.k);
    spec.set_shards(m.from);
    absl::StatusOr<Placement> a = PlaceChunks(spec, 4);
    ASSERT_TRUE(a.ok()) << a.status();
    absl::StatusOr<Placement> b = RePlaceChunks(*a, m.to);
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_EQ(b->epoch(), 1u);
    const uint64_t largest = LargestChunkBytes(*b);
    for (const ChunkPlacement& c : b->chunks()) {
      ASSERT_LT(c.shard(), m.to);
      ASSERT_EQ(c.backups_size(), static_cast<int>(m.k - 1));
      for (int j = 0; j < c.backups_size(); ++j) {
        // The ring over the new shards, as PlaceChunks lays it: distinct.
        EXPECT_EQ(c.backups(j), (c.shard() + j + 1) % m.to);
      }
    }
    const std::vector<uint64_t> primaries = BytesPerShard(*b);
    const std::vector<uint64_t> copies = CopyBytesPerShard(*b);
    uint64_t total = 0;
    for (uint32_t s = 0; s < 4; ++s) {
      if (s >= m.to) {
        EXPECT_EQ(copies[s], 0u) << s;
        continue;
      }
      total += copies[s];
      for (uint32_t t = 0; t < m.to; ++t) {
        EXPECT_LE(primaries[s], primaries[t] + largest) << s << " " << t;
        EXPECT_LE(copies[s], copies[t] + m.k * largest) << s << " " << t;
      }
    }
    // A new shard's copies are all fetched; a leaving shard's copies must
    // land where the chunk had none. Few more than that move.
    uint64_t least = 0;
    for (uint32_t s = m.from; s < m.to; ++s) least += copies[s];
    if (m.to < m.from) {
      for (uint32_t s = m.to; s < m.from; ++s)
        least += CopyBytesPerShard(*a)[s];
    }
    const uint64_t fetched = FetchedBytes(*a, *b);
    EXPECT_GE(fetched, least);
    EXPECT_LE(fetched, least + least / 4 + 2 * m.k * largest)
        << "fetched " << fetched << " of " << total << ", least " << least;
    // Placed again over the same shards, nothing moves.
    absl::StatusOr<Placement> again = RePlaceChunks(*b, m.to);
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(FetchedBytes(*b, *again), 0u);
    EXPECT_EQ(Moved(*b, *again), 0);
  }
}

// Draining a shard of a replicated job: the ring over the shards left
// (ascending, wrapping), and no copy on the drained shard.
TEST(RePlaceChunksTest, ReplicatedDrainKeepsTheRingOfTheSet) {
  for (uint32_t k : {2u, 3u}) {
    JobSpec spec = MlpSpec(16 * 1024);
    spec.set_replication(k);
    absl::StatusOr<Placement> a = PlaceChunks(spec, 4);
    ASSERT_TRUE(a.ok()) << a.status();
    const std::vector<uint32_t> left = {0, 2, 3};
    absl::StatusOr<Placement> b = RePlaceChunksOnto(*a, left);
    ASSERT_TRUE(b.ok()) << b.status();
    for (const ChunkPlacement& c : b->chunks()) {
      const auto at = std::find(left.begin(), left.end(), c.shard());
      ASSERT_NE(at, left.end()) << c.chunk_id();
      ASSERT_EQ(c.backups_size(), static_cast<int>(k - 1));
      for (int j = 0; j < c.backups_size(); ++j) {
        EXPECT_EQ(c.backups(j), left[(at - left.begin() + j + 1) % 3])
            << "k " << k << ", chunk " << c.chunk_id();
      }
    }
    EXPECT_EQ(CopyBytesPerShard(*b)[1], 0u) << k;
  }
}

// A placement PlaceChunks made over the same shards moves nothing.
TEST(RePlaceChunksTest, ReplicatedAlreadyPlacedMovesNothing) {
  for (uint32_t k : {2u, 3u}) {
    JobSpec spec = MlpSpec(16 * 1024);
    spec.set_replication(k);
    absl::StatusOr<Placement> p = PlaceChunks(spec, 3);
    ASSERT_TRUE(p.ok());
    absl::StatusOr<Placement> q = RePlaceChunks(*p, 3);
    ASSERT_TRUE(q.ok());
    EXPECT_EQ(FetchedBytes(*p, *q), 0u) << k;
    EXPECT_EQ(Moved(*p, *q), 0) << k;
  }
}

TEST(PlaceChunksTest, FirstShardsAsAnExplicitSetPlaceTheSame) {
  JobSpec spec = MlpSpec(16 * 1024);
  spec.set_shards(2);
  absl::StatusOr<Placement> counted = PlaceChunks(spec, 3);
  spec.set_shards(0);
  spec.add_shard_ids(1);
  spec.add_shard_ids(0);
  absl::StatusOr<Placement> listed = PlaceChunks(spec, 3);
  ASSERT_TRUE(counted.ok() && listed.ok()) << listed.status();
  EXPECT_EQ(listed->SerializeAsString(), counted->SerializeAsString());
}

TEST(PlaceChunksTest, UsesOnlyTheSpecShardIds) {
  JobSpec spec = MlpSpec(16 * 1024);
  spec.add_shard_ids(2);
  spec.add_shard_ids(0);
  absl::StatusOr<Placement> p = PlaceChunks(spec, 3);
  ASSERT_TRUE(p.ok()) << p.status();
  const std::vector<uint64_t> bytes = BytesPerShard(*p);
  EXPECT_EQ(bytes[1], 0u);
  EXPECT_GT(bytes[0], 0u);
  EXPECT_LE(std::max(bytes[0], bytes[2]) - std::min(bytes[0], bytes[2]),
            LargestChunkBytes(*p));
  EXPECT_EQ(UsedShards(spec, 3), 2u);
  EXPECT_EQ(ShardSet(spec, 3), (std::vector<uint32_t>{0, 2}));
}

TEST(PlaceChunksTest, RefusesBadShardIdsNamingTheField) {
  struct Case {
    std::vector<uint32_t> ids;
    uint32_t shards, replication;
    std::string want;
  };
  const std::vector<Case> cases = {
      {{0, 3}, 0, 0, "shard_ids[1]: 3, but the cluster has 3 shards"},
      {{2, 0, 2}, 0, 0, "shard_ids[2]: shard 2 named twice"},
      {{0, 2}, 3, 0, "shards: 3, but shard_ids names 2 shards"},
  };
  for (const Case& c : cases) {
    JobSpec spec = MlpSpec(16 * 1024);
    for (uint32_t id : c.ids) spec.add_shard_ids(id);
    spec.set_shards(c.shards);
    spec.set_replication(c.replication);
    absl::StatusOr<Placement> p = PlaceChunks(spec, 3);
    EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument) << c.want;
    EXPECT_THAT(p.status().message(), HasSubstr(c.want));
  }
  JobSpec both = MlpSpec(16 * 1024);  // `shards` may repeat the set's size
  both.add_shard_ids(0);
  both.add_shard_ids(2);
  both.set_shards(2);
  EXPECT_TRUE(PlaceChunks(both, 3).ok());
}

TEST(PlaceChunksTest, SubmitListsABadShardIdAsAProblem) {
  JobSpec spec;  // otherwise invalid too: the shard_ids problem is among them
  spec.add_shard_ids(0);
  spec.add_shard_ids(3);
  ValidationContext ctx;
  ctx.num_shards = 3;
  EXPECT_THAT(
      ValidateJobSpec(spec, ctx),
      ::testing::Contains("shard_ids[1]: 3, but the cluster has 3 shards"));
  spec.set_shard_ids(1, 2);
  EXPECT_THAT(ValidateJobSpec(spec, ctx),
              ::testing::Not(::testing::Contains(HasSubstr("shard_ids"))));
}

TEST(ShardSetTest, FirstShardsAreKeptAsACount) {
  JobSpec spec;
  SetShardSet({0, 1}, &spec);
  EXPECT_EQ(spec.shards(), 2u);
  EXPECT_EQ(spec.shard_ids_size(), 0);
  SetShardSet({0, 2}, &spec);
  EXPECT_EQ(spec.shards(), 2u);
  EXPECT_EQ(ShardSet(spec, 3), (std::vector<uint32_t>{0, 2}));
  EXPECT_TRUE(IsFirstShards({0, 1, 2}));
  EXPECT_FALSE(IsFirstShards({1, 2}));
  EXPECT_EQ(ShardSet(JobSpec(), 3), (std::vector<uint32_t>{0, 1, 2}));
}

TEST(RePlaceChunksTest, DrainingTheMiddleShardMovesOnlyItsChunks) {
  JobSpec spec = MlpSpec(16 * 1024);
  absl::StatusOr<Placement> three = PlaceChunks(spec, 3);
  ASSERT_TRUE(three.ok());
  absl::StatusOr<Placement> drained = RePlaceChunksOnto(*three, {0, 2});
  ASSERT_TRUE(drained.ok()) << drained.status();
  EXPECT_EQ(drained->epoch(), 1u);
  const std::vector<uint64_t> bytes = BytesPerShard(*drained);
  EXPECT_EQ(bytes[1], 0u);
  EXPECT_LE(std::max(bytes[0], bytes[2]) - std::min(bytes[0], bytes[2]),
            LargestChunkBytes(*drained));
  // Every chunk of shard 1 moves; of the others, only the few that even
  // out shards 0 and 2 (RePlaceChunks' rule), from one to the other.
  int on_one = 0;
  int others_moved = 0;
  for (int i = 0; i < three->chunks_size(); ++i) {
    const uint32_t was = three->chunks(i).shard();
    on_one += was == 1;
    others_moved += was != 1 && drained->chunks(i).shard() != was;
  }
  EXPECT_GT(on_one, 0);
  EXPECT_EQ(Moved(*three, *drained), on_one + others_moved);
  EXPECT_LE(others_moved, 2);
  // The same as shrinking would be were shard 1 the highest: a set of the
  // first shards re-places as RePlaceChunks does.
  absl::StatusOr<Placement> two = RePlaceChunksOnto(*three, {0, 1});
  absl::StatusOr<Placement> counted = RePlaceChunks(*three, 2);
  ASSERT_TRUE(two.ok() && counted.ok());
  EXPECT_EQ(two->SerializeAsString(), counted->SerializeAsString());
}

TEST(RePlaceChunksTest, RefusesBadSets) {
  JobSpec spec = MlpSpec(16 * 1024);
  absl::StatusOr<Placement> p = PlaceChunks(spec, 3);
  ASSERT_TRUE(p.ok());
  EXPECT_THAT(RePlaceChunksOnto(*p, {}).status().message(),
              HasSubstr("shards: none left"));
  EXPECT_THAT(RePlaceChunksOnto(*p, {0, 3}).status().message(),
              HasSubstr("shards: 3 is past the cluster's 3 shards"));
  EXPECT_THAT(RePlaceChunksOnto(*p, {2, 0}).status().message(),
              HasSubstr("ascending"));
  EXPECT_THAT(RePlaceChunksOnto(*p, {1, 1}).status().message(),
              HasSubstr("ascending"));
}

}  // namespace
}  // namespace ps
