// CtrTrainer over in-process fakes (worker/client/testing): a small
// ctr-synthetic job runs to its end, and a trace window records each covered
// step's phases (compute, loading the next batch, the exchanges) inside its
// step; the job's leader evaluates.
#include "worker/trainer/ctr_trainer.h"

#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "common/status_macros.h"
#include "common/text_proto.h"
#include "common/trace_recorder.h"
#include "core/model_spec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/client/testing/fake_parameter_client.h"
#include "worker/client/testing/fake_sparse_client.h"

namespace ps {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;

// 2048 examples of 256: 8 steps.
constexpr char kJob[] = R"pb(
  name: "ctr-tiny"
  model { ctr { table: "emb" embedding_dim: 4 hidden: 16 } }
  tables {
    name: "emb"
    dim: 4
    init { kind: NORMAL scale: 0.01 }
    optimizer { kind: SGD learning_rate: 0.05 }
  }
  data {
    dataset: "ctr-synthetic"
    batch_size: 256
    epochs: 1
    synthetic_train: 2048
    synthetic_test: 512
  }
  optimizer { kind: SGD learning_rate: 0.05 }
  consistency { mode: BSP }
  num_workers: 1
  seed: 3
)pb";

// One worker's fakes for `spec`: the dense server and client, the sparse
// client.
struct Fakes {
  std::unique_ptr<FakeParameterServer> server;
  std::unique_ptr<ParameterClient> dense;
  std::unique_ptr<FakeSparseClient> sparse;
};

absl::StatusOr<Fakes> MakeFakes(const JobSpec& spec) {
  Fakes f;
  PS_ASSIGN_OR_RETURN(
      std::vector<float> initial,
      InitialParameters(spec.seed(), ModelTensors(spec.model())));
  FakeParameterServer::Options server_options;
  server_options.learning_rate = 0.05f;
  f.server =
      std::make_unique<FakeParameterServer>(std::move(initial), server_options);
  f.dense = f.server->NewClient(0);
  PS_ASSIGN_OR_RETURN(f.sparse, FakeSparseClient::Create(spec));
  return f;
}

TEST(CtrTrainerTest, RunsToTheEndAndTracesTheWindowsSteps) {
  JobSpec spec;
  ASSERT_TRUE(ParseTextProto(kJob, "job", &spec).ok());
  absl::StatusOr<Fakes> fakes = MakeFakes(spec);
  ASSERT_TRUE(fakes.ok()) << fakes.status();

  TraceRecorder recorder;
  TraceWindow window;
  window.set_job_id("job-000001");
  window.set_begin_step(2);
  window.set_end_step(5);
  recorder.SetWindow(window);
  CtrTrainer::Options options;
  options.job = spec;
  options.eval_batch = 512;
  options.tracer = &recorder;
  absl::StatusOr<std::unique_ptr<CtrTrainer>> trainer =
      CtrTrainer::Create(options, fakes->dense.get(), fakes->sparse.get());
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  ASSERT_TRUE((*trainer)->Run(nullptr, nullptr).ok());
  EXPECT_EQ((*trainer)->last_progress().step(), 8u);
  EXPECT_GT((*trainer)->last_progress().test_auc(), 0.0f);
  EXPECT_EQ(fakes->server->version(), 8u);
  EXPECT_EQ(fakes->sparse->version(), 8u);
  EXPECT_TRUE(recorder.Complete());

  // Per step in [2, 5): one span of each kind, the phases inside the step,
  // one after the other.
  const TraceRecorder::Snapshot snap = recorder.Copy();
  std::map<uint64_t, std::map<TraceSpanKind, TraceSpan>> by_step;
  for (const TraceSpan& s : snap.spans) {
    EXPECT_TRUE(by_step[s.step()].emplace(s.kind(), s).second)
        << "two " << TraceSpanKind_Name(s.kind()) << " of step " << s.step();
  }
  ASSERT_EQ(by_step.size(), 3u);
  for (uint64_t step = 2; step < 5; ++step) {
    std::map<TraceSpanKind, TraceSpan>& k = by_step[step];
    ASSERT_EQ(k.size(), 4u) << "step " << step;
    const TraceSpan& whole = k[TRACE_STEP];
    int64_t at = whole.start_ns();
    for (TraceSpanKind phase :
         {TRACE_COMPUTE, TRACE_DATA_WAIT, TRACE_COMM_WAIT}) {
      const TraceSpan& p = k[phase];
      EXPECT_EQ(p.start_ns(), at) << TraceSpanKind_Name(phase);
      EXPECT_LE(p.start_ns(), p.end_ns());
      at = p.end_ns();
    }
    EXPECT_LE(at, whole.end_ns());
  }
}

// The leader evaluates, whichever rank holds it (workerd: the coordinator's
// heartbeat answers; after SHRINK lost rank 0, another rank leads): here
// the rank learns that it leads after its report of step 4, so of the
// evaluations due every 2 steps it runs the one at 6 and the final one, not
// those at 2 and 4.
TEST(CtrTrainerTest, TheLeaderEvaluates) {
  JobSpec spec;
  ASSERT_TRUE(ParseTextProto(kJob, "job", &spec).ok());
  spec.set_eval_every(2);
  absl::StatusOr<Fakes> fakes = MakeFakes(spec);
  ASSERT_TRUE(fakes.ok()) << fakes.status();

  bool leads = false;
  CtrTrainer::Options options;
  options.job = spec;
  options.eval_batch = 512;
  options.leader = [&leads] { return leads; };
  absl::StatusOr<std::unique_ptr<CtrTrainer>> trainer =
      CtrTrainer::Create(options, fakes->dense.get(), fakes->sparse.get());
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  std::vector<std::pair<uint64_t, bool>> evaluated;
  ASSERT_TRUE((*trainer)
                  ->Run(
                      [&](const Progress& p) {
                        evaluated.emplace_back(p.step(), p.test_auc() >= 0);
                        if (p.step() >= 4) leads = true;
                      },
                      nullptr)
                  .ok());
  // Reports at each evaluation point and at the end; ReportDue may add
  // more (report_interval 1 s), which the filter drops.
  std::vector<std::pair<uint64_t, bool>> at_eval_points;
  for (const auto& e : evaluated) {
    if (e.first % 2 == 0) at_eval_points.push_back(e);
  }
  EXPECT_THAT(at_eval_points, ElementsAre(Pair(2, false), Pair(4, false),
                                          Pair(6, true), Pair(8, true)));
}

// One run of `spec` on fresh fakes: the trainer's final parameters and
// progress, and the sparse client's exchanges.
struct CacheRun {
  std::vector<float> params;
  Progress progress;
  std::vector<FakeSparseClient::Record> exchanges;
};

absl::StatusOr<CacheRun> RunWithSpec(const JobSpec& spec,
                                     bool overlap_data = true,
                                     size_t devices = 1) {
  PS_ASSIGN_OR_RETURN(Fakes fakes, MakeFakes(spec));
  CtrTrainer::Options options;
  options.job = spec;
  options.eval_batch = 512;
  options.overlap_data = overlap_data;
  options.devices.assign(devices, "cpu:0");
  PS_ASSIGN_OR_RETURN(
      std::unique_ptr<CtrTrainer> trainer,
      CtrTrainer::Create(options, fakes.dense.get(), fakes.sparse.get()));
  PS_RETURN_IF_ERROR(trainer->Run(nullptr, nullptr));
  CacheRun run;
  run.params = trainer->parameters();
  run.progress = trainer->last_progress();
  run.exchanges = fakes.sparse->exchanges();
  return run;
}

// The training exchanges (the start's pull and one per step), not the
// evaluation's pulls after them.
uint64_t TrainRowsPulled(const CacheRun& r, uint64_t steps) {
  uint64_t n = 0;
  for (size_t i = 0; i <= steps && i < r.exchanges.size(); ++i) {
    n += r.exchanges[i].pulled_ids;
  }
  return n;
}

// An elastic data plan for kJob's 8 steps of 256 examples on rank 0 alone:
// segments of `segment_steps` steps (the last one done at step 8), or
// rank 1 instead of 0 from step `leave_at` on. The steps asked, in order.
struct ScriptedPlan {
  uint64_t segment_steps = 8;
  uint64_t leave_at = UINT64_MAX;
  std::vector<uint64_t> asked;

  absl::StatusOr<GetDataPlanResponse> operator()(uint64_t step,
                                                 uint64_t examples) {
    asked.push_back(step);
    GetDataPlanResponse r;
    if (examples != 2048) return absl::InternalError("wrong training set");
    if (step >= 8) {
      r.set_done(true);
      return r;
    }
    const uint64_t begin = step / segment_steps * segment_steps;
    r.mutable_segment()->set_start_step(begin);
    r.mutable_segment()->set_offset(begin * 256);
    r.mutable_segment()->add_ranks(step >= leave_at ? 1 : 0);
    r.set_planned_until(std::min<uint64_t>(begin + segment_steps, 8));
    return r;
  }
};

struct ElasticRun {
  absl::Status status;
  uint64_t next_step = 0;
  std::vector<float> params;
  std::vector<FakeSparseClient::Record> exchanges;
};

ElasticRun RunElastic(ScriptedPlan* plan) {
  ElasticRun run;
  JobSpec spec;
  EXPECT_TRUE(ParseTextProto(kJob, "job", &spec).ok());
  absl::StatusOr<Fakes> fakes = MakeFakes(spec);
  EXPECT_TRUE(fakes.ok()) << fakes.status();
  CtrTrainer::Options options;
  options.job = spec;
  options.eval_batch = 512;
  options.data_plan = [plan](uint64_t step, uint64_t examples) {
    return (*plan)(step, examples);
  };
  absl::StatusOr<std::unique_ptr<CtrTrainer>> trainer =
      CtrTrainer::Create(options, fakes->dense.get(), fakes->sparse.get());
  EXPECT_TRUE(trainer.ok()) << trainer.status();
  if (!trainer.ok()) return run;
  run.status = (*trainer)->Run(nullptr, nullptr);
  run.next_step = (*trainer)->next_step();
  run.params = (*trainer)->parameters();
  run.exchanges = fakes->sparse->exchanges();
  return run;
}

// An elastic data plan: the steps the plan holds, a pull of their own at a
// segment's boundary (the step before pushes without pulling), the same
// model whatever the segments, and a rank left out of a plan stops there.
TEST(CtrTrainerTest, FollowsAnElasticDataPlan) {
  ScriptedPlan whole;
  const ElasticRun a = RunElastic(&whole);
  ASSERT_TRUE(a.status.ok()) << a.status;
  EXPECT_EQ(a.next_step, 8u);
  EXPECT_THAT(whole.asked, ElementsAre(0u, 8u));

  ScriptedPlan halves;
  halves.segment_steps = 4;
  const ElasticRun b = RunElastic(&halves);
  ASSERT_TRUE(b.status.ok()) << b.status;
  EXPECT_THAT(halves.asked, ElementsAre(0u, 4u, 8u));
  EXPECT_EQ(a.params, b.params);
  // Training exchanges: the start's pull, then steps 0-3, the boundary's
  // pull of step 4's rows, steps 4-7.
  ASSERT_GE(b.exchanges.size(), 10u);
  EXPECT_FALSE(b.exchanges[0].push);
  EXPECT_TRUE(b.exchanges[4].push);
  EXPECT_EQ(b.exchanges[4].step, 3u);
  EXPECT_EQ(b.exchanges[4].pulled_ids, 0u);
  EXPECT_FALSE(b.exchanges[5].push);
  EXPECT_EQ(b.exchanges[5].step, 4u);
  EXPECT_GT(b.exchanges[5].pulled_ids, 0u);
  EXPECT_TRUE(b.exchanges[6].push);
  EXPECT_EQ(b.exchanges[6].step, 4u);

  ScriptedPlan leave;
  leave.segment_steps = 4;
  leave.leave_at = 4;
  const ElasticRun c = RunElastic(&leave);
  EXPECT_EQ(c.status.code(), absl::StatusCode::kCancelled) << c.status;
  EXPECT_THAT(c.status.message(),
              HasSubstr("scaled down: rank 0 reads no data from step 4"));
  EXPECT_EQ(c.next_step, 4u);
}

// Reading batch t + 1 on a second thread while batch t computes changes
// nothing but the timing: the same exchanges, bitwise the same model.
TEST(CtrTrainerTest, ReadingAheadIsBitwiseTheSameAsReadingAfterCompute) {
  JobSpec spec;
  ASSERT_TRUE(ParseTextProto(kJob, "job", &spec).ok());
  absl::StatusOr<CacheRun> after = RunWithSpec(spec, /*overlap_data=*/false);
  ASSERT_TRUE(after.ok()) << after.status();
  absl::StatusOr<CacheRun> ahead = RunWithSpec(spec, /*overlap_data=*/true);
  ASSERT_TRUE(ahead.ok()) << ahead.status();
  EXPECT_EQ(after->params, ahead->params);
  EXPECT_EQ(after->progress.test_auc(), ahead->progress.test_auc());
  EXPECT_EQ(after->progress.step(), 8u);
  EXPECT_EQ(ahead->progress.step(), 8u);
  ASSERT_EQ(after->exchanges.size(), ahead->exchanges.size());
  for (size_t i = 0; i < after->exchanges.size(); ++i) {
    EXPECT_EQ(after->exchanges[i].pushed_ids, ahead->exchanges[i].pushed_ids);
    EXPECT_EQ(after->exchanges[i].pulled_ids, ahead->exchanges[i].pulled_ids);
  }
}

// Two devices split each batch: the same rows on the wire as one device
// (the union of the halves' ids is the batch's), a model within rounding
// of one device's, and deterministic.
TEST(CtrTrainerTest, TwoDevicesTrainLikeOne) {
  JobSpec spec;
  ASSERT_TRUE(ParseTextProto(kJob, "job", &spec).ok());
  absl::StatusOr<CacheRun> one = RunWithSpec(spec, true, 1);
  ASSERT_TRUE(one.ok()) << one.status();
  absl::StatusOr<CacheRun> two = RunWithSpec(spec, true, 2);
  ASSERT_TRUE(two.ok()) << two.status();
  ASSERT_EQ(one->exchanges.size(), two->exchanges.size());
  for (size_t i = 0; i < one->exchanges.size(); ++i) {
    EXPECT_EQ(one->exchanges[i].pushed_ids, two->exchanges[i].pushed_ids);
    EXPECT_EQ(one->exchanges[i].pulled_ids, two->exchanges[i].pulled_ids);
  }
  ASSERT_EQ(one->params.size(), two->params.size());
  for (size_t i = 0; i < one->params.size(); ++i) {
    ASSERT_NEAR(one->params[i], two->params[i], 1e-5f) << i;
  }
  EXPECT_NEAR(one->progress.test_auc(), two->progress.test_auc(), 1e-3);
  absl::StatusOr<CacheRun> again = RunWithSpec(spec, true, 2);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(two->params, again->params);
}

// max_row_staleness 0 with a cache: every row pulled at every step, the
// same exchanges and bitwise the same model as without a cache.
TEST(CtrTrainerTest, StalenessZeroWithACacheIsBitwiseTheSameAsWithout) {
  JobSpec plain;
  ASSERT_TRUE(ParseTextProto(kJob, "job", &plain).ok());
  JobSpec cached = plain;
  cached.mutable_tables(0)->set_row_cache_bytes(1 << 20);
  absl::StatusOr<CacheRun> a = RunWithSpec(plain);
  ASSERT_TRUE(a.ok()) << a.status();
  absl::StatusOr<CacheRun> b = RunWithSpec(cached);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(a->params, b->params);
  EXPECT_EQ(a->progress.test_auc(), b->progress.test_auc());
  ASSERT_EQ(a->exchanges.size(), b->exchanges.size());
  for (size_t i = 0; i < a->exchanges.size(); ++i) {
    EXPECT_EQ(a->exchanges[i].pushed_ids, b->exchanges[i].pushed_ids) << i;
    EXPECT_EQ(a->exchanges[i].pulled_ids, b->exchanges[i].pulled_ids) << i;
  }
  EXPECT_EQ(b->progress.sparse().row_cache_hits(), 0u);
  EXPECT_EQ(b->progress.sparse().rows_pulled(), TrainRowsPulled(*a, 8));
  EXPECT_EQ(b->progress.sparse().row_cache_misses(),
            b->progress.sparse().rows_pulled());
  EXPECT_EQ(a->progress.sparse().rows_pushed(),
            b->progress.sparse().rows_pushed());
}

// max_row_staleness 4: fewer rows pulled, the same rows pushed, counters
// that add up, and still deterministic.
TEST(CtrTrainerTest, StalenessFourPullsFewerRowsAndIsDeterministic) {
  JobSpec plain;
  ASSERT_TRUE(ParseTextProto(kJob, "job", &plain).ok());
  JobSpec cached = plain;
  cached.mutable_tables(0)->set_max_row_staleness(4);
  absl::StatusOr<CacheRun> a = RunWithSpec(plain);
  ASSERT_TRUE(a.ok()) << a.status();
  absl::StatusOr<CacheRun> b = RunWithSpec(cached);
  ASSERT_TRUE(b.ok()) << b.status();
  const SparseProgress& sa = a->progress.sparse();
  const SparseProgress& sb = b->progress.sparse();
  EXPECT_EQ(sa.rows_pushed(), sb.rows_pushed());
  EXPECT_EQ(sa.rows_pulled(), TrainRowsPulled(*a, 8));
  EXPECT_EQ(sb.rows_pulled(), TrainRowsPulled(*b, 8));
  EXPECT_LT(sb.rows_pulled(), sa.rows_pulled());
  EXPECT_GT(sb.row_cache_hits(), 0u);
  EXPECT_EQ(sb.row_cache_hits() + sb.row_cache_misses(), sa.rows_pulled());
  EXPECT_EQ(sb.row_cache_misses(), sb.rows_pulled());
  EXPECT_EQ(sb.row_cache_bytes_saved(), sb.row_cache_hits() * (16 + 4 * 4));
  EXPECT_GT(b->progress.test_auc(), 0.0f);

  absl::StatusOr<CacheRun> again = RunWithSpec(cached);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(b->params, again->params);
  EXPECT_EQ(b->progress.test_auc(), again->progress.test_auc());
}

}  // namespace
}  // namespace ps
