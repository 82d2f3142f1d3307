// GrpcSparseClient against two in-test shard servers (ParameterServer's
// SparseExchange on 127.0.0.1, port 0): routing by ShardForId, a push to
// every shard each step, rows scattered back in the caller's order,
// retries, errors naming the shard, deadlines, validation and shutdown.
// Held calls and notifications synchronize the tests; no sleeps.
#include "worker/client/sparse_client.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/security.h"
#include "core/sparse_ids.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/ps.grpc.pb.h"

namespace ps {
namespace {

using ::testing::HasSubstr;

constexpr uint32_t kShards = 2;
constexpr uint32_t kDimA = 3;
constexpr uint32_t kDimB = 2;
constexpr uint64_t kNumIdsB = 1000;

// What the test shards answer for element e of row `id` of `table`.
float RowValue(const std::string& table, uint64_t id, uint32_t e) {
  return static_cast<float>(id) + 0.25f * static_cast<float>(e) +
         (table == "b" ? 0.5f : 0.0f);
}

std::vector<uint64_t> Ids(const std::string& bytes) {
  std::vector<uint64_t> ids(bytes.size() / sizeof(uint64_t));
  if (!ids.empty()) std::memcpy(ids.data(), bytes.data(), bytes.size());
  return ids;
}

std::vector<float> Floats(const std::string& bytes) {
  std::vector<float> v(bytes.size() / sizeof(float));
  if (!v.empty()) std::memcpy(v.data(), bytes.data(), bytes.size());
  return v;
}

// One shard: records every request, counts ids it does not own, answers
// pulls with RowValue; can fail the next calls, hold calls unanswered, or
// answer with a malformed reply.
class TestShard final : public ParameterServer::CallbackService {
 public:
  explicit TestShard(uint32_t shard) : shard_(shard) {
    int port = 0;
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port);
    builder.RegisterService(this);
    server_ = builder.BuildAndStart();
    address_ = absl::StrCat("127.0.0.1:", port);
  }
  ~TestShard() override {
    std::vector<Held> held;
    {
      absl::MutexLock lock(&mu_);
      held.swap(held_);
    }
    for (Held& h : held) {
      h.reactor->Finish(grpc::Status(grpc::UNAVAILABLE, "down"));
    }
    server_->Shutdown(absl::ToChronoTime(absl::Now()));
  }

  const std::string& address() const { return address_; }
  void FailNext(int n, grpc::Status status) {
    absl::MutexLock lock(&mu_);
    fail_next_ = n;
    fail_status_ = std::move(status);
  }
  void set_hold(bool hold) {
    absl::MutexLock lock(&mu_);
    hold_ = hold;
  }
  void set_bad_reply(bool bad) {
    absl::MutexLock lock(&mu_);
    bad_reply_ = bad;
  }
  // Answers the held calls and stops holding.
  void Release() {
    std::vector<Held> held;
    {
      absl::MutexLock lock(&mu_);
      hold_ = false;
      held.swap(held_);
    }
    for (Held& h : held) {
      Answer(*h.req, h.resp);
      h.reactor->Finish(grpc::Status::OK);
    }
  }
  std::vector<SparseExchangeRequest> arrivals() {
    absl::MutexLock lock(&mu_);
    return arrivals_;
  }
  uint64_t misrouted() {
    absl::MutexLock lock(&mu_);
    return misrouted_;
  }
  bool AwaitArrivals(size_t n) {
    absl::MutexLock lock(&mu_);
    auto arrived = [this, n]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      return arrivals_.size() >= n;
    };
    return mu_.AwaitWithTimeout(absl::Condition(&arrived), absl::Seconds(30));
  }

  grpc::ServerUnaryReactor* SparseExchange(
      grpc::CallbackServerContext* ctx, const SparseExchangeRequest* req,
      SparseExchangeResponse* resp) override {
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    absl::MutexLock lock(&mu_);
    arrivals_.push_back(*req);
    auto count = [&](const SparseRows& rows) {
      for (uint64_t id : Ids(rows.ids())) {
        if (ShardForId(id, kShards) != shard_) ++misrouted_;
      }
    };
    for (const SparseRows& g : req->gradients()) count(g);
    for (const SparseRows& p : req->pull()) count(p);
    if (hold_) {
      held_.push_back({reactor, req, resp});
      return reactor;
    }
    if (fail_next_ > 0) {
      --fail_next_;
      reactor->Finish(fail_status_);
      return reactor;
    }
    Answer(*req, resp);
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

 private:
  struct Held {
    grpc::ServerUnaryReactor* reactor;
    const SparseExchangeRequest* req;
    SparseExchangeResponse* resp;
  };

  void Answer(const SparseExchangeRequest& req, SparseExchangeResponse* resp) {
    for (const SparseRows& p : req.pull()) {
      const uint32_t dim = p.table() == "a" ? kDimA : kDimB;
      SparseRows* out = resp->add_rows();
      out->set_table(p.table());
      out->set_ids(p.ids());
      std::vector<float> values;
      for (uint64_t id : Ids(p.ids())) {
        for (uint32_t e = 0; e < dim; ++e) {
          values.push_back(RowValue(p.table(), id, e));
        }
      }
      if (bad_reply_) values.pop_back();
      out->set_values(values.data(), values.size() * sizeof(float));
    }
  }

 private:
  const uint32_t shard_;
  std::string address_;
  std::unique_ptr<grpc::Server> server_;
  absl::Mutex mu_;
  std::vector<SparseExchangeRequest> arrivals_ ABSL_GUARDED_BY(mu_);
  uint64_t misrouted_ ABSL_GUARDED_BY(mu_) = 0;
  int fail_next_ ABSL_GUARDED_BY(mu_) = 0;
  grpc::Status fail_status_ ABSL_GUARDED_BY(mu_);
  bool hold_ ABSL_GUARDED_BY(mu_) = false;
  bool bad_reply_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<Held> held_ ABSL_GUARDED_BY(mu_);
};

// Ids [first, first + n) owned by `shard`.
std::vector<uint64_t> IdsOf(uint32_t shard, size_t n, uint64_t first = 1) {
  std::vector<uint64_t> ids;
  for (uint64_t id = first; ids.size() < n; ++id) {
    if (ShardForId(id, kShards) == shard) ids.push_back(id);
  }
  return ids;
}

class SparseClientTest : public ::testing::Test {
 protected:
  SparseClientTest() : shards_{TestShard(0), TestShard(1)} {}

  Assignment MakeAssignment(ConsistencyMode mode) {
    Assignment a;
    a.set_job_id("job");
    a.set_rank(1);
    a.set_num_workers(2);
    a.mutable_spec()->mutable_consistency()->set_mode(mode);
    a.mutable_spec()->mutable_consistency()->set_step_deadline_ms(100);
    TableSpec* ta = a.mutable_spec()->add_tables();
    ta->set_name("a");
    ta->set_dim(kDimA);
    TableSpec* tb = a.mutable_spec()->add_tables();
    tb->set_name("b");
    tb->set_dim(kDimB);
    tb->set_num_ids(kNumIdsB);
    a.mutable_placement()->set_num_shards(kShards);
    for (const TestShard& s : shards_) a.add_shard_addresses(s.address());
    return a;
  }

  void Connect(PsClientOptions options = FastOptions(),
               ConsistencyMode mode = BSP) {
    auto c =
        GrpcSparseClient::Create(options, MakeAssignment(mode), &security_);
    ASSERT_TRUE(c.ok()) << c.status();
    client_ = *std::move(c);
  }

  static PsClientOptions FastOptions() {
    PsClientOptions o;
    o.initial_backoff = absl::Milliseconds(1);
    o.max_backoff = absl::Milliseconds(4);
    return o;
  }

  size_t TotalArrivals() {
    return shards_[0].arrivals().size() + shards_[1].arrivals().size();
  }

  Security security_;
  TestShard shards_[kShards];
  std::unique_ptr<GrpcSparseClient> client_;
};

TEST_F(SparseClientTest, RoutesByShardAndScattersRowsInCallerOrder) {
  Connect();
  // Both shards own some of these; ids repeat in the push and the pull.
  const std::vector<uint64_t> push_ids = {5, 9, 5, 12, 3, 40};
  std::vector<float> grads(push_ids.size() * kDimA);
  for (size_t i = 0; i < grads.size(); ++i) grads[i] = 0.5f * i;
  const std::vector<uint64_t> pull_a = {7, 3, 7, 100, 1, 2, 3};
  const std::vector<uint64_t> pull_b = {999, 0, 999, 4};
  std::vector<float> rows_a(pull_a.size() * kDimA, -1.0f);
  std::vector<float> rows_b(pull_b.size() * kDimB, -1.0f);
  SparseTableStep a{"a", push_ids, grads, pull_a, absl::MakeSpan(rows_a)};
  SparseTableStep b{"b", {}, {}, pull_b, absl::MakeSpan(rows_b)};
  const SparseTableStep steps[] = {a, b};
  ASSERT_TRUE(client_->Exchange(7, /*push=*/true, steps).ok());

  for (size_t k = 0; k < pull_a.size(); ++k) {
    for (uint32_t e = 0; e < kDimA; ++e) {
      EXPECT_EQ(rows_a[k * kDimA + e], RowValue("a", pull_a[k], e)) << k;
    }
  }
  for (size_t k = 0; k < pull_b.size(); ++k) {
    for (uint32_t e = 0; e < kDimB; ++e) {
      EXPECT_EQ(rows_b[k * kDimB + e], RowValue("b", pull_b[k], e)) << k;
    }
  }
  // Every pushed (id, gradient row) reached its owner once, in order.
  std::vector<std::pair<uint64_t, std::vector<float>>> got;
  for (uint32_t s = 0; s < kShards; ++s) {
    EXPECT_EQ(shards_[s].misrouted(), 0u);
    ASSERT_EQ(shards_[s].arrivals().size(), 1u);
    const SparseExchangeRequest r = shards_[s].arrivals()[0];
    EXPECT_EQ(r.job_id(), "job");
    EXPECT_EQ(r.worker(), 1u);
    EXPECT_EQ(r.step(), 7u);
    EXPECT_EQ(r.attempt(), 1u);
    EXPECT_TRUE(r.push());
    ASSERT_EQ(r.gradients_size(), 1);
    EXPECT_EQ(r.gradients(0).table(), "a");
    const std::vector<uint64_t> ids = Ids(r.gradients(0).ids());
    const std::vector<float> values = Floats(r.gradients(0).values());
    ASSERT_EQ(values.size(), ids.size() * kDimA);
    for (size_t k = 0; k < ids.size(); ++k) {
      got.emplace_back(ids[k],
                       std::vector<float>(values.begin() + k * kDimA,
                                          values.begin() + (k + 1) * kDimA));
    }
  }
  ASSERT_EQ(got.size(), push_ids.size());
  for (size_t k = 0; k < push_ids.size(); ++k) {
    const std::vector<float> row(grads.begin() + k * kDimA,
                                 grads.begin() + (k + 1) * kDimA);
    EXPECT_EQ(
        std::count(got.begin(), got.end(), std::make_pair(push_ids[k], row)), 1)
        << "push_ids[" << k << "]";
  }
  const SparseClientStats st = client_->stats();
  EXPECT_EQ(st.steps, 1u);
  EXPECT_EQ(st.requests, 2u);
  EXPECT_EQ(st.retries, 0u);
  EXPECT_EQ(st.rows_pushed, push_ids.size());
  EXPECT_EQ(st.rows_pulled, pull_a.size() + pull_b.size());
  EXPECT_GT(st.bytes_sent, push_ids.size() * (8 + 4 * kDimA));
  EXPECT_GT(st.bytes_received, pull_a.size() * (8 + 4 * kDimA));
}

TEST_F(SparseClientTest, EveryShardGetsAPushEachStepEvenWithoutIds) {
  Connect();
  // Step 0: ids of shard 0 only; step 1: no tables at all.
  const std::vector<uint64_t> ids = IdsOf(0, 3);
  std::vector<float> grads(ids.size() * kDimA, 1.0f);
  const SparseTableStep a{"a", ids, grads, {}, {}};
  ASSERT_TRUE(client_->Exchange(0, true, {&a, 1}).ok());
  ASSERT_TRUE(client_->Exchange(1, true, {}).ok());
  for (uint32_t s = 0; s < kShards; ++s) {
    const std::vector<SparseExchangeRequest> got = shards_[s].arrivals();
    ASSERT_EQ(got.size(), 2u) << "shard " << s;
    for (uint64_t t = 0; t < 2; ++t) {
      EXPECT_EQ(got[t].step(), t);
      EXPECT_TRUE(got[t].push());
      EXPECT_EQ(got[t].pull_size(), 0);
    }
    EXPECT_EQ(got[0].gradients_size(), s == 0 ? 1 : 0);
    EXPECT_EQ(got[1].gradients_size(), 0);
  }
  // Without push only the shards owning pulled ids are asked; nothing to
  // pull sends nothing.
  const std::vector<uint64_t> pull = IdsOf(1, 2);
  std::vector<float> rows(pull.size() * kDimB);
  const SparseTableStep b{"b", {}, {}, pull, absl::MakeSpan(rows)};
  ASSERT_TRUE(client_->Exchange(2, false, {&b, 1}).ok());
  ASSERT_TRUE(client_->Exchange(2, false, {}).ok());
  EXPECT_EQ(shards_[0].arrivals().size(), 2u);
  ASSERT_EQ(shards_[1].arrivals().size(), 3u);
  EXPECT_FALSE(shards_[1].arrivals()[2].push());
  EXPECT_EQ(rows[kDimB], RowValue("b", pull[1], 0));
}

TEST_F(SparseClientTest, RetriesUnavailableWithTheSameStepAndNextAttempt) {
  Connect();
  shards_[1].FailNext(2, grpc::Status(grpc::UNAVAILABLE, "restarting"));
  const std::vector<uint64_t> pull = {1, 2, 3, 4, 5, 6};
  std::vector<float> rows(pull.size() * kDimA);
  const SparseTableStep a{"a", {}, {}, pull, absl::MakeSpan(rows)};
  ASSERT_TRUE(client_->Exchange(4, true, {&a, 1}).ok());
  const std::vector<SparseExchangeRequest> got = shards_[1].arrivals();
  ASSERT_EQ(got.size(), 3u);
  for (uint32_t i = 0; i < 3; ++i) {
    EXPECT_EQ(got[i].step(), 4u);
    EXPECT_EQ(got[i].attempt(), i + 1);
  }
  EXPECT_EQ(shards_[0].arrivals().size(), 1u);
  for (size_t k = 0; k < pull.size(); ++k) {
    EXPECT_EQ(rows[k * kDimA + 2], RowValue("a", pull[k], 2));
  }
  EXPECT_EQ(client_->stats().retries, 2u);
  EXPECT_EQ(client_->stats().requests, 4u);
}

TEST_F(SparseClientTest, LastAttemptsErrorNamesTheShard) {
  PsClientOptions o = FastOptions();
  o.max_attempts = 2;
  Connect(o);
  shards_[0].FailNext(5, grpc::Status(grpc::UNAVAILABLE, "gone"));
  absl::Status s = client_->Exchange(3, true, {});
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(s.message(), HasSubstr("shard 0 at " + shards_[0].address()));
  EXPECT_THAT(s.message(), HasSubstr("attempt 2"));
  EXPECT_EQ(shards_[0].arrivals().size(), 2u);
}

// A coordinator that says where the shards are now, with `problems`.
LocateShards Coordinator(std::vector<std::string> addresses,
                         std::vector<std::string> problems = {}) {
  return [=](absl::Time) -> absl::StatusOr<ShardAddressesResponse> {
    ShardAddressesResponse r;
    for (const std::string& a : addresses) r.add_addresses(a);
    for (const std::string& p : problems) r.add_problems(p);
    return r;
  };
}

TEST_F(SparseClientTest, AShardThatMovedIsFollowedWithTheSameStep) {
  // Shard 1 went down and came back at another address, its tables intact.
  TestShard moved(1);
  PsClientOptions o = FastOptions();
  o.max_attempts = 50;
  o.locate_interval = absl::Milliseconds(10);
  o.locate_shards = Coordinator({shards_[0].address(), moved.address()});
  Connect(o);
  shards_[1].FailNext(1000, grpc::Status(grpc::UNAVAILABLE, "down"));
  const std::vector<uint64_t> pull = IdsOf(1, 5);
  std::vector<float> rows(pull.size() * kDimA);
  const SparseTableStep a{"a", {}, {}, pull, absl::MakeSpan(rows)};
  ASSERT_TRUE(client_->Exchange(4, true, {&a, 1}).ok());
  const std::vector<SparseExchangeRequest> got = moved.arrivals();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].step(), 4u);
  EXPECT_GT(got[0].attempt(), 1u);  // a retry of the same call
  for (size_t k = 0; k < pull.size(); ++k) {
    EXPECT_EQ(rows[k * kDimA + 1], RowValue("a", pull[k], 1));
  }
  // The next step goes straight to the new address.
  const size_t old_arrivals = shards_[1].arrivals().size();
  ASSERT_TRUE(client_->Exchange(5, true, {&a, 1}).ok());
  EXPECT_EQ(moved.arrivals().size(), 2u);
  EXPECT_EQ(moved.arrivals()[1].attempt(), 1u);
  EXPECT_EQ(shards_[1].arrivals().size(), old_arrivals);
  EXPECT_EQ(shards_[0].arrivals().size(), 2u);  // shard 0 never moved
}

TEST_F(SparseClientTest, AShardNotFoundEndsNamingTheCoordinatorsProblem) {
  PsClientOptions o = FastOptions();
  o.max_attempts = 20;
  o.max_backoff = absl::Milliseconds(20);
  o.locate_interval = absl::Milliseconds(10);
  const std::string problem =
      "shards[0].address_file /run/s0.addr: \"junk\" is not host:port";
  o.locate_shards =
      Coordinator({shards_[0].address(), shards_[1].address()}, {problem});
  Connect(o);
  shards_[0].FailNext(1000, grpc::Status(grpc::UNAVAILABLE, "gone"));
  absl::Status s = client_->Exchange(3, true, {});
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_THAT(s.message(), HasSubstr("shard 0 at " + shards_[0].address() +
                                     " (attempt 20)"));
  EXPECT_THAT(s.message(), HasSubstr("coordinator: " + problem));
}

TEST_F(SparseClientTest, NonRetryableErrorNamesTheShardAndAddress) {
  Connect();
  shards_[1].FailNext(1, grpc::Status(grpc::INVALID_ARGUMENT, "pull[0]: bad"));
  absl::Status s = client_->Exchange(0, true, {});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(),
              HasSubstr("sparse step 0: shard 1 at " + shards_[1].address()));
  EXPECT_THAT(s.message(), HasSubstr("pull[0]: bad"));
  EXPECT_EQ(shards_[1].arrivals().size(), 1u);  // not retried
}

TEST_F(SparseClientTest, ErrorCancelsTheSiblingCalls) {
  Connect();  // BSP: attempts get the step deadline + 5 s
  shards_[0].set_hold(true);
  shards_[1].FailNext(1, grpc::Status(grpc::FAILED_PRECONDITION, "inactive"));
  const absl::Time start = absl::Now();
  absl::Status s = client_->Exchange(0, true, {});
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("shard 1"));
  // Returned on the error, not at shard 0's deadline (30 s).
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

TEST_F(SparseClientTest, ShardThatNeverAnswersMissesTheDeadline) {
  PsClientOptions o = FastOptions();
  o.rpc_deadline = absl::Milliseconds(300);
  Connect(o, ASP);  // no waits on other workers: rpc_deadline alone
  shards_[1].set_hold(true);
  const absl::Time start = absl::Now();
  absl::Status s = client_->Exchange(0, true, {});
  const absl::Duration took = absl::Now() - start;
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_THAT(s.message(), HasSubstr("shard 1 at " + shards_[1].address()));
  EXPECT_GE(took, absl::Milliseconds(300));
  EXPECT_LT(took, absl::Seconds(5));
}

TEST_F(SparseClientTest, MalformedReplyIsAnErrorNamingTheShard) {
  Connect();
  const std::vector<uint64_t> pull = IdsOf(0, 2);
  std::vector<float> rows(pull.size() * kDimA);
  shards_[0].set_bad_reply(true);
  const SparseTableStep a{"a", {}, {}, pull, absl::MakeSpan(rows)};
  absl::Status s = client_->Exchange(0, false, {&a, 1});
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(s.message(), HasSubstr("shard 0"));
}

TEST_F(SparseClientTest, BadInputNamesTheFieldAndSendsNothing) {
  Connect();
  const std::vector<uint64_t> ids = {1, 2};
  std::vector<float> grads_a(ids.size() * kDimA), rows_a(ids.size() * kDimA);
  std::vector<float> short_rows(ids.size() * kDimA - 1);
  const std::vector<uint64_t> big = {kNumIdsB};
  std::vector<float> rows_b(kDimB);
  struct Case {
    bool push;
    std::vector<SparseTableStep> tables;
    std::string field;
  };
  const std::vector<Case> cases = {
      {true, {{"c", {}, {}, {}, {}}}, "tables[0].table: \"c\""},
      {true,
       {{"a", {}, {}, {}, {}}, {"a", {}, {}, {}, {}}},
       "tables[1].table: \"a\" is also tables[0]"},
      {false, {{"a", ids, grads_a, {}, {}}}, "tables[0].push_ids"},
      {true, {{"a", ids, rows_b, {}, {}}}, "tables[0].push_grads"},
      {true,
       {{"b", {}, {}, {}, {}}, {"a", {}, {}, ids, absl::MakeSpan(short_rows)}},
       "tables[1].pull_rows"},
      {true,
       {{"b", {}, {}, big, absl::MakeSpan(rows_b)}},
       "tables[0].pull_ids[0]: id 1000 is not below num_ids 1000"},
  };
  for (const Case& c : cases) {
    absl::Status s = client_->Exchange(0, c.push, c.tables);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.field;
    EXPECT_THAT(s.message(), HasSubstr(c.field));
  }
  EXPECT_EQ(TotalArrivals(), 0u);
  EXPECT_EQ(client_->stats().steps, 0u);
}

TEST_F(SparseClientTest, StepOverTheMessageLimitIsSentInParts) {
  PsClientOptions o = FastOptions();
  o.max_message_bytes = 1024;
  Connect(o);
  // Shard 0: 64 pushed rows (64 x (8 + 12) bytes) and 64 pulled (a reply of
  // 64 x (8 + 12)): over 1024 bytes each way. Shard 1: a few, unsplit.
  const std::vector<uint64_t> mine = IdsOf(0, 64);
  std::vector<uint64_t> ids = mine;
  for (uint64_t id : IdsOf(1, 3)) ids.push_back(id);
  std::vector<float> grads(ids.size() * kDimA);
  for (size_t i = 0; i < grads.size(); ++i) grads[i] = 0.5f * i;
  std::vector<float> rows(ids.size() * kDimA, -1);
  const SparseTableStep a{"a", ids, grads, ids, absl::MakeSpan(rows)};
  ASSERT_TRUE(client_->Exchange(4, true, {&a, 1}).ok());
  for (size_t i = 0; i < ids.size(); ++i) {
    for (uint32_t e = 0; e < kDimA; ++e) {
      ASSERT_EQ(rows[i * kDimA + e], RowValue("a", ids[i], e)) << i;
    }
  }
  // Shard 0 got parts 0..n-1 of n, whose rows are the step's in order.
  const std::vector<SparseExchangeRequest> got = shards_[0].arrivals();
  ASSERT_GE(got.size(), 2u);
  std::vector<uint64_t> pushed, pulled;
  std::vector<uint32_t> part_seen(got.size(), 0);
  for (const SparseExchangeRequest& r : got) {
    EXPECT_EQ(r.parts(), got.size());
    EXPECT_TRUE(r.push());
    EXPECT_EQ(r.step(), 4u);
    EXPECT_LE(r.ByteSizeLong(), 1024u);
    ASSERT_LT(r.part(), got.size());
    part_seen[r.part()]++;
  }
  std::vector<const SparseExchangeRequest*> by_part(got.size());
  for (const SparseExchangeRequest& r : got) by_part[r.part()] = &r;
  for (const SparseExchangeRequest* r : by_part) {
    for (const SparseRows& g : r->gradients()) {
      for (uint64_t id : Ids(g.ids())) pushed.push_back(id);
    }
    for (const SparseRows& p : r->pull()) {
      for (uint64_t id : Ids(p.ids())) pulled.push_back(id);
    }
  }
  EXPECT_EQ(part_seen, std::vector<uint32_t>(got.size(), 1));
  EXPECT_EQ(pushed, mine);
  EXPECT_EQ(pulled, mine);
  ASSERT_EQ(shards_[1].arrivals().size(), 1u);
  EXPECT_EQ(shards_[1].arrivals()[0].parts(), 0u);
  const SparseClientStats st = client_->stats();
  EXPECT_EQ(st.split_calls, 1u);
  EXPECT_EQ(st.parts, got.size());
  EXPECT_EQ(st.rows_pushed, ids.size());
  EXPECT_EQ(st.rows_pulled, ids.size());
}

TEST_F(SparseClientTest, RowOverTheMessageLimitIsRefused) {
  PsClientOptions o = FastOptions();
  o.max_message_bytes = 64;  // under one request's head and one row
  Connect(o);
  const std::vector<uint64_t> pull = IdsOf(0, 4);
  std::vector<float> rows(pull.size() * kDimA);
  const SparseTableStep a{"a", {}, {}, pull, absl::MakeSpan(rows)};
  absl::Status s = client_->Exchange(0, false, {&a, 1});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("max_message_bytes 64"));
  EXPECT_EQ(TotalArrivals(), 0u);
}

TEST_F(SparseClientTest, StartedStepsOverlapAndRunDoneOnce) {
  Connect();
  shards_[0].set_hold(true);
  // Step 0's push waits at shard 0 while step 1's pull, which shard 1
  // alone answers, starts and ends.
  struct Done {
    absl::Notification over;
    absl::Status status;
    int calls = 0;
  } push_done, pull_done;
  auto done_of = [](Done* d) {
    return [d](const absl::Status& st) {
      d->status = st;
      ++d->calls;
      d->over.Notify();
    };
  };
  SparseStep push;
  push.step = 0;
  push.push = true;
  push.done = done_of(&push_done);
  client_->Start(std::move(push));
  ASSERT_TRUE(shards_[0].AwaitArrivals(1));

  const std::vector<uint64_t> pull = IdsOf(1, 3);
  std::vector<float> rows(pull.size() * kDimA);
  SparseStep next;
  next.step = 1;
  next.push = false;
  next.tables = {{"a", {}, {}, pull, absl::MakeSpan(rows)}};
  next.done = done_of(&pull_done);
  client_->Start(std::move(next));
  ASSERT_TRUE(pull_done.over.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_TRUE(pull_done.status.ok()) << pull_done.status;
  EXPECT_EQ(rows[2 * kDimA], RowValue("a", pull[2], 0));
  EXPECT_FALSE(push_done.over.HasBeenNotified());

  shards_[0].Release();
  ASSERT_TRUE(push_done.over.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_TRUE(push_done.status.ok()) << push_done.status;
  EXPECT_EQ(push_done.calls, 1);
  EXPECT_EQ(pull_done.calls, 1);
}

TEST_F(SparseClientTest, DestroyingTheClientCancelsStepsInFlight) {
  Connect();
  shards_[0].set_hold(true);
  absl::Notification over;
  absl::Status status;
  SparseStep s;
  s.step = 0;
  s.push = true;
  s.done = [&](const absl::Status& st) {
    status = st;
    over.Notify();
  };
  client_->Start(std::move(s));
  ASSERT_TRUE(shards_[0].AwaitArrivals(1));
  client_.reset();  // returns once done ran
  ASSERT_TRUE(over.HasBeenNotified());
  EXPECT_EQ(status.code(), absl::StatusCode::kCancelled) << status;
}

TEST(GrpcSparseClientCreateTest, RejectsAnAssignmentItCannotServe) {
  Security security;
  Assignment a;
  a.mutable_placement()->set_num_shards(1);
  a.add_shard_addresses("127.0.0.1:1");
  auto c = GrpcSparseClient::Create(PsClientOptions(), a, &security);
  EXPECT_THAT(c.status().message(), HasSubstr("spec.tables"));
  TableSpec* t = a.mutable_spec()->add_tables();
  t->set_name("a");
  c = GrpcSparseClient::Create(PsClientOptions(), a, &security);
  EXPECT_THAT(c.status().message(), HasSubstr("spec.tables[0].dim"));
  t->set_dim(4);
  a.mutable_placement()->set_num_shards(2);
  c = GrpcSparseClient::Create(PsClientOptions(), a, &security);
  EXPECT_THAT(c.status().message(), HasSubstr("shard_addresses"));
  a.mutable_placement()->set_num_shards(1);
  EXPECT_TRUE(GrpcSparseClient::Create(PsClientOptions(), a, &security).ok());
}

}  // namespace
}  // namespace ps
