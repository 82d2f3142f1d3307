// psctl trace over real daemons (2 psd, 2 workerd with two CPU replicas
// each): a running job's steps [A, B) come out as Trace Event Format JSON
// that is checked here: every selected step is on every worker; the
// phases nest inside their step; each flow pairs one "s" with one "f" of
// the same id and category; the file stays small. Bad requests (unknown
// job, empty range, malformed flags) exit 1 or 2.
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/text_proto.h"
#include "gmock/gmock.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "proto/coordinator.pb.h"
#include "tests/local_cluster.h"
#include "tests/testing/cluster_fixture.h"

namespace ps {
namespace {

using ::google::protobuf::Struct;
using ::google::protobuf::Value;
using ::testing::HasSubstr;

// Long enough to still run when the trace is asked for; cancelled at the
// end.
constexpr char kJob[] = R"pb(
  name: "traced-mlp"
  model { mlp { input_dim: 784 hidden: 32 num_classes: 10 } }
  data {
    dataset: "synthetic"
    batch_size: 32
    epochs: 1000
    synthetic_train: 4096
    synthetic_test: 512
  }
  optimizer { kind: SGD learning_rate: 0.05 momentum: 0.9 }
  consistency { mode: BSP step_deadline_ms: 30000 }
  num_workers: 2
  partition_bytes: 16384
  seed: 5
  eval_every: 1000000
)pb";

constexpr uint64_t kSteps = 20;
constexpr size_t kMaxBytes = 10u << 20;

double Num(const Struct& s, const std::string& key) {
  auto it = s.fields().find(key);
  return it == s.fields().end() ? -1 : it->second.number_value();
}
std::string Str(const Struct& s, const std::string& key) {
  auto it = s.fields().find(key);
  return it == s.fields().end() ? "" : it->second.string_value();
}

class TraceTest : public ClusterTest {
 protected:
  LocalClusterOptions ClusterOptions() const override {
    LocalClusterOptions options;
    options.workerd_extra = "devices: \"cpu:1\"\n";
    return options;
  }
};

TEST_F(TraceTest, TimelineOfARunningJob) {
  absl::StatusOr<std::string> submitted = SubmitJob(*cluster_, kJob);
  ASSERT_TRUE(submitted.ok()) << submitted.status();
  const std::string& job = *submitted;
  // Running, with progress reported (the shards hold it).
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  while (JobStep(*cluster_, job) == 0 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(200));  // the leader's report pace
  }
  ASSERT_GT(JobStep(*cluster_, job), 0u)
      << "no progress from " << job << " in 60 s";

  // Bad requests first: nothing changes on the cluster.
  const std::string out = dir_ + "/trace.json";
  absl::StatusOr<CommandResult> r =
      cluster_->Psctl({"trace", "job-999999", "--steps=5:10", "-o", out});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->exit_code, 1);
  EXPECT_THAT(r->err, HasSubstr("job-999999"));
  r = cluster_->Psctl({"trace", job, "--steps=10:10", "-o", out});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->exit_code, 1);
  EXPECT_THAT(r->err, HasSubstr("empty step range"));
  r = cluster_->Psctl({"trace", job, "--steps=0:5000", "-o", out});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->exit_code, 1);
  EXPECT_THAT(r->err, HasSubstr("at most"));
  r = cluster_->Psctl({"trace", job, "--steps=x:10", "-o", out});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->exit_code, 2);
  r = cluster_->Psctl({"trace", job, "--steps=5:10"});  // no -o
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->exit_code, 2);

  // A window well ahead of the job: two seconds of its pace (heartbeats
  // every 200 ms carry the window to the workers).
  const uint64_t s0 = JobStep(*cluster_, job);
  absl::SleepFor(absl::Seconds(1));
  const uint64_t s1 = JobStep(*cluster_, job);
  const uint64_t begin = s1 + 2 * (s1 - s0) + 50;
  r = cluster_->Psctl(
      {"trace", job, absl::StrCat("--steps=", begin, ":", begin + kSteps), "-o",
       out, "--timeout=120"},
      absl::Seconds(150));
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->exit_code, 0) << r->err;
  EXPECT_TRUE(cluster_->Psctl({"cancel", job}).ok());

  absl::StatusOr<std::string> text = WaitForFile(out, absl::Seconds(1));
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_LT(text->size(), kMaxBytes);
  Struct root;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(*text, &root).ok());
  const auto& events = root.fields().at("traceEvents").list_value().values();

  // Steps per worker pid, and each phase inside its step.
  std::map<std::pair<int, int>, std::pair<double, double>> step_span;
  std::map<int, std::set<int>> steps_of;
  std::map<double, std::multiset<std::string>> flow_phases;  // id -> phases
  std::set<std::string> names;
  std::map<double, std::string> flow_cat;
  for (const Value& v : events) {
    const Struct& e = v.struct_value();
    const std::string ph = Str(e, "ph");
    ASSERT_FALSE(ph.empty());
    if (ph == "X") {
      names.insert(Str(e, "name"));
      EXPECT_GE(Num(e, "dur"), 0);
      if (Str(e, "name") == "step") {
        const int pid = static_cast<int>(Num(e, "pid"));
        const int step =
            static_cast<int>(Num(e.fields().at("args").struct_value(), "step"));
        steps_of[pid].insert(step);
        step_span[{pid, step}] = {Num(e, "ts"), Num(e, "ts") + Num(e, "dur")};
      }
    } else if (ph == "s" || ph == "t" || ph == "f") {
      flow_phases[Num(e, "id")].insert(ph);
      const std::string cat = Str(e, "cat");
      auto [it, fresh] = flow_cat.emplace(Num(e, "id"), cat);
      EXPECT_EQ(it->second, cat) << "flow " << Num(e, "id");
    } else {
      EXPECT_EQ(ph, "M");
    }
  }
  for (const char* n :
       {"step", "data wait", "compute", "comm wait", "forward", "backward",
        "local reduce", "PushPull", "pull reply", "request", "apply"}) {
    EXPECT_TRUE(names.count(n)) << "no \"" << n << "\" span";
  }
  ASSERT_EQ(steps_of.size(), 2u);  // both workers
  for (const auto& [pid, steps] : steps_of) {
    for (uint64_t t = begin; t < begin + kSteps; ++t) {
      EXPECT_TRUE(steps.count(static_cast<int>(t)))
          << "pid " << pid << " has no step " << t;
    }
  }
  // Worker phases on the step thread (tid 1) lie inside their step.
  for (const Value& v : events) {
    const Struct& e = v.struct_value();
    if (Str(e, "ph") != "X" || Num(e, "tid") != 1 || Num(e, "pid") < 1000 ||
        Str(e, "name") == "step") {
      continue;
    }
    const int pid = static_cast<int>(Num(e, "pid"));
    const int step =
        static_cast<int>(Num(e.fields().at("args").struct_value(), "step"));
    auto it = step_span.find({pid, step});
    ASSERT_NE(it, step_span.end());
    const double slack = 0.002;  // the JSON's microseconds have 3 decimals
    EXPECT_GE(Num(e, "ts") + slack, it->second.first) << Str(e, "name");
    EXPECT_LE(Num(e, "ts") + Num(e, "dur"), it->second.second + slack)
        << Str(e, "name");
  }
  // One chain per (worker, shard, step): s, t, f with one id.
  EXPECT_EQ(flow_phases.size(), 2u * 2u * kSteps);
  for (const auto& [id, phases] : flow_phases) {
    EXPECT_EQ(phases, (std::multiset<std::string>{"f", "s", "t"}))
        << "flow " << id;
  }
}

}  // namespace
}  // namespace ps
