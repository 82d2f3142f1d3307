// libFuzzer target: hostile ParameterServer requests against a Shard.
//
//   bazel run //fuzz:shard_request_fuzzer -- -max_total_time=60
//   $PWD/fuzz/corpus/shard
//
// Each input is a short sequence of requests, each framed as
//   [kind: 1 byte][length: 2 bytes, little-endian][wire-format proto]
// (kind % 7: PushPull, Push, Pull, RegisterJob, SetMembership, DropJob,
// SparseExchange), played against a fresh Shard that holds three registered
// jobs (BSP with two workers, ASP with two, SSP(1) with three; chunks spread
// over two shards so "chunk of another shard" is reachable; each with a
// sparse table "emb" of 64 ids, dim 2, half of them on this shard). RegisterJob
// passes through the admission check that the psd's ParameterServer service
// applies first (server/rpc/request_limits.h), as in the daemon.
//
// Properties checked (a violation aborts, which libFuzzer reports):
//   * nothing crashes, leaks, hangs or trips ASan/UBSan;
//   * a request answered with an error changes no parameter of any job (a
//     checksum over every chunk's values and version, read with Pull);
//   * RegisterJob never changes another job's parameters, whatever it says;
//   * every PushPull/Pull callback runs exactly once (pending waits are
//     failed at the end with CheckDeadlines and Shutdown).
//
// `FUZZ_WRITE_SEEDS=DIR shard_request_fuzzer` writes the seed corpus that
// fuzz/corpus/shard holds (valid and near-valid requests of every kind).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "core/chunking.h"
#include "core/sparse_ids.h"
#include "google/protobuf/stubs/logging.h"
#include "google/protobuf/unknown_field_set.h"
#include "proto/job.pb.h"
#include "proto/ps.pb.h"
#include "server/rpc/push_decoder.h"
#include "server/rpc/request_limits.h"
#include "server/rpc/sparse_decoder.h"
#include "server/shard.h"

namespace ps {
namespace {

constexpr uint32_t kShardId = 0;
constexpr uint32_t kNumShards = 2;
constexpr size_t kMaxRequests = 8;
// Keeps any registration the fuzzer invents small enough for its 2 GiB RSS
// limit; refusals past it are part of what is fuzzed.
constexpr uint64_t kMemoryBudget = 64ull << 20;
// The fixture jobs' sparse table: ids [0, kTableIds), dim kTableDim.
constexpr uint64_t kTableIds = 64;
constexpr uint32_t kTableDim = 2;

enum Kind : uint8_t {
  kPushPull = 0,
  kPush = 1,
  kPull = 2,
  kRegisterJob = 3,
  kSetMembership = 4,
  kDropJob = 5,
  kSparseExchange = 6,
  kNumKinds = 7,
};

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "shard_request_fuzzer: %s\n", what.c_str());
  std::abort();
}

TensorSpec Tensor(const std::string& name, std::vector<uint64_t> shape,
                  InitKind init) {
  TensorSpec t;
  t.set_name(name);
  for (uint64_t d : shape) t.add_shape(d);
  t.mutable_init()->set_kind(init);
  if (init == UNIFORM) t.mutable_init()->set_scale(0.5f);
  return t;
}

RegisterJobRequest MakeJob(const std::string& id, ConsistencyMode mode,
                           uint32_t workers, OptimizerKind opt) {
  RegisterJobRequest r;
  r.set_job_id(id);
  r.set_num_workers(workers);
  JobSpec* spec = r.mutable_spec();
  spec->set_name(id);
  spec->set_num_workers(workers);
  spec->set_seed(7);
  // 16 floats per chunk: w (48) -> 3 chunks, b (6) -> 1, e (20) -> 2.
  spec->set_partition_bytes(64);
  spec->mutable_consistency()->set_mode(mode);
  if (mode == SSP) spec->mutable_consistency()->set_staleness(1);
  spec->mutable_consistency()->set_step_deadline_ms(1000);
  spec->mutable_optimizer()->set_kind(opt);
  spec->mutable_optimizer()->set_learning_rate(0.05f);
  if (opt == SGD) spec->mutable_optimizer()->set_momentum(0.9f);
  *spec->add_tensors() = Tensor("w", {8, 6}, GLOROT_UNIFORM);
  *spec->add_tensors() = Tensor("b", {6}, ZEROS);
  *spec->add_tensors() = Tensor("e", {20}, UNIFORM);
  TableSpec* t = spec->add_tables();
  t->set_name("emb");
  t->set_dim(kTableDim);
  t->set_num_ids(kTableIds);
  t->mutable_init()->set_kind(UNIFORM);
  t->mutable_init()->set_scale(0.5f);
  t->mutable_optimizer()->set_kind(opt == SGD ? SGD : ADAGRAD);
  t->mutable_optimizer()->set_learning_rate(0.1f);
  if (mode == BSP) t->set_admit_after(2);
  Placement* p = r.mutable_placement();
  p->set_num_shards(kNumShards);
  for (ChunkPlacement c : CutIntoChunks(*spec)) {
    c.set_shard(c.chunk_id() % kNumShards);
    *p->add_chunks() = std::move(c);
  }
  return r;
}

const std::vector<RegisterJobRequest>& Jobs() {
  static const auto* jobs = new std::vector<RegisterJobRequest>{
      MakeJob("bsp", BSP, 2, SGD),
      MakeJob("asp", ASP, 2, ADAM),
      MakeJob("ssp", SSP, 3, ADAGRAD),
  };
  return *jobs;
}

// One callback's outcome; lives until the input is done.
struct Call {
  int calls = 0;
  absl::Status status;
};

// The tables' version and every row of this shard in table "emb" of
// `job`, as SparseExchange pulls them at step 0 (answered at once).
std::string TablesChecksum(Shard& shard, const std::string& job) {
  SparseExchangeRequest req;
  req.set_job_id(job);
  SparseRows* pull = req.add_pull();
  pull->set_table("emb");
  for (uint64_t id = 0; id < kTableIds; ++id) {
    if (ShardForId(id, kNumShards) != kShardId) continue;
    pull->mutable_ids()->append(reinterpret_cast<const char*>(&id), 8);
  }
  SparseExchangeResponse resp;
  Call call;
  shard.SparseExchange(req, &resp, [&call](absl::Status s) {
    ++call.calls;
    call.status = std::move(s);
  });
  if (call.calls != 1) Fail("a table pull at step 0 did not answer at once");
  if (!call.status.ok()) return "gone";
  return absl::StrCat(resp.version(), ":",
                      absl::CEscape(resp.rows(0).values()));
}

// FNV-1a over every local chunk's id, version and value bits of the three
// fixed jobs ("" for a job that is gone), and their tables.
std::string Checksum(Shard& shard) {
  std::string sum;
  for (const RegisterJobRequest& job : Jobs()) {
    PullRequest req;
    req.set_job_id(job.job_id());
    PullResponse resp;
    Call call;
    shard.Pull(req, &resp, [&call](absl::Status s) {
      ++call.calls;
      call.status = std::move(s);
    });
    if (call.calls != 1) Fail("a Pull at version 0 did not answer at once");
    uint64_t h = 1469598103934665603ull;
    auto mix = [&h](const void* p, size_t n) {
      const unsigned char* b = static_cast<const unsigned char*>(p);
      for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
    };
    if (call.status.ok()) {
      for (const ChunkData& d : resp.parameters()) {
        const uint32_t id = d.chunk_id();
        const uint64_t version = d.version();
        mix(&id, sizeof(id));
        mix(&version, sizeof(version));
        mix(d.data().data(), d.data().size());
      }
    }
    absl::StrAppend(&sum, job.job_id(), "=",
                    call.status.ok() ? absl::StrCat(h) : "gone", ";",
                    TablesChecksum(shard, job.job_id()), ";");
  }
  return sum;
}

// Whether protobuf kept an unknown group in `m` (proto2's; the PushPull
// decoder refuses them where protobuf keeps them).
bool HasUnknownGroup(const google::protobuf::Message& m) {
  const google::protobuf::UnknownFieldSet& u =
      m.GetReflection()->GetUnknownFields(m);
  for (int i = 0; i < u.field_count(); ++i) {
    if (u.field(i).type() == google::protobuf::UnknownField::TYPE_GROUP) {
      return true;
    }
  }
  return false;
}
bool HasUnknownGroup(const SparseExchangeRequest& req) {
  for (const auto* list : {&req.gradients(), &req.pull()}) {
    for (const SparseRows& r : *list) {
      if (HasUnknownGroup(static_cast<const google::protobuf::Message&>(r))) {
        return true;
      }
    }
  }
  return HasUnknownGroup(static_cast<const google::protobuf::Message&>(req));
}
bool HasUnknownGroup(const PushPullRequest& req) {
  for (const ChunkData& g : req.gradients()) {
    if (HasUnknownGroup(static_cast<const google::protobuf::Message&>(g))) {
      return true;
    }
  }
  for (const HeldChunk& h : req.held()) {
    if (HasUnknownGroup(static_cast<const google::protobuf::Message&>(h))) {
      return true;
    }
  }
  return HasUnknownGroup(static_cast<const google::protobuf::Message&>(req));
}

template <typename Request>
bool Decode(const uint8_t* data, size_t size, Request* req) {
  return req->ParseFromArray(data, static_cast<int>(size));
}

void RunOne(Shard& shard, uint8_t kind, const uint8_t* data, size_t size,
            std::deque<Call>& calls,
            std::deque<std::unique_ptr<google::protobuf::Message>>& responses) {
  const std::string before = Checksum(shard);
  auto done_into = [](Call* call) {
    return [call](absl::Status s) {
      ++call->calls;
      call->status = std::move(s);
    };
  };
  // A synchronous error: nothing may have changed.
  auto expect_unchanged = [&](const absl::Status& s, const char* what) {
    if (s.ok()) return;
    if (s.message().empty())
      Fail(absl::StrCat(what, ": error without a message"));
    const std::string after = Checksum(shard);
    if (after != before) {
      Fail(absl::StrCat(what, " was refused (", s.ToString(),
                        ") but changed parameters: ", before, " -> ", after));
    }
  };
  switch (kind % kNumKinds) {
    case kPushPull: {
      // The RPC layer's path: decoded in place from two pieces (cut mid
      // message), kept alive by `keep`; it must accept exactly what
      // protobuf accepts.
      PushPullRequest req, parsed;
      GradientsIn gradients;
      std::deque<std::string> owned;
      auto keep = std::make_shared<std::string>(
          reinterpret_cast<const char*>(data), size);
      const absl::string_view all(*keep);
      const size_t cut = std::min(size, size / 2 | 1);
      const absl::string_view pieces[] = {all.substr(0, cut), all.substr(cut)};
      const bool ok =
          DecodePushPullRequest(pieces, keep, &req, &gradients, &owned).ok();
      if (ok != Decode(data, size, &parsed) && !HasUnknownGroup(parsed)) {
        Fail(absl::StrCat("PushPull decoder ", ok ? "accepted" : "refused",
                          " what protobuf ", ok ? "refused" : "accepted"));
      }
      if (!ok) return;
      auto resp = std::make_unique<PushPullResponse>();
      Call& call = calls.emplace_back();
      shard.PushPull(req, gradients, resp.get(), done_into(&call));
      responses.push_back(std::move(resp));
      if (call.calls == 1) expect_unchanged(call.status, "PushPull");
      return;
    }
    case kSparseExchange: {
      // The RPC layer's path: decoded from two pieces (cut mid message).
      SparseExchangeRequest parsed;
      auto in = std::make_shared<SparseRequestIn>();
      const absl::string_view all(reinterpret_cast<const char*>(data), size);
      const size_t cut = std::min(size, size / 2 | 1);
      const absl::string_view pieces[] = {all.substr(0, cut), all.substr(cut)};
      const bool ok = DecodeSparseExchangeRequest(pieces, in.get()).ok();
      if (ok != Decode(data, size, &parsed) && !HasUnknownGroup(parsed)) {
        Fail(absl::StrCat("SparseExchange decoder ",
                          ok ? "accepted" : "refused", " what protobuf ",
                          ok ? "refused" : "accepted"));
      }
      if (!ok) return;
      auto out = std::make_shared<SparseReplyOut>();
      Call& call = calls.emplace_back();
      // The request and reply live until the callback ran.
      shard.SparseExchange(in.get(), out.get(),
                           [in, out, call = &call](absl::Status s) {
                             ++call->calls;
                             call->status = std::move(s);
                           });
      if (call.calls == 1) expect_unchanged(call.status, "SparseExchange");
      return;
    }
    case kPush: {
      PushRequest req;
      if (!Decode(data, size, &req)) return;
      PushResponse resp;
      absl::Status s = shard.Push(req, &resp);
      expect_unchanged(s, "Push");
      return;
    }
    case kPull: {
      PullRequest req;
      if (!Decode(data, size, &req)) return;
      auto resp = std::make_unique<PullResponse>();
      Call& call = calls.emplace_back();
      shard.Pull(req, resp.get(), done_into(&call));
      responses.push_back(std::move(resp));
      if (call.calls == 1) expect_unchanged(call.status, "Pull");
      if (Checksum(shard) != before) Fail("a Pull changed parameters");
      return;
    }
    case kRegisterJob: {
      RegisterJobRequest req;
      if (!Decode(data, size, &req)) return;
      RegisterJobResponse resp;
      absl::Status s = CheckRegisterJobLimits(req);
      if (s.ok()) s = shard.RegisterJob(req, &resp);
      expect_unchanged(s, "RegisterJob");
      // Whatever the outcome, the jobs that exist keep their parameters.
      if (Checksum(shard) != before) {
        Fail(absl::StrCat("RegisterJob of \"", req.job_id(),
                          "\" changed another job's parameters"));
      }
      return;
    }
    case kSetMembership: {
      SetMembershipRequest req;
      if (!Decode(data, size, &req)) return;
      absl::Status s = shard.SetMembership(req);
      expect_unchanged(s, "SetMembership");
      return;
    }
    case kDropJob: {
      DropJobRequest req;
      if (!Decode(data, size, &req)) return;
      absl::Status s = shard.DropJob(req);
      if (!s.ok()) Fail(absl::StrCat("DropJob failed: ", s.ToString()));
      return;
    }
  }
}

void WriteSeeds(const std::string& dir) {
  auto frame = [](uint8_t kind, const google::protobuf::Message& m) {
    std::string bytes = m.SerializeAsString();
    std::string out(1, static_cast<char>(kind));
    out.push_back(static_cast<char>(bytes.size() & 0xff));
    out.push_back(static_cast<char>((bytes.size() >> 8) & 0xff));
    return out + bytes;
  };
  auto gradient = [](const RegisterJobRequest& job, uint32_t chunk,
                     float value) {
    ChunkData d;
    d.set_chunk_id(chunk);
    std::vector<float> g(job.placement().chunks(chunk).length(), value);
    d.set_data(reinterpret_cast<const char*>(g.data()), g.size() * 4);
    return d;
  };
  std::vector<std::pair<std::string, std::string>> seeds;
  for (const RegisterJobRequest& job : Jobs()) {
    const std::string& id = job.job_id();
    PushPullRequest pp;
    pp.set_job_id(id);
    *pp.add_gradients() = gradient(job, 0, 0.25f);
    *pp.add_gradients() = gradient(job, 2, -0.5f);
    seeds.push_back({id + "_pushpull", frame(kPushPull, pp)});
    PushPullRequest pp1 = pp;
    pp1.set_worker(1);
    seeds.push_back(
        {id + "_two_workers", frame(kPushPull, pp) + frame(kPushPull, pp1)});
    PushPullRequest nan = pp;
    float x = std::nanf("");
    std::memcpy(nan.mutable_gradients(1)->mutable_data()->data() + 4, &x, 4);
    seeds.push_back({id + "_nan_in_second_chunk", frame(kPushPull, nan)});
    PushRequest push;
    push.set_job_id(id);
    push.set_step(0);
    *push.add_gradients() = gradient(job, 4, 1.0f);
    seeds.push_back({id + "_push", frame(kPush, push)});
    PullRequest pull;
    pull.set_job_id(id);
    pull.add_chunk_ids(0);
    pull.add_chunk_ids(2);
    pull.set_min_version(1);
    seeds.push_back(
        {id + "_push_then_pull", frame(kPush, push) + frame(kPull, pull)});
    SetMembershipRequest m;
    m.set_job_id(id);
    m.add_active_workers(0);
    seeds.push_back({id + "_membership_then_push",
                     frame(kSetMembership, m) + frame(kPushPull, pp)});
    RegisterJobRequest again = job;
    seeds.push_back({id + "_register_again", frame(kRegisterJob, again)});
    RegisterJobRequest other = job;
    other.set_job_id(id + "2");
    other.mutable_spec()->mutable_tensors(0)->set_shape(0, 9);
    seeds.push_back(
        {id + "_register_mismatched_placement", frame(kRegisterJob, other)});
    SparseExchangeRequest sx;
    sx.set_job_id(id);
    sx.set_push(true);
    SparseRows* g = sx.add_gradients();
    g->set_table("emb");
    // Two ids of this shard, the first repeated.
    uint64_t ids[3] = {0, 0, 0};
    for (uint64_t k = 0, found = 0; found < 2 && k < kTableIds; ++k) {
      if (ShardForId(k, kNumShards) == kShardId) ids[found++] = k;
    }
    ids[2] = ids[0];
    const float grads[] = {0.5f, -1, 2, 0.25f, 1, 1};
    g->set_ids(reinterpret_cast<const char*>(ids), sizeof(ids));
    g->set_values(reinterpret_cast<const char*>(grads), sizeof(grads));
    *sx.add_pull() = *g;
    sx.mutable_pull(0)->clear_values();
    seeds.push_back({id + "_sparse_exchange", frame(kSparseExchange, sx)});
    SparseExchangeRequest sx1 = sx;
    sx1.set_worker(1);
    seeds.push_back({id + "_sparse_two_workers",
                     frame(kSparseExchange, sx) + frame(kSparseExchange, sx1)});
    SparseExchangeRequest bad = sx;
    bad.mutable_gradients(0)->mutable_values()->resize(sizeof(grads) - 4);
    seeds.push_back({id + "_sparse_short_values", frame(kSparseExchange, bad)});
    DropJobRequest drop;
    drop.set_job_id(id);
    seeds.push_back(
        {id + "_drop_then_push", frame(kDropJob, drop) + frame(kPushPull, pp)});
  }
  RegisterJobRequest fresh = MakeJob("fresh", ASP, 4, ADAMW);
  seeds.push_back({"register_new_job", frame(kRegisterJob, fresh)});
  for (const auto& [name, bytes] : seeds) {
    std::ofstream(dir + "/" + name, std::ios::binary) << bytes;
  }
  std::fprintf(stderr, "wrote %zu seeds to %s\n", seeds.size(), dir.c_str());
}

}  // namespace
}  // namespace ps

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (const char* dir = std::getenv("FUZZ_WRITE_SEEDS")) {
    ps::WriteSeeds(dir);
    std::exit(0);
  }
  // Protobuf logs every string field with invalid UTF-8; fuzzed bytes are
  // full of them, and the refusals are what is checked.
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ps;  // NOLINT: a libFuzzer entry point lives outside ps
  ShardOptions options;
  options.shard_id = kShardId;
  options.memory_budget_bytes = kMemoryBudget;
  // Declared before the shard: callbacks may write into them until the
  // shard's Shutdown at the end.
  std::deque<Call> calls;
  std::deque<std::unique_ptr<google::protobuf::Message>> responses;
  {
    Shard shard(options);
    for (const RegisterJobRequest& job : Jobs()) {
      RegisterJobResponse resp;
      absl::Status s = shard.RegisterJob(job, &resp);
      if (!s.ok()) Fail(absl::StrCat("fixture job: ", s.ToString()));
    }
    size_t at = 0;
    for (size_t n = 0; n < kMaxRequests && at + 3 <= size; ++n) {
      const uint8_t kind = data[at];
      size_t len = data[at + 1] | (static_cast<size_t>(data[at + 2]) << 8);
      at += 3;
      len = std::min(len, size - at);
      RunOne(shard, kind, data + at, len, calls, responses);
      at += len;
    }
    // Parked waits end now: deadline first, then shutdown for the rest.
    shard.CheckDeadlines(absl::InfiniteFuture());
    shard.Shutdown();
    if (shard.PendingWaits() != 0) Fail("waits left after Shutdown");
  }
  for (const Call& c : calls) {
    if (c.calls != 1) Fail(absl::StrCat("a callback ran ", c.calls, " times"));
  }
  return 0;
}
