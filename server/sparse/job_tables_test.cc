#include "server/sparse/job_tables.h"

#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/text_proto.h"
#include "core/sparse_ids.h"
#include "core/table_spec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

using ::testing::HasSubstr;

JobSpec Spec(const std::string& mode, const std::string& table_extra = "") {
  JobSpec spec;
  const std::string text = absl::StrCat(
      "name: \"j\" seed: 7 consistency { mode: ", mode,
      " step_deadline_ms: 1000 staleness: ", mode == "SSP" ? 1 : 0,
      " } tables { name: \"emb\" dim: 2 init { kind: CONSTANT value: 1 } "
      "optimizer { kind: SGD learning_rate: 0.5 } ",
      table_extra, " }");
  EXPECT_TRUE(ParseTextProto(text, "job", &spec).ok()) << text;
  for (TableSpec& t : *spec.mutable_tables()) ApplyTableDefaults(&t);
  return spec;
}

std::unique_ptr<JobTables> Make(const JobSpec& spec, uint32_t workers,
                                uint32_t shards = 1) {
  absl::StatusOr<std::unique_ptr<JobTables>> t = JobTables::Create(
      spec, {.shard_id = 0, .num_shards = shards, .num_workers = workers});
  EXPECT_TRUE(t.ok()) << t.status();
  return std::move(*t);
}

std::string Ids(const std::vector<uint64_t>& ids) {
  return std::string(reinterpret_cast<const char*>(ids.data()), ids.size() * 8);
}
std::string Floats(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4);
}
std::vector<float> ToFloats(const std::string& bytes) {
  std::vector<float> v(bytes.size() / 4);
  std::memcpy(v.data(), bytes.data(), bytes.size());
  return v;
}

// One call and its outcome, kept alive until `done` runs.
struct Call {
  SparseExchangeRequest req;
  SparseExchangeResponse resp;
  std::optional<absl::Status> status;

  void Start(JobTables& t) {
    t.Exchange(req, &resp, [this](absl::Status s) { status = s; });
  }
};

std::unique_ptr<Call> Exchange(uint32_t worker, uint64_t step, bool push,
                               const std::vector<uint64_t>& push_ids,
                               const std::vector<float>& grads,
                               const std::vector<uint64_t>& pull_ids) {
  auto c = std::make_unique<Call>();
  c->req.set_job_id("j");
  c->req.set_worker(worker);
  c->req.set_step(step);
  c->req.set_push(push);
  if (push) {
    SparseRows* g = c->req.add_gradients();
    g->set_table("emb");
    g->set_ids(Ids(push_ids));
    g->set_values(Floats(grads));
  }
  SparseRows* p = c->req.add_pull();
  p->set_table("emb");
  p->set_ids(Ids(pull_ids));
  return c;
}

std::vector<float> Pull(JobTables& t, const std::vector<uint64_t>& ids,
                        uint64_t step = 0) {
  auto c = Exchange(0, step, false, {}, {}, ids);
  c->Start(t);
  EXPECT_TRUE(c->status.has_value() && c->status->ok());
  if (!c->status.has_value() || c->resp.rows_size() != 1) return {};
  return ToFloats(c->resp.rows(0).values());
}

TEST(JobTablesTest, BspSumsInRankOrderDividesAndAnswersOnceComplete) {
  auto t = Make(Spec("BSP"), 2);
  EXPECT_EQ(Pull(*t, {5, 9}), (std::vector<float>{1, 1, 1, 1}));
  // Worker 1 pushes id 5 twice (summed once), worker 0 pushes 5 and 9.
  auto a = Exchange(1, 0, true, {5, 5}, {1, 2, 3, 4}, {5, 9});
  auto b = Exchange(0, 0, true, {5, 9}, {2, 0, 4, 4}, {5});
  a->Start(*t);
  EXPECT_FALSE(a->status.has_value()) << "answered before the quorum";
  b->Start(*t);
  ASSERT_TRUE(a->status.has_value() && a->status->ok()) << *a->status;
  ASSERT_TRUE(b->status.has_value() && b->status->ok()) << *b->status;
  // Row 5: 1 - 0.5 * ((2 + 1 + 3) / 2, (0 + 2 + 4) / 2) = (-0.5, -0.5).
  // Row 9: 1 - 0.5 * (4 / 2, 4 / 2) = (0, 0).
  EXPECT_EQ(ToFloats(a->resp.rows(0).values()),
            (std::vector<float>{-0.5f, -0.5f, 0, 0}));
  EXPECT_EQ(a->resp.version(), 1u);
  EXPECT_EQ(t->version(), 1u);

  // A retried push of step 0 is stale; a push of step 5 is from the future.
  auto stale = Exchange(0, 0, true, {5}, {9, 9}, {5});
  stale->Start(*t);
  ASSERT_TRUE(stale->status->ok());
  EXPECT_TRUE(stale->resp.stale());
  auto future = Exchange(0, 5, true, {5}, {9, 9}, {5});
  future->Start(*t);
  EXPECT_THAT(future->status->message(), HasSubstr("step: 5 is ahead"));
  EXPECT_EQ(Pull(*t, {5}, 1), (std::vector<float>{-0.5f, -0.5f}));
}

TEST(JobTablesTest, BspDuplicatePushIsNotAppliedTwice) {
  auto t = Make(Spec("BSP"), 2);
  auto a = Exchange(0, 0, true, {3}, {2, 2}, {3});
  auto again = Exchange(0, 0, true, {3}, {2, 2}, {3});
  auto b = Exchange(1, 0, true, {}, {}, {3});
  a->Start(*t);
  again->Start(*t);
  b->Start(*t);
  ASSERT_TRUE(again->status->ok());
  EXPECT_TRUE(again->resp.duplicate());
  // (2 + nothing) / 2 pushes = 1; 1 - 0.5 * 1 = 0.5.
  EXPECT_EQ(ToFloats(b->resp.rows(0).values()),
            (std::vector<float>{0.5f, 0.5f}));
}

TEST(JobTablesTest, BadInputFailsNamingTheFieldAndChangesNothing) {
  // Two shards: find an id of shard 1 to send to shard 0.
  uint64_t other = 0;
  while (ShardForId(other, 2) != 1) ++other;
  uint64_t mine = 0;
  while (ShardForId(mine, 2) != 0) ++mine;
  auto t = Make(Spec("ASP", "num_ids: 1000000"), 1, 2);
  struct Case {
    std::function<void(SparseExchangeRequest*)> change;
    std::string want;
  };
  const float nan = std::nanf("");
  const std::vector<Case> cases = {
      {[](SparseExchangeRequest* r) {
         r->mutable_gradients(0)->set_table("x");
       },
       "gradients[0].table: unknown table \"x\""},
      {[&](SparseExchangeRequest* r) {
         r->mutable_gradients(0)->set_ids(Ids({other}));
       },
       absl::StrCat("gradients[0].ids[0]: id ", other,
                    " belongs to shard 1, not 0")},
      {[](SparseExchangeRequest* r) {
         r->mutable_gradients(0)->set_values(Floats({1}));
       },
       "gradients[0].values: 4 bytes, want 8"},
      {[&](SparseExchangeRequest* r) {
         r->mutable_gradients(0)->set_values(Floats({1, nan}));
       },
       "gradients[0].values[1]: nan for id"},
      {[](SparseExchangeRequest* r) {
         r->mutable_gradients(0)->mutable_ids()->push_back('x');
       },
       "gradients[0].ids: 9 bytes, not a whole number"},
      {[](SparseExchangeRequest* r) { *r->add_gradients() = r->gradients(0); },
       "gradients[1].table: table emb appears twice"},
      {[](SparseExchangeRequest* r) { r->set_worker(3); },
       "worker: 3 is out of range"},
      {[](SparseExchangeRequest* r) {
         r->mutable_pull(0)->set_ids(Ids({uint64_t{1} << 40}));
       },
       "outside table emb (num_ids 1000000)"},
  };
  const std::vector<float> before = Pull(*t, {mine});
  for (const Case& c : cases) {
    auto call = Exchange(0, 0, true, {mine}, {1, 1}, {mine});
    c.change(&call->req);
    call->Start(*t);
    ASSERT_TRUE(call->status.has_value());
    EXPECT_THAT(call->status->message(), HasSubstr(c.want)) << c.want;
    EXPECT_EQ(t->version(), 0u);
  }
  EXPECT_EQ(Pull(*t, {mine}), before);
}

TEST(JobTablesTest, AspAppliesAtOnceAndDropsRepeatedSteps) {
  auto t = Make(Spec("ASP"), 2);
  auto a = Exchange(1, 0, true, {4}, {2, 2}, {4});
  a->Start(*t);
  ASSERT_TRUE(a->status->ok());
  EXPECT_EQ(ToFloats(a->resp.rows(0).values()), (std::vector<float>{0, 0}));
  auto again = Exchange(1, 0, true, {4}, {2, 2}, {4});
  again->Start(*t);
  EXPECT_TRUE(again->resp.duplicate());
  EXPECT_EQ(t->version(), 1u);
}

TEST(JobTablesTest, SspWaitsForTheSlowestWorkerAndTheDeadlineNamesIt) {
  auto t = Make(Spec("SSP"), 2);  // staleness 1
  auto s0 = Exchange(0, 0, true, {1}, {0, 0}, {1});
  s0->Start(*t);
  EXPECT_TRUE(s0->status.has_value()) << "step 1 - slowest 0 <= 1";
  auto s1 = Exchange(0, 1, true, {1}, {0, 0}, {1});
  s1->Start(*t);
  EXPECT_FALSE(s1->status.has_value()) << "step 2 - slowest 0 > 1";
  t->CheckDeadlines(absl::Now() + absl::Seconds(2));
  ASSERT_TRUE(s1->status.has_value());
  EXPECT_EQ(s1->status->code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(s1->status->message(), HasSubstr("waiting for workers [1]"));
}

TEST(JobTablesTest, MembershipCompletesAStepWithoutTheLostWorker) {
  auto t = Make(Spec("BSP"), 2);
  auto a = Exchange(0, 0, true, {2}, {2, 2}, {2});
  a->Start(*t);
  EXPECT_FALSE(a->status.has_value());
  t->SetMembership({1, 0});
  ASSERT_TRUE(a->status.has_value() && a->status->ok());
  EXPECT_EQ(ToFloats(a->resp.rows(0).values()), (std::vector<float>{0, 0}));
}

// LR_RULE_LINEAR (a job submitted with 2 workers, 4 rank slots), as for
// dense chunks: a BSP step applies the pushes' sum over 2, an ASP push is
// applied with lr x active / 2.
TEST(JobTablesTest, LinearLrRuleScalesWithTheWorkers) {
  // Submitted with 2 workers, 4 slots, 3 of them active.
  auto linear = [](const std::string& mode) {
    JobSpec spec = Spec(mode);
    spec.set_num_workers(2);
    spec.set_lr_rule(LR_RULE_LINEAR);
    std::unique_ptr<JobTables> t = Make(spec, 4);
    t->SetMembership({1, 1, 1, 0});
    return t;
  };
  auto t = linear("BSP");
  std::vector<std::unique_ptr<Call>> calls;
  for (uint32_t w = 0; w < 3; ++w) {
    const float g = static_cast<float>(w + 1);
    calls.push_back(Exchange(w, 0, true, {3}, {g, g}, {3}));
    calls.back()->Start(*t);
  }
  ASSERT_TRUE(calls[0]->status.has_value() && calls[0]->status->ok());
  // 1 - 0.5 x (1 + 2 + 3) / 2 (the mean, / 3, would give 0).
  EXPECT_EQ(ToFloats(calls[0]->resp.rows(0).values()),
            (std::vector<float>{-0.5f, -0.5f}));

  t = linear("ASP");
  auto a = Exchange(2, 0, true, {4}, {2, 2}, {4});
  a->Start(*t);
  ASSERT_TRUE(a->status.has_value() && a->status->ok());
  // 1 - 0.5 x 2 x 3/2.
  EXPECT_EQ(ToFloats(a->resp.rows(0).values()),
            (std::vector<float>{-0.5f, -0.5f}));
  t->SetMembership({1, 0, 0, 0});
  auto b = Exchange(0, 0, true, {4}, {2, 2}, {4});
  b->Start(*t);
  ASSERT_TRUE(b->status.has_value() && b->status->ok());
  // -0.5 - 0.5 x 2 x 1/2.
  EXPECT_EQ(ToFloats(b->resp.rows(0).values()),
            (std::vector<float>{-1.0f, -1.0f}));
}

TEST(JobTablesTest, BudgetWithoutEvictionFailsTheStepNamingTheTable) {
  // The smallest budget a table takes: one slab and index per stripe (64 x
  // 20616 bytes at dim 2); 40000 new rows cannot fit it.
  auto t = Make(Spec("BSP", "memory_budget_bytes: 1319424"), 1);
  std::vector<uint64_t> ids(40000);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = i + 10;
  auto a =
      Exchange(0, 0, true, ids, std::vector<float>(ids.size() * 2, 1), {2});
  a->Start(*t);
  ASSERT_TRUE(a->status.has_value());
  EXPECT_EQ(a->status->code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(a->status->message(), HasSubstr("emb"));
  EXPECT_EQ(t->version(), 0u);
  EXPECT_EQ(Pull(*t, {2}), (std::vector<float>{1, 1}));
}

TEST(JobTablesTest, SaveRestoreKeepsRowsVersionAndBufferedPushes) {
  const JobSpec spec = Spec("BSP", "admit_after: 2");
  auto t = Make(spec, 2);
  for (uint64_t step = 0; step < 3; ++step) {
    auto a = Exchange(0, step, true, {1, 2}, {1, 1, 2, 2}, {1});
    auto b = Exchange(1, step, true, {2, 3}, {1, 0, 0, 1}, {1});
    a->Start(*t);
    b->Start(*t);
    ASSERT_TRUE(b->status.has_value() && b->status->ok());
  }
  auto pending = Exchange(0, 3, true, {7}, {4, 4}, {7});
  pending->Start(*t);
  std::string bytes;
  StringSink sink(&bytes);
  ASSERT_TRUE(t->Save(sink).ok());

  auto copy = Make(spec, 2);
  StringSource source(bytes);
  ASSERT_TRUE(copy->Restore(source).ok());
  EXPECT_EQ(copy->version(), 3u);
  EXPECT_EQ(Pull(*copy, {1, 2, 3}, 3), Pull(*t, {1, 2, 3}, 3));
  // Worker 0's step-3 push is in the checkpoint: a retry is a duplicate.
  auto retry = Exchange(0, 3, true, {7}, {4, 4}, {7});
  retry->Start(*copy);
  // Answered (duplicate flag included) once the step completes.
  auto last = Exchange(1, 3, true, {2}, {1, 1}, {1});
  last->Start(*copy);
  ASSERT_TRUE(retry->status.has_value() && retry->status->ok());
  EXPECT_TRUE(retry->resp.duplicate());

  // A truncated stream changes nothing.
  auto other = Make(spec, 2);
  StringSource cut(absl::string_view(bytes).substr(0, bytes.size() - 3));
  EXPECT_FALSE(other->Restore(cut).ok());
  EXPECT_EQ(other->version(), 0u);
}

// BSP with a checkpoint every step: an answer waits until its version is
// durable; a restored copy counts its own version as durable.
TEST(JobTablesTest, GatedAnswersWaitUntilTheirVersionIsDurable) {
  const JobSpec spec = Spec("BSP");
  auto t = Make(spec, 2);
  t->GateAnswers();
  // Version 0 is durable (the registration's checkpoint).
  EXPECT_EQ(Pull(*t, {1}), (std::vector<float>{1, 1}));
  auto a = Exchange(0, 0, true, {1}, {2, 2}, {1});
  auto b = Exchange(1, 0, true, {1}, {0, 0}, {1});
  a->Start(*t);
  b->Start(*t);
  EXPECT_EQ(t->version(), 1u) << "applied at once";
  EXPECT_FALSE(a->status.has_value()) << "answered before it was durable";
  EXPECT_FALSE(b->status.has_value());
  // A pull of step 1 waits too; an older durable version releases nothing.
  auto pull = Exchange(0, 1, false, {}, {}, {1});
  pull->Start(*t);
  t->SetDurableVersion(0);
  EXPECT_FALSE(pull->status.has_value());
  t->SetDurableVersion(1);
  for (Call* c : {a.get(), b.get(), pull.get()}) {
    ASSERT_TRUE(c->status.has_value() && c->status->ok());
    EXPECT_EQ(c->resp.version(), 1u);
    EXPECT_EQ(ToFloats(c->resp.rows(0).values()),
              (std::vector<float>{0.5f, 0.5f}));
  }

  // The next step's answers wait for version 2; the deadline names the
  // durable version it waits for.
  auto c = Exchange(0, 1, true, {1}, {1, 1}, {1});
  auto d = Exchange(1, 1, true, {1}, {1, 1}, {1});
  c->Start(*t);
  d->Start(*t);
  std::string bytes;
  StringSink sink(&bytes);
  ASSERT_TRUE(t->Save(sink).ok());
  t->CheckDeadlines(absl::Now() + absl::Seconds(2));
  ASSERT_TRUE(c->status.has_value());
  EXPECT_TRUE(absl::IsDeadlineExceeded(*c->status));
  EXPECT_THAT(c->status->message(), HasSubstr("durable at 1")) << *c->status;

  // Restored from that save (version 2): its answers up to 2 go at once.
  auto copy = Make(spec, 2);
  copy->GateAnswers();
  StringSource source(bytes);
  ASSERT_TRUE(copy->Restore(source).ok());
  auto retry = Exchange(0, 1, true, {1}, {1, 1}, {1});
  retry->Start(*copy);
  ASSERT_TRUE(retry->status.has_value() && retry->status->ok());
  EXPECT_TRUE(retry->resp.stale());
  EXPECT_EQ(retry->resp.version(), 2u);
}

TEST(JobTablesTest, AspPushesFromManyThreadsAreEachAppliedOnce) {
  // SGD at 0.5 from 1: after every worker pushed gradient 1 for row 3 in
  // each of its steps, the row is 1 - 0.5 * workers * steps.
  constexpr uint32_t kWorkers = 4;
  constexpr uint64_t kSteps = 50;
  auto t = Make(Spec("ASP"), kWorkers);
  std::vector<std::thread> threads;
  for (uint32_t w = 0; w < kWorkers; ++w) {
    threads.emplace_back([&t, w] {
      for (uint64_t step = 0; step < kSteps; ++step) {
        // Each step twice: the retry is a duplicate.
        for (int attempt = 0; attempt < 2; ++attempt) {
          auto c = Exchange(w, step, true, {3}, {1, 1}, {3});
          c->Start(*t);
          ASSERT_TRUE(c->status.has_value() && c->status->ok());
          EXPECT_EQ(c->resp.duplicate(), attempt == 1);
        }
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(t->version(), kWorkers * kSteps);
  const float want = 1.0f - 0.5f * kWorkers * kSteps;
  EXPECT_EQ(Pull(*t, {3}), (std::vector<float>{want, want}));
}

TEST(JobTablesTest, BspEvictsRowsIdleForTheTtl) {
  auto t = Make(Spec("BSP", "evict_after_steps: 2"), 1);
  auto rows = [&] {
    JobStats stats;
    t->FillStats(&stats);
    return stats.tables(0).rows();
  };
  auto first = Exchange(0, 0, true, {1}, {1, 1}, {1});
  first->Start(*t);
  EXPECT_EQ(rows(), 1u);
  for (uint64_t step = 1; step < 4; ++step) {
    auto c = Exchange(0, step, true, {2}, {1, 1}, {2});
    c->Start(*t);
    ASSERT_TRUE(c->status->ok());
  }
  // Row 1 was last pushed at step 0; by version 4 it is gone, row 2 stays.
  EXPECT_EQ(rows(), 1u);
  EXPECT_EQ(Pull(*t, {1}, 4), (std::vector<float>{1, 1})) << "initial value";
}

}  // namespace
}  // namespace ps
