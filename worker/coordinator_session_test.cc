#include "worker/coordinator_session.h"

#include <unistd.h>

#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/defaults.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

// A coordinator whose answers the test gives: registrations from a queue,
// heartbeats one at a time (NextBeat waits for the session's beat, Answer
// answers it). Thread-safe.
class FakeCalls : public CoordinatorCalls {
 public:
  void QueueRegister(absl::Status status, const std::string& worker_id,
                     uint32_t interval_ms = 0) {
    absl::MutexLock l(&mu_);
    RegisterWorkerResponse r;
    r.set_worker_id(worker_id);
    r.set_heartbeat_interval_ms(interval_ms);
    register_answers_.push_back({std::move(status), std::move(r)});
  }
  std::vector<RegisterWorkerRequest> registers() {
    absl::MutexLock l(&mu_);
    return registers_;
  }

  // Waits for the session's next heartbeat and returns it with the time
  // it had left until its deadline.
  std::pair<HeartbeatRequest, absl::Duration> NextBeat() {
    absl::MutexLock l(&mu_);
    mu_.Await(absl::Condition(
        +[](FakeCalls* f) ABSL_EXCLUSIVE_LOCKS_REQUIRED(f->mu_) {
          return f->beat_.has_value();
        },
        this));
    return {*beat_, beat_left_};
  }
  // Answers the waiting heartbeat and waits until the session has it.
  void Answer(const HeartbeatResponse& response,
              absl::Status status = absl::OkStatus()) {
    absl::MutexLock l(&mu_);
    answer_ = {std::move(status), response};
    mu_.Await(absl::Condition(
        +[](FakeCalls* f) ABSL_EXCLUSIVE_LOCKS_REQUIRED(f->mu_) {
          return !f->answer_.has_value();
        },
        this));
  }
  // Every later heartbeat fails at once (before the session closes).
  void Release() {
    absl::MutexLock l(&mu_);
    released_ = true;
  }

  absl::Status RegisterWorker(const RegisterWorkerRequest& request,
                              RegisterWorkerResponse* response,
                              absl::Time deadline) override {
    absl::MutexLock l(&mu_);
    registers_.push_back(request);
    if (register_answers_.empty()) return absl::UnavailableError("no answer");
    auto [status, r] = std::move(register_answers_.front());
    register_answers_.pop_front();
    *response = std::move(r);
    return status;
  }

  absl::Status Heartbeat(const HeartbeatRequest& request,
                         HeartbeatResponse* response,
                         absl::Time deadline) override {
    absl::MutexLock l(&mu_);
    beat_ = request;
    beat_left_ = deadline - absl::Now();
    mu_.Await(absl::Condition(
        +[](FakeCalls* f) ABSL_EXCLUSIVE_LOCKS_REQUIRED(f->mu_) {
          return f->answer_.has_value() || f->released_;
        },
        this));
    beat_.reset();
    if (!answer_.has_value()) return absl::UnavailableError("released");
    auto [status, r] = std::move(*answer_);
    answer_.reset();
    *response = std::move(r);
    return status;
  }

 private:
  absl::Mutex mu_;
  std::deque<std::pair<absl::Status, RegisterWorkerResponse>> register_answers_
      ABSL_GUARDED_BY(mu_);
  std::vector<RegisterWorkerRequest> registers_ ABSL_GUARDED_BY(mu_);
  std::optional<HeartbeatRequest> beat_ ABSL_GUARDED_BY(mu_);
  absl::Duration beat_left_ ABSL_GUARDED_BY(mu_);
  std::optional<std::pair<absl::Status, HeartbeatResponse>> answer_
      ABSL_GUARDED_BY(mu_);
  bool released_ ABSL_GUARDED_BY(mu_) = false;
};

// A session over FakeCalls, registered as "w-1" with heartbeats running.
struct Beating {
  explicit Beating(CoordinatorSession::Options options) {
    options.name = "host-a";
    options.heartbeat_interval = absl::Milliseconds(1);
    options.on_heartbeat = [this, then = std::move(options.on_heartbeat)](
                               const HeartbeatResponse& r) {
      if (then) then(r);
      absl::MutexLock l(&mu);
      ++applied;
    };
    auto owned = std::make_unique<FakeCalls>();
    calls = owned.get();
    session = std::make_unique<CoordinatorSession>(std::move(options),
                                                   std::move(owned));
    calls->QueueRegister(absl::OkStatus(), "w-1");
    EXPECT_TRUE(session->Register().ok());
    session->StartHeartbeats();
  }
  ~Beating() {
    calls->Release();
    session->Close();
  }
  // Answers the beat in flight with `response` and waits until the session
  // has applied it.
  void AnswerWaiting(const HeartbeatResponse& response) {
    {
      absl::MutexLock l(&mu);
      target = applied + 1;
    }
    calls->Answer(response);
    absl::MutexLock l(&mu);
    mu.Await(absl::Condition(
        +[](Beating* b) ABSL_EXCLUSIVE_LOCKS_REQUIRED(b->mu) {
          return b->applied >= b->target;
        },
        this));
  }
  // Waits for the next beat and answers it (AnswerWaiting).
  void AnswerNext(const HeartbeatResponse& response) {
    calls->NextBeat();
    AnswerWaiting(response);
  }

  FakeCalls* calls = nullptr;  // owned by session
  std::unique_ptr<CoordinatorSession> session;
  absl::Mutex mu;
  int applied ABSL_GUARDED_BY(mu) = 0;  // answers the session has applied
  int target ABSL_GUARDED_BY(mu) = 0;   // what AnswerWaiting waits for
};

HeartbeatResponse Leads(const std::string& job) {
  HeartbeatResponse r;
  r.set_leads_job(job);
  return r;
}

HeartbeatResponse Abort(const std::string& reason) {
  HeartbeatResponse r;
  r.set_abort_job(true);
  r.set_reason(reason);
  return r;
}

HeartbeatResponse Forgotten() {
  HeartbeatResponse r;
  r.set_reregister(true);
  return r;
}

TEST(WorkerNameTest, HostAndPidThenAUniqueCounter) {
  const std::string name = DefaultWorkerName();
  EXPECT_TRUE(absl::EndsWith(name, absl::StrCat("-", getpid()))) << name;
  const std::string a = UniqueWorkerName();
  const std::string b = UniqueWorkerName();
  EXPECT_TRUE(absl::StartsWith(a, name + "-")) << a;
  EXPECT_NE(a, b);
}

TEST(CoordinatorSessionTest, RegisterOnceSendsTheWorkerAndTakesTheInterval) {
  CoordinatorSession::Options options;
  options.name = "host-a-1";
  options.devices = {"cpu:0"};
  options.job_id = "job-000003";
  auto owned = std::make_unique<FakeCalls>();
  FakeCalls* calls = owned.get();
  CoordinatorSession session(options, std::move(owned));
  EXPECT_FALSE(session.registered());
  calls->QueueRegister(absl::OkStatus(), "w-7", /*interval_ms=*/250);
  ASSERT_TRUE(session.RegisterOnce(absl::Now() + absl::Seconds(1)).ok());
  EXPECT_TRUE(session.registered());
  EXPECT_EQ(session.worker_id(), "w-7");
  EXPECT_EQ(session.heartbeat_interval(), absl::Milliseconds(250));
  const std::vector<RegisterWorkerRequest> registers = calls->registers();
  ASSERT_EQ(registers.size(), 1u);
  const RegisterWorkerRequest& sent = registers[0];
  EXPECT_EQ(sent.name(), "host-a-1");
  EXPECT_EQ(sent.job_id(), "job-000003");
  ASSERT_EQ(sent.devices_size(), 1);
  EXPECT_EQ(sent.devices(0), "cpu:0");
  // An answer without an interval: the default.
  calls->QueueRegister(absl::OkStatus(), "w-8", /*interval_ms=*/0);
  ASSERT_TRUE(session.RegisterOnce(absl::Now() + absl::Seconds(1)).ok());
  EXPECT_EQ(session.heartbeat_interval(),
            absl::Milliseconds(kDefaultHeartbeatIntervalMs));
}

TEST(CoordinatorSessionTest, RegisterRetriesUntilTheCoordinatorAnswers) {
  CoordinatorSession::Options options;
  options.name = "host-a";
  options.heartbeat_interval = absl::Milliseconds(40);
  auto owned = std::make_unique<FakeCalls>();
  FakeCalls* calls = owned.get();
  CoordinatorSession session(options, std::move(owned));
  calls->QueueRegister(absl::UnavailableError("connection refused"), "");
  calls->QueueRegister(absl::OkStatus(), "w-1", /*interval_ms=*/999);
  ASSERT_TRUE(session.Register().ok());
  EXPECT_EQ(calls->registers().size(), 2u);
  EXPECT_EQ(session.worker_id(), "w-1");
  // The options' interval wins over the answer's.
  EXPECT_EQ(session.heartbeat_interval(), absl::Milliseconds(40));
}

TEST(CoordinatorSessionTest, RegisterGivesUpOnWhatRetryingCannotFix) {
  struct Case {
    absl::Status answer;
    absl::StatusCode code;
  } cases[] = {
      {absl::InvalidArgumentError("name: must be set"),
       absl::StatusCode::kInvalidArgument},
      {absl::UnauthenticatedError("bad token"),
       absl::StatusCode::kUnauthenticated},
  };
  for (const Case& c : cases) {
    CoordinatorSession::Options options;
    options.name = "host-a";
    auto owned = std::make_unique<FakeCalls>();
    owned->QueueRegister(c.answer, "");
    CoordinatorSession session(options, std::move(owned));
    absl::Status s = session.Register();
    EXPECT_EQ(s.code(), c.code);
    EXPECT_TRUE(absl::StartsWith(s.message(), "RegisterWorker: ")) << s;
    EXPECT_FALSE(session.registered());
  }
}

TEST(CoordinatorSessionTest, RegisterIsCancelledOnceStopped) {
  CoordinatorSession::Options options;
  options.name = "host-a";
  auto owned = std::make_unique<FakeCalls>();
  FakeCalls* calls = owned.get();
  CoordinatorSession session(options, std::move(owned));
  session.Stop();
  EXPECT_EQ(session.Register().code(), absl::StatusCode::kCancelled);
  EXPECT_TRUE(calls->registers().empty());
}

TEST(CoordinatorSessionTest, HeartbeatsCarryTheIdWithinTheirDeadline) {
  CoordinatorSession::Options options;
  options.heartbeat_deadline_cap = absl::Microseconds(500);
  std::vector<HeartbeatResponse> seen;
  absl::Mutex seen_mu;
  options.on_heartbeat = [&](const HeartbeatResponse& r) {
    absl::MutexLock l(&seen_mu);
    seen.push_back(r);
  };
  Beating b(options);
  auto [beat, left] = b.calls->NextBeat();
  EXPECT_EQ(beat.worker_id(), "w-1");
  EXPECT_LE(left, absl::Microseconds(500));
  b.AnswerWaiting(Leads("job-000001"));
  absl::MutexLock l(&seen_mu);
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].leads_job(), "job-000001");
}

TEST(CoordinatorSessionTest, LeaderFollowsTheAnswersForTheRunningJob) {
  Beating b({});
  b.session->StartJob("job-000001", 1);
  EXPECT_FALSE(b.session->leads());   // rank 1
  b.AnswerNext(HeartbeatResponse());  // maybe sent before the job
  b.AnswerNext(Leads("job-000001"));
  EXPECT_TRUE(b.session->leads());
  b.AnswerNext(Leads("job-000002"));  // another job's leader
  EXPECT_FALSE(b.session->leads());
  b.session->EndJob();
  b.session->StartJob("job-000003", 0);
  EXPECT_TRUE(b.session->leads());  // rank 0 until told otherwise
}

TEST(CoordinatorSessionTest, AnAnswerToABeatSentBeforeTheJobDoesNotCount) {
  Beating b({});
  b.calls->NextBeat();  // sent with no job
  b.session->StartJob("job-000001", 0);
  b.AnswerWaiting(Leads(""));
  EXPECT_TRUE(b.session->leads());
  b.AnswerNext(Leads(""));  // sent during the job
  EXPECT_FALSE(b.session->leads());
}

TEST(CoordinatorSessionTest, AbortAnswersCountOnlyWithAJobAndKeepTheFirst) {
  Beating b({});
  b.AnswerNext(Abort("job job-000001 CANCELLED: cancelled by user"));
  EXPECT_FALSE(b.session->abort_requested());  // no job: nothing to abort
  b.session->StartJob("job-000002", 0);
  b.AnswerNext(Abort("first"));
  b.AnswerNext(Abort("second"));
  EXPECT_TRUE(b.session->abort_requested());
  EXPECT_EQ(b.session->abort_reason(), "first");
  b.session->ClearAbort();
  EXPECT_FALSE(b.session->abort_requested());
  EXPECT_EQ(b.session->abort_reason(), std::nullopt);
}

TEST(CoordinatorSessionTest, AWorkerRegisteredForAJobIsBoundToItAtOnce) {
  CoordinatorSession::Options options;
  options.job_id = "job-000004";
  Beating b(options);
  b.AnswerNext(Abort("job job-000004 CANCELLED: cancelled by user"));
  EXPECT_EQ(b.session->abort_reason(),
            "job job-000004 CANCELLED: cancelled by user");
}

TEST(CoordinatorSessionTest, AForgottenWorkerRegistersAgainOrAborts) {
  {
    Beating b({});  // kRegisterAgain
    b.AnswerNext(Forgotten());
    EXPECT_FALSE(b.session->registered());
    EXPECT_FALSE(b.session->abort_requested());
  }
  CoordinatorSession::Options options;
  options.job_id = "job-000005";
  options.when_forgotten = CoordinatorSession::WhenForgotten::kAbortJob;
  Beating b(options);
  b.AnswerNext(Forgotten());
  EXPECT_TRUE(b.session->registered());
  EXPECT_EQ(b.session->abort_reason(),
            "the coordinator no longer knows worker w-1 (it restarted); join "
            "again");
}

TEST(CoordinatorSessionTest, AbortKeepsTheFirstReason) {
  CoordinatorSession::Options options;
  options.name = "host-a";
  CoordinatorSession session(options, std::make_unique<FakeCalls>());
  EXPECT_TRUE(session.Abort(""));
  EXPECT_FALSE(session.Abort("later"));
  session.AbortedByCoordinator("later still");
  EXPECT_EQ(session.abort_reason(), "");
}

}  // namespace
}  // namespace ps
