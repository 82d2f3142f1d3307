#include "worker/trainer/trainer.h"

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "core/model_spec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/client/testing/fake_parameter_client.h"
#include "worker/data/dataset.h"

namespace ps {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;

// An MLP on the synthetic set: 1200 examples, batch 30 -> 40 steps per epoch.
JobSpec SyntheticJob(uint32_t epochs) {
  JobSpec job;
  job.set_name("synthetic-mlp");
  job.set_seed(17);
  Mlp* mlp = job.mutable_model()->mutable_mlp();
  mlp->set_input_dim(784);
  mlp->add_hidden(32);
  mlp->set_num_classes(10);
  DataSpec* data = job.mutable_data();
  data->set_dataset("synthetic");
  data->set_synthetic_train(1200);
  data->set_synthetic_test(300);
  data->set_batch_size(30);
  data->set_epochs(epochs);
  job.mutable_optimizer()->set_kind(SGD);
  job.mutable_optimizer()->set_learning_rate(0.05f);
  return job;
}

std::vector<float> Init(const JobSpec& job) {
  return *InitialParameters(job.seed(), ModelTensors(job.model()));
}

FakeParameterServer::Options ServerOptions(const JobSpec& job) {
  FakeParameterServer::Options o;
  o.learning_rate = job.optimizer().learning_rate();
  o.momentum = job.optimizer().momentum();
  return o;
}

TrainerOptions Options(const JobSpec& job) {
  TrainerOptions o;
  o.job = job;
  o.report_interval = absl::InfiniteDuration();  // reports by step count
  return o;
}

struct RunResult {
  absl::Status status;
  std::vector<Progress> reports;
  std::vector<float> params;
  uint64_t version = 0;
};

RunResult Train(const TrainerOptions& options,
                const std::vector<float>& initial,
                FakeParameterServer::Options server_options,
                const Trainer::AbortCheck& abort = nullptr) {
  FakeParameterServer server(initial, server_options);
  auto client = server.NewClient(options.rank);
  RunResult r;
  absl::StatusOr<std::unique_ptr<Trainer>> trainer =
      Trainer::Create(options, client.get());
  if (!trainer.ok()) {
    r.status = trainer.status();
    return r;
  }
  r.status = (*trainer)->Run([&](const Progress& p) { r.reports.push_back(p); },
                             abort);
  r.params = server.parameters();
  r.version = server.version();
  if (r.status.ok()) {
    EXPECT_EQ((*trainer)->parameters(), r.params);
  }
  return r;
}

TEST(TrainerTest, LearnsTheSyntheticSet) {
  JobSpec job = SyntheticJob(2);
  job.mutable_data()->set_synthetic_train(3000);
  job.mutable_data()->set_batch_size(50);  // 60 steps per epoch
  job.mutable_optimizer()->set_learning_rate(0.1f);
  TrainerOptions options = Options(job);
  options.report_every_steps = 20;
  const RunResult r = Train(options, Init(job), ServerOptions(job));
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_EQ(r.version, 120u);
  ASSERT_EQ(r.reports.size(), 6u);  // steps 20, 40, ..., 100, and the end
  const Progress& first = r.reports.front();
  const Progress& last = r.reports.back();
  EXPECT_EQ(first.step(), 20u);
  EXPECT_EQ(last.step(), 120u);
  EXPECT_EQ(last.total_steps(), 120u);
  EXPECT_EQ(last.epoch(), 2u);
  EXPECT_LT(last.loss(), 0.25f * first.loss());
  EXPECT_GE(last.train_accuracy(), 0.95f);
  // 0.97 with this seed; the margin absorbs other BLAS kernels' rounding.
  EXPECT_GE(last.test_accuracy(), 0.93f);
  for (size_t i = 0; i + 1 < r.reports.size(); ++i) {
    EXPECT_EQ(r.reports[i].test_accuracy(), -1.0f);  // eval_every = 0
  }
}

TEST(TrainerTest, SameSeedGivesBitwiseIdenticalParameters) {
  JobSpec job = SyntheticJob(2);
  job.mutable_optimizer()->set_momentum(0.9f);
  TrainerOptions options = Options(job);
  options.devices = {"cpu:0", "cpu:1"};
  options.weights = {2, 1};
  options.loader_threads = 3;
  const RunResult a = Train(options, Init(job), ServerOptions(job));
  options.loader_threads = 1;
  options.prefetch = 1;
  const RunResult b = Train(options, Init(job), ServerOptions(job));
  ASSERT_TRUE(a.status.ok()) << a.status;
  ASSERT_TRUE(b.status.ok()) << b.status;
  EXPECT_EQ(a.params, b.params);  // bitwise: float ==, element by element
  EXPECT_NE(a.params, Init(job));
  // A different seed shuffles differently.
  job.set_seed(18);
  options = Options(job);
  const RunResult c = Train(options, Init(SyntheticJob(2)), ServerOptions(job));
  ASSERT_TRUE(c.status.ok()) << c.status;
  EXPECT_NE(a.params, c.params);
}

TEST(TrainerTest, AbortStopsBeforeTheNextStep) {
  const JobSpec job = SyntheticJob(3);
  int checks = 0;
  const RunResult r = Train(Options(job), Init(job), ServerOptions(job),
                            [&] { return ++checks > 7; });
  EXPECT_EQ(r.status.code(), absl::StatusCode::kCancelled) << r.status;
  EXPECT_THAT(r.status.message(), HasSubstr("step 7"));
  EXPECT_EQ(r.version, 7u);
}

TEST(TrainerTest, ProgressCarriesTheTimeSplit) {
  JobSpec job = SyntheticJob(1);
  job.set_eval_every(15);
  TrainerOptions options = Options(job);
  options.report_every_steps = 10;
  const RunResult r = Train(options, Init(job), ServerOptions(job));
  ASSERT_TRUE(r.status.ok()) << r.status;
  // Steps 10, 15 (evaluation), 25, 30 (evaluation), the end.
  std::vector<uint64_t> steps;
  for (const Progress& p : r.reports) steps.push_back(p.step());
  EXPECT_EQ(steps, (std::vector<uint64_t>{10, 15, 25, 30, 40}));
  const Progress* prev = nullptr;
  for (const Progress& p : r.reports) {
    EXPECT_GT(p.data_s(), 0.0);
    EXPECT_GT(p.compute_s(), 0.0);
    EXPECT_GT(p.comm_s(), 0.0);
    EXPECT_GE(p.elapsed_s(), p.data_s() + p.compute_s() + p.comm_s());
    EXPECT_GT(p.samples_per_s(), 0.0f);
    EXPECT_GT(p.loss(), 0.0f);
    if (prev != nullptr) {
      EXPECT_GE(p.data_s(), prev->data_s());
      EXPECT_GE(p.compute_s(), prev->compute_s());
      EXPECT_GE(p.comm_s(), prev->comm_s());
    }
    prev = &p;
  }
  EXPECT_EQ(r.reports[0].test_accuracy(), -1.0f);
  EXPECT_GE(r.reports[1].test_accuracy(), 0.0f);  // evaluated at step 15
  EXPECT_GE(r.reports.back().test_accuracy(), 0.0f);
}

// Ranks 0 and 1 of a two-worker job, run side by side on one fake server.
struct TwoRanks {
  std::unique_ptr<ParameterClient> c0, c1;
  std::unique_ptr<Trainer> t0, t1;
  absl::Status s0, s1;
};

// Creates both ranks' trainers from o0 and o1 (rank and num_workers set
// here) on `server` (for 2 workers) and runs them to the end, rank 1 on a
// thread; each rank's reports go to its callback. A failed Create is that
// rank's status, and then neither runs.
TwoRanks RunTwoRanks(FakeParameterServer& server, TrainerOptions o0,
                     TrainerOptions o1, const Trainer::ProgressCallback& on0,
                     const Trainer::ProgressCallback& on1) {
  TwoRanks r;
  o0.rank = 0;
  o1.rank = 1;
  o0.num_workers = o1.num_workers = 2;
  r.c0 = server.NewClient(0);
  r.c1 = server.NewClient(1);
  absl::StatusOr<std::unique_ptr<Trainer>> t0 = Trainer::Create(o0, r.c0.get());
  absl::StatusOr<std::unique_ptr<Trainer>> t1 = Trainer::Create(o1, r.c1.get());
  if (!t0.ok() || !t1.ok()) {
    r.s0 = t0.status();
    r.s1 = t1.status();
    return r;
  }
  r.t0 = *std::move(t0);
  r.t1 = *std::move(t1);
  std::thread other([&] { r.s1 = r.t1->Run(on1, nullptr); });
  r.s0 = r.t0->Run(on0, nullptr);
  other.join();
  return r;
}

TEST(TrainerTest, OnlyRankZeroEvaluates) {
  const JobSpec job = SyntheticJob(1);
  FakeParameterServer::Options server_options = ServerOptions(job);
  server_options.num_workers = 2;
  FakeParameterServer server(Init(job), server_options);
  Progress p0, p1;
  const TwoRanks r = RunTwoRanks(
      server, Options(job), Options(job), [&](const Progress& p) { p0 = p; },
      [&](const Progress& p) { p1 = p; });
  ASSERT_TRUE(r.s0.ok()) << r.s0;
  ASSERT_TRUE(r.s1.ok()) << r.s1;
  EXPECT_EQ(r.t0->total_steps(), 20u);  // 600 examples each / 30
  EXPECT_EQ(r.t1->total_steps(), 20u);
  EXPECT_EQ(server.pushes(), 40u);
  EXPECT_EQ(server.version(), 20u);
  // BSP: both workers end with the server's parameters.
  EXPECT_EQ(r.t0->parameters(), server.parameters());
  EXPECT_EQ(r.t1->parameters(), server.parameters());
  EXPECT_GE(p0.test_accuracy(), 0.0f);
  EXPECT_EQ(p1.test_accuracy(), -1.0f);
  EXPECT_EQ(p1.step(), 20u);
}

// After SHRINK lost rank 0, workerd tells another rank that it leads
// (TrainerOptions::leader): that rank evaluates, rank 0's trainer not.
TEST(TrainerTest, TheLeaderEvaluatesWhicheverRankItHolds) {
  JobSpec job = SyntheticJob(1);
  job.set_eval_every(5);
  FakeParameterServer::Options server_options = ServerOptions(job);
  server_options.num_workers = 2;
  FakeParameterServer server(Init(job), server_options);
  TrainerOptions options0 = Options(job);
  options0.leader = [] { return false; };
  TrainerOptions options1 = Options(job);
  options1.report_every_steps = 5;
  // Leads from step 10 on, as after a heartbeat that said so.
  std::atomic<bool> leads{false};
  options1.leader = [&leads] { return leads.load(); };
  std::vector<Progress> r1;
  Progress p0;
  const TwoRanks r = RunTwoRanks(
      server, options0, options1, [&](const Progress& p) { p0 = p; },
      [&](const Progress& p) {
        r1.push_back(p);
        if (p.step() >= 10) leads = true;
      });
  ASSERT_TRUE(r.s0.ok()) << r.s0;
  ASSERT_TRUE(r.s1.ok()) << r.s1;
  EXPECT_EQ(p0.test_accuracy(), -1.0f);
  ASSERT_FALSE(r1.empty());
  // Due every 5 steps: not evaluated at 5 and 10, evaluated at 15 and 20.
  std::vector<std::pair<uint64_t, bool>> evaluated;
  for (const Progress& p : r1) {
    evaluated.emplace_back(p.step(), p.test_accuracy() >= 0.0f);
  }
  EXPECT_THAT(evaluated, ElementsAre(Pair(5, false), Pair(10, false),
                                     Pair(15, true), Pair(20, true)));
}

TEST(TrainerTest, StartStepResumesAtTheRightBatch) {
  // A full run, and a run cut at step 47 then resumed from the parameters
  // the shards held then (plain SGD: the parameters are the whole state).
  const JobSpec job = SyntheticJob(2);
  const RunResult full = Train(Options(job), Init(job), ServerOptions(job));
  ASSERT_TRUE(full.status.ok()) << full.status;

  int checks = 0;
  const RunResult cut = Train(Options(job), Init(job), ServerOptions(job),
                              [&] { return ++checks > 47; });
  ASSERT_EQ(cut.status.code(), absl::StatusCode::kCancelled);
  ASSERT_EQ(cut.version, 47u);

  TrainerOptions resumed = Options(job);
  resumed.start_step = 47;  // epoch 1, batch 7
  FakeParameterServer::Options server_options = ServerOptions(job);
  server_options.initial_version = 47;
  const RunResult rest = Train(resumed, cut.params, server_options);
  ASSERT_TRUE(rest.status.ok()) << rest.status;
  EXPECT_EQ(rest.version, 80u);
  EXPECT_EQ(rest.params, full.params);
}

TEST(TrainerTest, ParametersHeldFromARunBeforeReplaceTheFirstPull) {
  // After a re-placement the worker holds the refused step's parameters:
  // they are taken as they are (the shards hold the same), not pulled.
  const JobSpec job = SyntheticJob(1);
  const std::vector<float> shards = Init(job);
  std::vector<float> held = shards;
  for (float& v : held) v += 1.0f;  // tells the two apart
  for (const bool right_size : {true, false}) {
    FakeParameterServer server(shards, ServerOptions(job));
    auto client = server.NewClient(0);
    TrainerOptions options = Options(job);
    options.initial_params = std::make_shared<std::vector<float>>(held);
    if (!right_size) options.initial_params->pop_back();
    auto trainer = Trainer::Create(options, client.get());
    ASSERT_TRUE(trainer.ok()) << trainer.status();
    const absl::Status s = (*trainer)->Run(nullptr, [] { return true; });
    EXPECT_EQ(s.code(), absl::StatusCode::kCancelled) << s;
    EXPECT_EQ((*trainer)->parameters(), right_size ? held : shards)
        << right_size;
  }
}

TEST(TrainerTest, StartingAtTheEndOnlyEvaluates) {
  const JobSpec job = SyntheticJob(1);
  TrainerOptions options = Options(job);
  options.start_step = 40;
  FakeParameterServer::Options server_options = ServerOptions(job);
  server_options.initial_version = 40;
  const RunResult r = Train(options, Init(job), server_options);
  ASSERT_TRUE(r.status.ok()) << r.status;
  ASSERT_EQ(r.reports.size(), 1u);
  EXPECT_EQ(r.reports[0].step(), 40u);
  EXPECT_GE(r.reports[0].test_accuracy(), 0.0f);
  EXPECT_EQ(r.params, Init(job));
}

TEST(TrainerTest, ClientErrorsCarryTheStep) {
  const JobSpec job = SyntheticJob(1);
  FakeParameterServer server(Init(job), ServerOptions(job));
  server.FailPush(0, 12, absl::UnavailableError("shard 1 unreachable"));
  auto client = server.NewClient(0);
  auto trainer = Trainer::Create(Options(job), client.get());
  ASSERT_TRUE(trainer.ok());
  const absl::Status s = (*trainer)->Run(nullptr, nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(s.message(), "step 12: shard 1 unreachable");
}

TEST(TrainerTest, PullErrorsAreNamed) {
  const JobSpec job = SyntheticJob(1);
  FakeParameterServer server({1.0f, 2.0f}, ServerOptions(job));  // wrong size
  auto client = server.NewClient(0);
  auto trainer = Trainer::Create(Options(job), client.get());
  ASSERT_TRUE(trainer.ok());
  const absl::Status s = (*trainer)->Run(nullptr, nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("pull at step 0"));
}

TEST(TrainerTest, RejectsBadOptionsNamingTheField) {
  FakeParameterServer server({0.0f}, {});
  auto client = server.NewClient(0);
  struct Case {
    std::function<void(TrainerOptions*)> mutate;
    std::string field;
  };
  const std::vector<Case> cases = {
      {[](TrainerOptions* o) { o->job.clear_model(); }, "model"},
      {[](TrainerOptions* o) { o->job.mutable_data()->set_batch_size(0); },
       "data.batch_size"},
      {[](TrainerOptions* o) { o->job.mutable_data()->set_batch_size(1201); },
       "data.batch_size"},
      {[](TrainerOptions* o) { o->job.mutable_data()->set_epochs(0); },
       "data.epochs"},
      {[](TrainerOptions* o) { o->rank = 2, o->num_workers = 2; }, "rank"},
      {[](TrainerOptions* o) { o->start_step = 41; }, "start_step"},
      {[](TrainerOptions* o) {
         o->job.mutable_model()->mutable_mlp()->set_input_dim(100);
       },
       "model.input_dim"},
      {[](TrainerOptions* o) {
         o->job.mutable_model()->mutable_mlp()->set_num_classes(5);
       },
       "model.num_classes"},
      {[](TrainerOptions* o) { o->job.mutable_data()->set_dataset("cifar"); },
       "data.dataset"},
      {[](TrainerOptions* o) {
         o->devices = {"cpu:0", "cpu:0"};
       },
       "devices"},
  };
  for (const Case& c : cases) {
    TrainerOptions options = Options(SyntheticJob(1));
    c.mutate(&options);
    const absl::Status s = Trainer::Create(options, client.get()).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_THAT(s.message(), HasSubstr(c.field));
  }
  EXPECT_FALSE(Trainer::Create(Options(SyntheticJob(1)), nullptr).ok());
}

// Overlapped steps (a fake that supports per-tensor exchanges).
struct TwoWorkers {
  absl::Status s0, s1;
  std::vector<float> params;
  Progress last0;
  std::vector<FakeParameterServer::ExchangeRecord> exchanges;
};

TwoWorkers TrainTwo(const JobSpec& job, bool overlap, size_t fusion_bytes,
                    bool server_exchanges) {
  FakeParameterServer::Options server_options = ServerOptions(job);
  server_options.num_workers = 2;
  if (server_exchanges) server_options.tensors = ModelTensors(job.model());
  FakeParameterServer server(Init(job), server_options);
  std::vector<std::unique_ptr<ParameterClient>> clients;
  std::vector<std::unique_ptr<Trainer>> trainers;
  for (uint32_t rank = 0; rank < 2; ++rank) {
    TrainerOptions options = Options(job);
    options.rank = rank;
    options.num_workers = 2;
    options.devices = {"cpu:0", "cpu:1"};
    options.weights = {2, 1};
    options.overlap = overlap;
    options.fusion_bytes = fusion_bytes;
    clients.push_back(server.NewClient(rank));
    trainers.push_back(*Trainer::Create(options, clients.back().get()));
  }
  TwoWorkers r;
  std::thread other([&] { r.s1 = trainers[1]->Run(nullptr, nullptr); });
  r.s0 = trainers[0]->Run(nullptr, nullptr);
  other.join();
  r.last0 = trainers[0]->last_progress();
  r.params = server.parameters();
  if (r.s0.ok()) {
    EXPECT_EQ(trainers[0]->parameters(), r.params);
  }
  r.exchanges = server.exchanges();
  return r;
}

TEST(TrainerOverlapTest, BspIsBitwiseTheSameWithOverlapOnAndOff) {
  JobSpec job = SyntheticJob(2);
  job.mutable_model()->mutable_mlp()->add_hidden(16);  // 3 layers
  job.mutable_optimizer()->set_momentum(0.9f);
  const TwoWorkers off = TrainTwo(job, false, 1, true);
  ASSERT_TRUE(off.s0.ok() && off.s1.ok()) << off.s0 << " " << off.s1;
  EXPECT_FALSE(off.last0.overlap());
  EXPECT_TRUE(off.exchanges.empty());
  for (size_t fusion : {size_t{1}, size_t{4096}, size_t{1} << 20}) {
    SCOPED_TRACE(fusion);
    const TwoWorkers on = TrainTwo(job, true, fusion, true);
    ASSERT_TRUE(on.s0.ok() && on.s1.ok()) << on.s0 << " " << on.s1;
    EXPECT_TRUE(on.last0.overlap());
    EXPECT_EQ(on.params, off.params);  // bitwise: float ==, element by element
    EXPECT_NE(on.params, Init(job));
  }
  // A client without per-tensor exchanges: the blocking step, same result.
  const TwoWorkers fallback = TrainTwo(job, true, 1, false);
  ASSERT_TRUE(fallback.s0.ok()) << fallback.s0;
  EXPECT_FALSE(fallback.last0.overlap());
  EXPECT_EQ(fallback.params, off.params);
}

TEST(TrainerOverlapTest, PushesLayerByLayerLastFirstFusingSmallOnes) {
  JobSpec job = SyntheticJob(1);
  job.mutable_model()->mutable_mlp()->add_hidden(16);  // 784-32-16-10
  // fc0 100480 B, fc1 2112 B, fc2 680 B.
  const TwoWorkers each = TrainTwo(job, true, 1, true);
  ASSERT_TRUE(each.s0.ok()) << each.s0;
  std::vector<std::vector<std::string>> step0;
  std::vector<int> priorities;
  for (const auto& x : each.exchanges) {
    if (x.rank != 0 || x.step != 0) continue;
    step0.push_back(x.tensors);
    priorities.push_back(x.priority);
  }
  EXPECT_EQ(step0,
            (std::vector<std::vector<std::string>>{
                {"fc2/w", "fc2/b"}, {"fc1/w", "fc1/b"}, {"fc0/w", "fc0/b"}}));
  // BSP: start order, no priorities (see ExchangePipeline::Options).
  EXPECT_EQ(priorities, (std::vector<int>{0, 0, 0}));
  EXPECT_EQ(each.exchanges.size(), 2u * 3u * 20u);  // workers x layers x steps

  // fc2 (680 B) is held and rides with fc1: 2 exchanges a step.
  const TwoWorkers fused = TrainTwo(job, true, 1024, true);
  ASSERT_TRUE(fused.s0.ok()) << fused.s0;
  step0.clear();
  for (const auto& x : fused.exchanges) {
    if (x.rank == 0 && x.step == 0) step0.push_back(x.tensors);
  }
  EXPECT_EQ(step0,
            (std::vector<std::vector<std::string>>{
                {"fc2/w", "fc2/b", "fc1/w", "fc1/b"}, {"fc0/w", "fc0/b"}}));
  EXPECT_EQ(fused.exchanges.size(), 2u * 2u * 20u);
}

TEST(TrainerOverlapTest, AFailedExchangeFailsTheRunNamingIt) {
  const JobSpec job = SyntheticJob(1);
  FakeParameterServer::Options server_options = ServerOptions(job);
  server_options.tensors = ModelTensors(job.model());
  FakeParameterServer server(Init(job), server_options);
  // The first exchange of step 3 (the last layer's) fails.
  server.FailPush(0, 3, absl::UnavailableError("shard 1 gone"));
  auto client = server.NewClient(0);
  std::unique_ptr<Trainer> trainer =
      *Trainer::Create(Options(job), client.get());
  const absl::Status s = trainer->Run(nullptr, nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_THAT(s.message(), HasSubstr("shard 1 gone"));
  // The next forward that needs that layer reports it; the first step not
  // done is still 3 (its push did not complete).
  EXPECT_THAT(s.message(), HasSubstr("step 4"));
  EXPECT_EQ(trainer->next_step(), 3u);
}

}  // namespace
}  // namespace ps
