// Split steps (SparseExchangeRequest.part/parts) on JobTables: a push sent
// in parts, in any order and with retries, leaves the tables bitwise as the
// unsplit push does (BSP and ASP), each part's pull is answered with its
// own rows, and every malformed or incomplete split is refused naming the
// field with the tables unchanged.
#include <algorithm>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/text_proto.h"
#include "core/table_spec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/sparse/job_tables.h"

namespace ps {
namespace {

using ::testing::HasSubstr;

constexpr int kDim = 3;

JobSpec Spec(const std::string& mode) {
  JobSpec spec;
  const std::string text = absl::StrCat(
      "name: \"j\" seed: 7 consistency { mode: ", mode,
      " step_deadline_ms: 1000 } tables { name: \"emb\" dim: ", kDim,
      " init { kind: UNIFORM scale: 0.1 } optimizer { kind: ADAGRAD "
      "learning_rate: 0.3 } }");
  EXPECT_TRUE(ParseTextProto(text, "job", &spec).ok()) << text;
  for (TableSpec& t : *spec.mutable_tables()) ApplyTableDefaults(&t);
  return spec;
}

std::unique_ptr<JobTables> Make(const JobSpec& spec, uint32_t workers,
                                uint64_t split_buffer_bytes = 1ull << 30) {
  absl::StatusOr<std::unique_ptr<JobTables>> t =
      JobTables::Create(spec, {.shard_id = 0,
                               .num_shards = 1,
                               .num_workers = workers,
                               .split_buffer_bytes = split_buffer_bytes});
  EXPECT_TRUE(t.ok()) << t.status();
  return std::move(*t);
}

template <typename T>
std::string Bytes(const T* v, size_t n) {
  return std::string(reinterpret_cast<const char*>(v), n * sizeof(T));
}

// One worker's step: the rows it pushes and the ids it pulls.
struct StepRows {
  std::vector<uint64_t> push_ids;
  std::vector<float> grads;
  std::vector<uint64_t> pull_ids;
};

struct Call {
  SparseExchangeRequest req;
  SparseExchangeResponse resp;
  std::optional<absl::Status> status;
  void Start(JobTables& t) {
    t.Exchange(req, &resp, [this](absl::Status s) { status = s; });
  }
  bool ok() const { return status.has_value() && status->ok(); }
};

// Part `part` of `parts` of (worker, step): the part-th contiguous share of
// the pushed rows and of the pulled ids. parts == 0: the whole step.
std::unique_ptr<Call> PartCall(uint32_t worker, uint64_t step,
                               const StepRows& rows, uint32_t part,
                               uint32_t parts, uint32_t attempt = 0) {
  auto c = std::make_unique<Call>();
  c->req.set_job_id("j");
  c->req.set_worker(worker);
  c->req.set_step(step);
  c->req.set_push(true);
  c->req.set_attempt(attempt);
  c->req.set_part(part);
  c->req.set_parts(parts);
  const uint32_t n = std::max(parts, 1u);
  auto range = [&](size_t size) {
    return std::make_pair(size * part / n, size * (part + 1) / n);
  };
  const auto [pb, pe] = range(rows.push_ids.size());
  SparseRows* g = c->req.add_gradients();
  g->set_table("emb");
  g->set_ids(Bytes(rows.push_ids.data() + pb, pe - pb));
  g->set_values(Bytes(rows.grads.data() + pb * kDim, (pe - pb) * kDim));
  const auto [qb, qe] = range(rows.pull_ids.size());
  SparseRows* p = c->req.add_pull();
  p->set_table("emb");
  p->set_ids(Bytes(rows.pull_ids.data() + qb, qe - qb));
  return c;
}

// Seeded rows: ids from a small range (so they repeat within a push and
// across workers), gradients of mixed magnitude (so a sum's order shows).
StepRows RandomRows(std::mt19937_64& rng, size_t n) {
  StepRows r;
  std::uniform_int_distribution<uint64_t> id(0, 40);
  std::uniform_real_distribution<float> g(-3.0f, 3.0f);
  for (size_t i = 0; i < n; ++i) {
    r.push_ids.push_back(id(rng));
    for (int d = 0; d < kDim; ++d) r.grads.push_back(g(rng) * (1 + i % 7));
    r.pull_ids.push_back(id(rng));
  }
  return r;
}

// Every row 0..40 of the tables, as bytes (pulled at `step` without push).
std::string AllRows(JobTables& t, uint64_t step) {
  std::vector<uint64_t> ids(41);
  for (uint64_t i = 0; i < ids.size(); ++i) ids[i] = i;
  Call c;
  c.req.set_job_id("j");
  c.req.set_step(step);
  c.req.add_pull()->set_table("emb");
  c.req.mutable_pull(0)->set_ids(Bytes(ids.data(), ids.size()));
  c.Start(t);
  EXPECT_TRUE(c.ok());
  return c.resp.rows_size() == 1 ? c.resp.rows(0).values() : "";
}

// `steps` steps of `workers` workers, each sent whole (split = false) or in
// 2 to 4 parts, all parts of a step shuffled, one part of each worker sent
// twice (a retry). Returns the tables' rows at the end; `pulled` gets every
// worker's pulled rows per step, in pull order.
std::string RunSteps(const std::string& mode, uint32_t workers, int steps,
                     bool split, std::vector<std::string>* pulled) {
  auto t = Make(Spec(mode), workers);
  std::mt19937_64 rows_rng(11), order_rng(23);
  for (int s = 0; s < steps; ++s) {
    std::vector<StepRows> rows;
    for (uint32_t w = 0; w < workers; ++w) {
      rows.push_back(RandomRows(rows_rng, 20 + 5 * w));
    }
    std::vector<std::unique_ptr<Call>> calls;
    std::vector<std::pair<uint32_t, uint32_t>> part_of;  // (worker, parts)
    for (uint32_t w = 0; w < workers; ++w) {
      const uint32_t parts = split ? 2 + (s + w) % 3 : 0;
      for (uint32_t p = 0; p < std::max(parts, 1u); ++p) {
        calls.push_back(PartCall(w, s, rows[w], p, parts));
        part_of.emplace_back(w, parts);
      }
      if (split) calls.push_back(PartCall(w, s, rows[w], parts - 1, parts, 1));
      if (split) part_of.emplace_back(w, parts);
    }
    std::vector<size_t> order(calls.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    // BSP needs every worker in any order; ASP applies per worker, so the
    // workers go one after the other there (their parts still shuffled).
    if (mode == "BSP") {
      std::shuffle(order.begin(), order.end(), order_rng);
    } else {
      std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
        return part_of[a].first < part_of[b].first;
      });
      for (size_t b = 0, e = 0; b < order.size(); b = e) {
        for (e = b; e < order.size() &&
                    part_of[order[e]].first == part_of[order[b]].first;
             ++e) {
        }
        std::shuffle(order.begin() + b, order.begin() + e, order_rng);
      }
    }
    for (size_t i : order) calls[i]->Start(*t);
    for (uint32_t w = 0; w < workers; ++w) {
      std::string got;
      for (size_t i = 0; i < calls.size(); ++i) {
        // The retry answers the same rows as the first; count the first.
        if (calls[i]->req.worker() != w || calls[i]->req.attempt() != 0) {
          continue;
        }
        EXPECT_TRUE(calls[i]->ok())
            << mode << " step " << s << " worker " << w << ": "
            << calls[i]->status.value_or(absl::UnknownError("no answer"));
        if (calls[i]->resp.rows_size() == 1) {
          got += calls[i]->resp.rows(0).values();
        }
      }
      pulled->push_back(got);
    }
  }
  return AllRows(*t, steps);
}

TEST(JobTablesPartsTest, BspSplitStepsEqualTheUnsplitOnesBitwise) {
  std::vector<std::string> whole_pulls, split_pulls;
  const std::string whole = RunSteps("BSP", 3, 6, false, &whole_pulls);
  const std::string split = RunSteps("BSP", 3, 6, true, &split_pulls);
  ASSERT_FALSE(whole.empty());
  EXPECT_TRUE(whole == split) << "tables differ";
  EXPECT_TRUE(whole_pulls == split_pulls) << "pulled rows differ";
}

TEST(JobTablesPartsTest, AspSplitStepsEqualTheUnsplitOnesBitwise) {
  std::vector<std::string> whole_pulls, split_pulls;
  const std::string whole = RunSteps("ASP", 2, 6, false, &whole_pulls);
  const std::string split = RunSteps("ASP", 2, 6, true, &split_pulls);
  ASSERT_FALSE(whole.empty());
  EXPECT_TRUE(whole == split) << "tables differ";
  EXPECT_TRUE(whole_pulls == split_pulls) << "pulled rows differ";
}

TEST(JobTablesPartsTest, AspAppliesOnceWhenTheLastPartIsIn) {
  auto t = Make(Spec("ASP"), 1);
  std::mt19937_64 rng(5);
  const StepRows rows = RandomRows(rng, 12);
  const std::string before = AllRows(*t, 0);
  auto p0 = PartCall(0, 0, rows, 0, 3);
  auto p2 = PartCall(0, 0, rows, 2, 3);
  p0->Start(*t);
  p2->Start(*t);
  EXPECT_FALSE(p0->status.has_value()) << "answered before the last part";
  EXPECT_EQ(t->version(), 0u);
  EXPECT_EQ(AllRows(*t, 0), before);
  EXPECT_GT(t->bytes_used(), 0u);
  auto p1 = PartCall(0, 0, rows, 1, 3);
  p1->Start(*t);
  ASSERT_TRUE(p0->ok() && p1->ok() && p2->ok());
  EXPECT_EQ(t->version(), 1u) << "one push, applied once";
  const std::string after = AllRows(*t, 0);
  EXPECT_NE(after, before);
  // A later retry of any part is a duplicate and changes nothing.
  auto again = PartCall(0, 0, rows, 1, 3, 2);
  again->Start(*t);
  ASSERT_TRUE(again->ok());
  EXPECT_TRUE(again->resp.duplicate());
  EXPECT_EQ(t->version(), 1u);
  EXPECT_EQ(AllRows(*t, 0), after);
}

TEST(JobTablesPartsTest, HeldPartsOfAStepCompletedWithoutThemAreStale) {
  JobSpec spec = Spec("BSP");
  spec.mutable_consistency()->set_backup_workers(1);
  auto t = Make(spec, 3);
  std::mt19937_64 rng(9);
  const StepRows rows = RandomRows(rng, 8);
  // Worker 2 is slow: its first part is held when workers 0 and 1 complete
  // the step (a quorum of 2 of 3).
  auto slow0 = PartCall(2, 0, rows, 0, 2);
  slow0->Start(*t);
  auto a = PartCall(0, 0, rows, 0, 0);
  auto b = PartCall(1, 0, rows, 0, 0);
  a->Start(*t);
  b->Start(*t);
  ASSERT_TRUE(a->ok() && b->ok());
  EXPECT_EQ(t->version(), 1u);
  EXPECT_FALSE(slow0->status.has_value());
  const std::string applied = AllRows(*t, 1);
  auto slow1 = PartCall(2, 0, rows, 1, 2);
  slow1->Start(*t);
  ASSERT_TRUE(slow0->ok() && slow1->ok());
  EXPECT_TRUE(slow0->resp.stale());
  EXPECT_TRUE(slow1->resp.stale());
  EXPECT_EQ(AllRows(*t, 1), applied);
  EXPECT_EQ(t->version(), 1u);
}

// The refusals: each fails naming the field, and the tables stay as they
// were (version 0, every row its initial value).
class RefusalTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::mt19937_64 rng(3);
    rows_ = RandomRows(rng, 10);
  }
  void ExpectUnchanged(JobTables& t) {
    EXPECT_EQ(t.version(), 0u);
    EXPECT_EQ(AllRows(t, 0), AllRows(*Make(Spec("BSP"), 2), 0));
  }
  StepRows rows_;
};

TEST_F(RefusalTest, PartNotBelowItsCount) {
  auto t = Make(Spec("BSP"), 2);
  auto c = PartCall(0, 0, rows_, 3, 3);
  c->Start(*t);
  ASSERT_TRUE(c->status.has_value());
  EXPECT_THAT(c->status->message(), HasSubstr("part: 3 is not below parts 3"));
  ExpectUnchanged(*t);
}

TEST_F(RefusalTest, CountOfZeroOrOverTheBound) {
  auto t = Make(Spec("BSP"), 2);
  auto zero = PartCall(0, 0, rows_, 0, 2);
  zero->req.set_part(1);
  zero->req.set_parts(0);
  zero->Start(*t);
  ASSERT_TRUE(zero->status.has_value());
  EXPECT_THAT(zero->status->message(), HasSubstr("parts: 0 with part 1"));
  auto big = PartCall(0, 0, rows_, 0, 2);
  big->req.set_parts(1025);
  big->Start(*t);
  ASSERT_TRUE(big->status.has_value());
  EXPECT_THAT(big->status->message(), HasSubstr("parts: 1025 is over"));
  ExpectUnchanged(*t);
}

TEST_F(RefusalTest, PartsThatDisagreeOnTheCount) {
  for (const char* mode : {"BSP", "ASP"}) {
    auto t = Make(Spec(mode), 2);
    auto first = PartCall(0, 0, rows_, 0, 3);
    auto other = PartCall(0, 0, rows_, 1, 4);
    first->Start(*t);
    other->Start(*t);
    ASSERT_TRUE(other->status.has_value()) << mode;
    EXPECT_THAT(other->status->message(), HasSubstr("parts: 4 for part 1"));
    // The step's held part fails with it.
    ASSERT_TRUE(first->status.has_value()) << mode;
    EXPECT_EQ(first->status->code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(t->bytes_used(), Make(Spec(mode), 2)->bytes_used());
    ExpectUnchanged(*t);
  }
}

TEST_F(RefusalTest, RepeatedPartWithOtherRows) {
  auto t = Make(Spec("BSP"), 2);
  auto first = PartCall(0, 0, rows_, 1, 2);
  StepRows changed = rows_;
  changed.grads.back() += 1.0f;
  auto again = PartCall(0, 0, changed, 1, 2, 1);
  first->Start(*t);
  again->Start(*t);
  ASSERT_TRUE(again->status.has_value());
  EXPECT_THAT(again->status->message(),
              HasSubstr("part: part 1 of 2 of worker 0's step 0 came again"));
  ASSERT_TRUE(first->status.has_value());
  ExpectUnchanged(*t);
}

TEST_F(RefusalTest, PartsBeyondTheBufferBound) {
  auto t = Make(Spec("BSP"), 2, /*split_buffer_bytes=*/600);
  auto a = PartCall(0, 0, rows_, 0, 2);  // 5 rows: 100 B + 40 B + 256
  auto b = PartCall(1, 0, rows_, 0, 2);
  a->Start(*t);
  EXPECT_FALSE(a->status.has_value());
  b->Start(*t);
  ASSERT_TRUE(b->status.has_value());
  EXPECT_EQ(b->status->code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(b->status->message(), HasSubstr("over the bound of 600"));
  EXPECT_FALSE(a->status.has_value()) << "another step's parts stay";
  t->Close(absl::CancelledError("end"));
  EXPECT_EQ(a->status->code(), absl::StatusCode::kCancelled);
}

TEST_F(RefusalTest, PartsThatNeverCompleteFailAtTheDeadline) {
  for (const char* mode : {"BSP", "SSP"}) {
    auto t = Make(Spec(mode), 2);
    auto p0 = PartCall(1, 0, rows_, 0, 4);
    auto p2 = PartCall(1, 0, rows_, 2, 4);
    p0->Start(*t);
    p2->Start(*t);
    t->CheckDeadlines(absl::Now());
    EXPECT_FALSE(p0->status.has_value()) << "before the deadline";
    t->CheckDeadlines(absl::Now() + absl::Seconds(2));
    ASSERT_TRUE(p0->status.has_value() && p2->status.has_value()) << mode;
    EXPECT_EQ(p0->status->code(), absl::StatusCode::kDeadlineExceeded);
    EXPECT_THAT(p0->status->message(),
                HasSubstr("worker 1's push was split in 4 parts and parts "
                          "[1, 3] did not come"));
    ExpectUnchanged(*t);
  }
}

}  // namespace
}  // namespace ps
