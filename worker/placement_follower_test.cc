// Following a re-placed job: the asks for a newer assignment (table-driven,
// a scripted coordinator), and whole runs of a real Trainer against
// FakeParameterServer whose push of one step is refused with ABORTED, as a
// shard refuses an old placement epoch: the follower resumes with the new
// assignment at the refused step, the recomputed gradient is bitwise the
// refused one, and the job ends bitwise where an undisturbed run ends.
#include "worker/placement_follower.h"

#include <deque>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "common/status_macros.h"
#include "core/model_spec.h"
#include "gtest/gtest.h"
#include "worker/client/testing/fake_parameter_client.h"
#include "worker/trainer/trainer.h"

namespace ps {
namespace {

Assignment WithEpoch(uint64_t epoch, uint32_t rank = 0) {
  Assignment a;
  a.set_job_id("j");
  a.set_rank(rank);
  a.set_num_workers(1);
  a.mutable_placement()->set_num_shards(4);
  a.mutable_placement()->set_epoch(epoch);
  return a;
}

absl::Status Refused(uint64_t shard_epoch, uint64_t request_epoch) {
  return absl::AbortedError(
      absl::StrCat("step 13: shard 1 at s1 (PushPull, attempt 1): job j was "
                   "re-placed (placement epoch ",
                   shard_epoch, "; this request has ", request_epoch, ")"));
}

// A coordinator that answers from a script, and the waits between asks.
struct Script {
  std::deque<absl::StatusOr<Assignment>> answers;
  int asks = 0;
  std::vector<absl::Duration> waits;
  bool stopping = false;

  AskAssignment Ask() {
    return [this](absl::Duration) -> absl::StatusOr<Assignment> {
      ++asks;
      if (answers.empty()) return absl::UnavailableError("script ran out");
      absl::StatusOr<Assignment> a = std::move(answers.front());
      answers.pop_front();
      return a;
    };
  }
  FollowOptions Options() {
    FollowOptions o;
    o.wait = [this](absl::Duration d) {
      waits.push_back(d);
      return !stopping;
    };
    o.on_follow = [](const Assignment&, uint64_t) {};
    return o;
  }
};

TEST(AwaitNewerPlacementTest, AsksUntilTheEpochIsNewerWithinABound) {
  const absl::StatusOr<Assignment> same = WithEpoch(2), newer = WithEpoch(3);
  struct Case {
    std::string name;
    std::vector<absl::StatusOr<Assignment>> answers;
    absl::StatusCode code;
    int asks;
    std::string error;  // a part of the message; "" when OK
  } cases[] = {
      {"at once", {newer}, absl::StatusCode::kOk, 1, ""},
      {"after two",
       {same, absl::UnavailableError("restarting"), newer},
       absl::StatusCode::kOk,
       3,
       ""},
      {"never",
       {same, same, same, same, same, newer},
       absl::StatusCode::kFailedPrecondition,
       5,
       "after 5 asks the coordinator has no newer placement (still placement "
       "epoch 2)"},
      {"rank lost",
       {absl::NotFoundError("no rank")},
       absl::StatusCode::kNotFound,
       1,
       "holds no rank in the job any more: no rank"},
      {"rank changed",
       {WithEpoch(3, /*rank=*/1)},
       absl::StatusCode::kFailedPrecondition,
       1,
       "rank 1 of 1, trained as rank 0 of 1"},
      {"older epoch",
       {WithEpoch(1)},
       absl::StatusCode::kFailedPrecondition,
       1,
       "placement epoch 1, older than the 2"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Script script;
    script.answers.assign(c.answers.begin(), c.answers.end());
    absl::StatusOr<Assignment> got = AwaitNewerPlacement(
        WithEpoch(2), Refused(2, 1), script.Ask(), script.Options());
    EXPECT_EQ(got.status().code(), c.code) << got.status();
    EXPECT_EQ(script.asks, c.asks);
    if (got.ok()) {
      EXPECT_EQ(got->placement().epoch(), 3u);
    } else {
      EXPECT_TRUE(absl::StrContains(got.status().message(), c.error))
          << got.status();
      EXPECT_TRUE(
          absl::StrContains(got.status().message(), "job j was re-placed"))
          << got.status();
    }
  }
  // The waits double from first_retry.
  Script script;
  script.answers = {same, same, newer};
  ASSERT_TRUE(AwaitNewerPlacement(WithEpoch(2), Refused(2, 1), script.Ask(),
                                  script.Options())
                  .ok());
  EXPECT_EQ(script.waits,
            (std::vector<absl::Duration>{absl::Milliseconds(100),
                                         absl::Milliseconds(200)}));
}

TEST(AwaitNewerPlacementTest, StoppingOrAbortingEndsTheAsksCancelled) {
  Script stopping;
  stopping.answers = {WithEpoch(2), WithEpoch(3)};
  stopping.stopping = true;
  EXPECT_EQ(AwaitNewerPlacement(WithEpoch(2), Refused(2, 1), stopping.Ask(),
                                stopping.Options())
                .status()
                .code(),
            absl::StatusCode::kCancelled);
  EXPECT_EQ(stopping.asks, 1);
  Script aborted;
  FollowOptions options = aborted.Options();
  options.aborted = [] { return true; };
  EXPECT_EQ(
      AwaitNewerPlacement(WithEpoch(2), Refused(2, 1), aborted.Ask(), options)
          .status()
          .code(),
      absl::StatusCode::kCancelled);
  EXPECT_EQ(aborted.asks, 0);
}

// ---------------------------------------------------------------- runs

// An MLP on the synthetic set: 1200 examples, batch 30 -> 40 steps.
JobSpec SyntheticJob() {
  JobSpec job;
  job.set_name("replaced-mlp");
  job.set_seed(29);
  Mlp* mlp = job.mutable_model()->mutable_mlp();
  mlp->set_input_dim(784);
  mlp->add_hidden(32);
  mlp->add_hidden(16);
  mlp->set_num_classes(10);
  DataSpec* data = job.mutable_data();
  data->set_dataset("synthetic");
  data->set_synthetic_train(1200);
  data->set_synthetic_test(300);
  data->set_batch_size(30);
  data->set_epochs(1);
  job.mutable_optimizer()->set_kind(SGD);
  job.mutable_optimizer()->set_learning_rate(0.05f);
  job.mutable_optimizer()->set_momentum(0.9f);
  return job;
}

// The shards as a worker at placement epoch `epoch` sees them when the job
// is re-placed at each step of `replaced` in turn (epoch i + 1 at
// replaced[i]): each push of a step at or past the first re-placement the
// worker has not followed is refused with ABORTED and applied nowhere.
// Records the whole-model gradient of every PushPull, refused or not.
class ReplacingShards final : public ParameterClient {
 public:
  ReplacingShards(ParameterClient* inner, uint64_t epoch,
                  std::vector<uint64_t> replaced,
                  std::map<uint64_t, std::vector<std::vector<float>>>* pushed)
      : inner_(inner),
        epoch_(epoch),
        replaced_(std::move(replaced)),
        pushed_(pushed) {}
  absl::Status Pull(uint64_t step, absl::Span<float> params) override {
    return inner_->Pull(step, params);
  }
  absl::Status PushPull(uint64_t step, absl::Span<const float> gradient,
                        absl::Span<float> params) override {
    (*pushed_)[step].emplace_back(gradient.begin(), gradient.end());
    PS_RETURN_IF_ERROR(Check(step));
    return inner_->PushPull(step, gradient, params);
  }
  bool supports_exchange() const override {
    return inner_->supports_exchange();
  }
  void StartExchange(TensorExchange x) override {
    if (absl::Status s = Check(x.step); !s.ok()) {
      x.done(s);
      return;
    }
    inner_->StartExchange(std::move(x));
  }

 private:
  absl::Status Check(uint64_t step) const {
    uint64_t shard_epoch = 0;
    while (shard_epoch < replaced_.size() && replaced_[shard_epoch] <= step) {
      ++shard_epoch;
    }
    return epoch_ < shard_epoch ? Refused(shard_epoch, epoch_)
                                : absl::OkStatus();
  }

  ParameterClient* const inner_;
  const uint64_t epoch_;
  const std::vector<uint64_t> replaced_;
  std::map<uint64_t, std::vector<std::vector<float>>>* const pushed_;
};

struct Outcome {
  absl::Status status;
  std::vector<float> params;
  // Each run: (placement epoch, start step).
  std::vector<std::pair<uint64_t, uint64_t>> runs;
  std::vector<std::pair<uint64_t, uint64_t>> followed;  // (epoch, step)
  std::map<uint64_t, std::vector<std::vector<float>>> pushed;
};

// Trains the job (one worker), re-placed at each step of `replaced` (see
// ReplacingShards); the coordinator answers the epoch of the re-placements
// so far.
Outcome TrainReplaced(bool overlap, const std::vector<uint64_t>& replaced) {
  const JobSpec job = SyntheticJob();
  FakeParameterServer::Options server_options;
  server_options.learning_rate = job.optimizer().learning_rate();
  server_options.momentum = job.optimizer().momentum();
  if (overlap) server_options.tensors = ModelTensors(job.model());
  FakeParameterServer server(
      *InitialParameters(job.seed(), ModelTensors(job.model())),
      server_options);
  Outcome out;
  uint64_t coordinator_epoch = 0;
  const RunFrom run = [&](const Assignment& a, uint64_t start,
                          uint64_t* next) -> absl::Status {
    out.runs.emplace_back(a.placement().epoch(), start);
    std::unique_ptr<ParameterClient> shards = server.NewClient(0);
    ReplacingShards client(shards.get(), a.placement().epoch(), replaced,
                           &out.pushed);
    TrainerOptions options;
    options.job = a.spec();
    options.start_step = start;
    options.overlap = overlap;
    options.report_interval = absl::InfiniteDuration();
    std::unique_ptr<Trainer> trainer = *Trainer::Create(options, &client);
    absl::Status s = trainer->Run(nullptr, nullptr);
    *next = trainer->next_step();
    // What the shards committed when they refused this run.
    if (absl::IsAborted(s)) coordinator_epoch = a.placement().epoch() + 1;
    return s;
  };
  const AskAssignment ask = [&](absl::Duration) -> absl::StatusOr<Assignment> {
    Assignment a = WithEpoch(coordinator_epoch);
    *a.mutable_spec() = job;
    return a;
  };
  FollowOptions options;
  options.on_follow = [&](const Assignment& a, uint64_t step) {
    out.followed.emplace_back(a.placement().epoch(), step);
  };
  Assignment first = WithEpoch(0);
  *first.mutable_spec() = job;
  out.status = RunFollowingPlacement(first, run, ask, options);
  out.params = server.parameters();
  return out;
}

TEST(RunFollowingPlacementTest, ResumesAtTheRefusedStepBitwise) {
  const Outcome undisturbed = TrainReplaced(/*overlap=*/false, {});
  ASSERT_TRUE(undisturbed.status.ok()) << undisturbed.status;
  EXPECT_EQ(undisturbed.runs.size(), 1u);

  const Outcome replaced = TrainReplaced(/*overlap=*/false, {13, 27});
  ASSERT_TRUE(replaced.status.ok()) << replaced.status;
  using Run = std::pair<uint64_t, uint64_t>;
  EXPECT_EQ(replaced.runs, (std::vector<Run>{{0, 0}, {1, 13}, {2, 27}}));
  EXPECT_EQ(replaced.followed, (std::vector<Run>{{1, 13}, {2, 27}}));
  for (uint64_t step : {13u, 27u}) {
    SCOPED_TRACE(step);
    // Pushed twice: refused, then recomputed under the new placement;
    // bitwise the same, and the undisturbed run's.
    const std::vector<std::vector<float>>& twice = replaced.pushed.at(step);
    ASSERT_EQ(twice.size(), 2u);
    EXPECT_EQ(twice[0], twice[1]);
    EXPECT_EQ(twice[1], undisturbed.pushed.at(step).at(0));
  }
  EXPECT_EQ(replaced.params, undisturbed.params);  // float ==, every element
}

TEST(RunFollowingPlacementTest, OverlappedStepsResumeAtTheRefusedExchange) {
  const Outcome undisturbed = TrainReplaced(/*overlap=*/true, {});
  ASSERT_TRUE(undisturbed.status.ok()) << undisturbed.status;
  // The refusal of step 13's exchanges surfaces in step 14's forward; the
  // run resumes at 13 all the same.
  const Outcome replaced = TrainReplaced(/*overlap=*/true, {13});
  ASSERT_TRUE(replaced.status.ok()) << replaced.status;
  using Run = std::pair<uint64_t, uint64_t>;
  EXPECT_EQ(replaced.runs, (std::vector<Run>{{0, 0}, {1, 13}}));
  EXPECT_EQ(replaced.params, undisturbed.params);
}

TEST(RunFollowingPlacementTest, OtherErrorsAndFailedFollowsEndTheJob) {
  // Not a refusal: the run's status as it was, no ask.
  Script script;
  int runs = 0;
  const RunFrom unavailable = [&](const Assignment&, uint64_t, uint64_t*) {
    ++runs;
    return absl::UnavailableError("shard 1 unreachable");
  };
  EXPECT_EQ(RunFollowingPlacement(WithEpoch(0), unavailable, script.Ask(),
                                  script.Options())
                .code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(script.asks, 0);
  // A refusal the coordinator cannot follow: why, after a bounded number of
  // asks, and no second run.
  runs = 0;
  const RunFrom refused = [&](const Assignment&, uint64_t, uint64_t* next) {
    ++runs;
    *next = 13;
    return Refused(1, 0);
  };
  script.answers.assign(3, WithEpoch(0));
  const absl::Status s = RunFollowingPlacement(WithEpoch(0), refused,
                                               script.Ask(), script.Options());
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "no newer placement")) << s;
  EXPECT_EQ(runs, 1);
  EXPECT_EQ(script.asks, FollowOptions().max_asks);
}

}  // namespace
}  // namespace ps
