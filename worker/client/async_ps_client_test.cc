// AsyncPsClient against FakeShardServer (in process, 127.0.0.1 port 0):
// priorities, deadlines, cancellation, callbacks, retries and a shard that
// dies mid-request. Held calls synchronize the tests; no sleeps.
#include "worker/client/async_ps_client.h"

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/grpc_status.h"
#include "common/not_retryable.h"
#include "common/security.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/client/testing/fake_shard_server.h"

namespace ps {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr int kTensors = 4;
constexpr uint64_t kLength = 4;  // floats per tensor (one chunk each)
constexpr size_t kFloats = kTensors * kLength;

absl::Time Soon() { return absl::Now() + absl::Seconds(30); }

std::string TensorName(int i) { return absl::StrCat("w", i); }

// kTensors tensors of kLength floats, chunk i = tensor i, on one shard.
Assignment OneShard(const std::string& address) {
  Assignment a;
  a.set_job_id("job");
  a.set_rank(0);
  a.set_num_workers(1);
  a.mutable_spec()->mutable_consistency()->set_mode(ASP);
  a.mutable_placement()->set_num_shards(1);
  for (int i = 0; i < kTensors; ++i) {
    TensorSpec* t = a.mutable_spec()->add_tensors();
    t->set_name(TensorName(i));
    t->add_shape(kLength);
    ChunkPlacement* c = a.mutable_placement()->add_chunks();
    c->set_chunk_id(static_cast<uint32_t>(i));
    c->set_tensor(TensorName(i));
    c->set_length(kLength);
  }
  a.add_shard_addresses(address);
  return a;
}

class AsyncPsClientTest : public ::testing::Test {
 protected:
  AsyncPsClientTest()
      : shard_(std::vector<uint64_t>(kTensors, kLength)),
        grad_(kFloats, 0.5f),
        params_(kFloats, -1.0f) {}

  // `epoch`: the assignment's Placement.epoch.
  void Connect(PsClientOptions options = PsClientOptions(),
               uint64_t epoch = 0) {
    Assignment a = OneShard(shard_.address());
    a.mutable_placement()->set_epoch(epoch);
    absl::StatusOr<std::unique_ptr<AsyncPsClient>> c =
        AsyncPsClient::Create(options, a, &security_);
    ASSERT_TRUE(c.ok()) << c.status();
    client_ = *std::move(c);
  }

  ParamRequest Tensor(int i, ParamOp op = ParamOp::kPushPull,
                      int priority = 0) {
    ParamRequest r;
    r.op = op;
    r.step = 3;
    r.tensor = TensorName(i);
    r.gradient = grad_;
    r.params = absl::MakeSpan(params_);
    r.priority = priority;
    return r;
  }

  FakeShardServer shard_;
  Security security_;
  std::vector<float> grad_, params_;
  std::unique_ptr<AsyncPsClient> client_;
};

TEST_F(AsyncPsClientTest, PerTensorPushPullWritesOnlyItsRange) {
  Connect();
  ASSERT_TRUE(client_->Wait(client_->Start(Tensor(2)), Soon()).ok());
  for (size_t k = 0; k < kFloats; ++k) {
    // Chunk 2 started at 3 and took one step of -0.5.
    EXPECT_EQ(params_[k], k / kLength == 2 ? 2.5f : -1.0f) << k;
  }
  ParamRequest pull = Tensor(0, ParamOp::kPull);
  ASSERT_TRUE(client_->Wait(client_->Start(std::move(pull)), Soon()).ok());
  EXPECT_EQ(params_[0], 1.0f);
  ParamRequest push = Tensor(1, ParamOp::kPush);
  ASSERT_TRUE(client_->Wait(client_->Start(std::move(push)), Soon()).ok());
  EXPECT_EQ(params_[kLength], -1.0f);  // a push writes no parameters
  std::vector<FakeShardServer::Arrival> a = shard_.arrivals();
  ASSERT_EQ(a.size(), 3u);
  EXPECT_EQ(a[2].method, "Push");
  EXPECT_THAT(a[2].chunk_ids, ElementsAre(1));
}

TEST_F(AsyncPsClientTest, FusedTensorsTravelInOneCall) {
  Connect();
  ParamRequest r = Tensor(0);
  r.tensor.clear();
  r.tensors = {TensorName(3), TensorName(1)};
  ASSERT_TRUE(client_->Wait(client_->Start(std::move(r)), Soon()).ok());
  std::vector<FakeShardServer::Arrival> a = shard_.arrivals();
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].method, "PushPull");
  EXPECT_THAT(a[0].chunk_ids, ElementsAre(1, 3));
  for (size_t k = 0; k < kFloats; ++k) {
    const size_t chunk = k / kLength;
    // Chunk i started at i + 1 and took one step of -0.5.
    EXPECT_EQ(params_[k], chunk == 1 || chunk == 3 ? chunk + 0.5f : -1.0f) << k;
  }
  ParamRequest both = Tensor(0);
  both.tensors = {TensorName(1)};
  EXPECT_EQ(client_->Wait(client_->Start(std::move(both)), Soon()).code(),
            absl::StatusCode::kInvalidArgument);
  ParamRequest unknown = Tensor(0);
  unknown.tensor.clear();
  unknown.tensors = {TensorName(1), "nope"};
  EXPECT_EQ(client_->Wait(client_->Start(std::move(unknown)), Soon()).code(),
            absl::StatusCode::kNotFound);
}

TEST_F(AsyncPsClientTest, QueuedRequestsGoOutByPriority) {
  PsClientOptions options;
  options.max_inflight_per_shard = 1;
  Connect(options);
  shard_.set_hold(true);
  std::vector<RequestHandle> h;
  h.push_back(client_->Start(Tensor(0, ParamOp::kPushPull, 0)));
  ASSERT_TRUE(shard_.AwaitArrivals(1, Soon()));  // on the wire, held
  h.push_back(client_->Start(Tensor(1, ParamOp::kPushPull, 1)));
  h.push_back(client_->Start(Tensor(2, ParamOp::kPushPull, 5)));
  h.push_back(client_->Start(Tensor(3, ParamOp::kPushPull, 3)));
  for (size_t n = 2; n <= 4; ++n) {
    ASSERT_TRUE(shard_.ReleaseOne());
    ASSERT_TRUE(shard_.AwaitArrivals(n, Soon()));
  }
  ASSERT_TRUE(shard_.ReleaseOne());
  for (RequestHandle handle : h)
    EXPECT_TRUE(client_->Wait(handle, Soon()).ok());
  std::vector<uint32_t> order;
  for (const auto& a : shard_.arrivals()) order.push_back(a.chunk_ids.at(0));
  EXPECT_THAT(order, ElementsAre(0, 2, 3, 1));
}

// A BSP job checkpointing every step: the shard answers a step only once all
// of its chunks are in, so the whole step goes on the wire whatever the
// window. Any other job keeps the window.
TEST_F(AsyncPsClientTest, PerStepCheckpointsPutTheWholeStepOnTheWire) {
  for (const bool gated : {false, true}) {
    SCOPED_TRACE(gated ? "BSP, every_steps: 1" : "BSP, no checkpoint");
    FakeShardServer shard(std::vector<uint64_t>(kTensors, kLength));
    Assignment a = OneShard(shard.address());
    a.mutable_spec()->mutable_consistency()->set_mode(BSP);
    if (gated) a.mutable_spec()->mutable_checkpoint()->set_every_steps(1);
    PsClientOptions options;
    options.max_inflight_per_shard = 1;
    options.max_request_bytes = kLength * sizeof(float);  // a chunk each
    absl::StatusOr<std::unique_ptr<AsyncPsClient>> client =
        AsyncPsClient::Create(options, a, &security_);
    ASSERT_TRUE(client.ok()) << client.status();
    shard.set_hold(true);
    ParamRequest step = Tensor(0);
    step.tensor.clear();  // the whole model: kTensors requests
    RequestHandle h = (*client)->Start(std::move(step));
    ASSERT_TRUE(shard.AwaitArrivals(1, Soon()));
    EXPECT_EQ(shard.AwaitArrivals(kTensors, absl::Now() + absl::Seconds(1)),
              gated);
    for (int released = 0; released < kTensors; ++released) {
      ASSERT_TRUE(shard.AwaitArrivals(released + 1, Soon()));
      ASSERT_TRUE(shard.ReleaseOne());
    }
    EXPECT_TRUE((*client)->Wait(h, Soon()).ok());
  }
}

TEST_F(AsyncPsClientTest, WaitReturnsDeadlineExceededInBoundedTime) {
  Connect();
  shard_.set_hold(true);
  RequestHandle h = client_->Start(Tensor(0));
  ASSERT_TRUE(shard_.AwaitArrivals(1, Soon()));
  const absl::Time start = absl::Now();
  absl::Status s = client_->Wait(h, start + absl::Milliseconds(50));
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("PushPull of step 3"));
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  // The request carried on: it completes once the shard answers.
  ASSERT_TRUE(shard_.ReleaseOne());
  EXPECT_TRUE(client_->Wait(h, Soon()).ok());
  EXPECT_EQ(client_->Wait(h, Soon()).code(),
            absl::StatusCode::kInvalidArgument);  // already waited
}

TEST_F(AsyncPsClientTest, CancelDropsQueuedAndStopsInFlight) {
  PsClientOptions options;
  options.max_inflight_per_shard = 1;
  Connect(options);
  shard_.set_hold(true);
  std::atomic<int> calls_a{0}, calls_b{0};
  ParamRequest a = Tensor(0);
  a.done = [&](const absl::Status& s) {
    EXPECT_EQ(s.code(), absl::StatusCode::kCancelled);
    calls_a++;
  };
  ParamRequest b = Tensor(1);
  b.done = [&](const absl::Status&) { calls_b++; };
  RequestHandle ha = client_->Start(std::move(a));
  ASSERT_TRUE(shard_.AwaitArrivals(1, Soon()));
  RequestHandle hb = client_->Start(std::move(b));
  client_->Cancel(hb);  // queued: never goes on the wire
  EXPECT_EQ(client_->Wait(hb, Soon()).code(), absl::StatusCode::kCancelled);
  client_->Cancel(ha);  // on the wire: the call is cancelled
  absl::Status s = client_->Wait(ha, Soon());
  EXPECT_EQ(s.code(), absl::StatusCode::kCancelled) << s;
  EXPECT_EQ(calls_a.load(), 1);
  EXPECT_EQ(calls_b.load(), 1);
  EXPECT_EQ(shard_.arrivals().size(), 1u);
  EXPECT_EQ(params_[kLength], -1.0f);
}

TEST_F(AsyncPsClientTest, CancelAllEndsEveryRequestNowAndLater) {
  PsClientOptions options;
  options.max_inflight_per_shard = 1;
  Connect(options);
  shard_.set_hold(true);
  RequestHandle on_wire = client_->Start(Tensor(0));
  ASSERT_TRUE(shard_.AwaitArrivals(1, Soon()));
  RequestHandle queued = client_->Start(Tensor(1));
  client_->CancelAll("workerd stopping");
  for (RequestHandle h : {on_wire, queued}) {
    absl::Status s = client_->Wait(h, Soon());
    EXPECT_EQ(s.code(), absl::StatusCode::kCancelled) << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr("workerd stopping"));
  }
  // A request started afterwards never reaches the wire.
  absl::Status later = client_->Wait(client_->Start(Tensor(2)), Soon());
  EXPECT_EQ(later.code(), absl::StatusCode::kCancelled) << later;
  EXPECT_EQ(shard_.arrivals().size(), 1u);
  EXPECT_EQ(params_[2 * kLength], -1.0f);
}

TEST_F(AsyncPsClientTest, CallbacksRunExactlyOnce) {
  Connect();
  constexpr int kRequests = 5;
  std::atomic<int> calls[kRequests] = {};
  absl::Status last[kRequests];
  auto counted = [&](ParamRequest r, int i) {
    r.done = [&calls, &last, i](const absl::Status& s) {
      last[i] = s;
      calls[i]++;
    };
    return r;
  };
  ParamRequest bad_size = Tensor(0);
  bad_size.params = absl::MakeSpan(params_).subspan(1);
  ParamRequest unknown = Tensor(0);
  unknown.tensor = "nope";
  ASSERT_TRUE(client_->Wait(client_->Start(counted(Tensor(0), 0))).ok());
  EXPECT_EQ(client_->Wait(client_->Start(counted(bad_size, 1))).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(client_->Wait(client_->Start(counted(unknown, 2))).code(),
            absl::StatusCode::kNotFound);
  absl::Notification detached_done;
  ParamRequest detached = counted(Tensor(1), 3);
  detached.done = [&](const absl::Status& s) {
    calls[3]++;
    detached_done.Notify();
  };
  client_->Detach(client_->Start(std::move(detached)));
  ASSERT_TRUE(detached_done.WaitForNotificationWithDeadline(Soon()));
  shard_.set_hold(true);
  client_->Start(counted(Tensor(2), 4));  // pending when the client goes
  ASSERT_TRUE(shard_.AwaitArrivals(3, Soon()));
  client_.reset();
  for (int i = 0; i < kRequests; ++i) EXPECT_EQ(calls[i].load(), 1) << i;
  EXPECT_THAT(std::string(last[1].message()), HasSubstr("params: 15 floats"));
  EXPECT_EQ(last[4].code(), absl::StatusCode::kCancelled);
}

TEST_F(AsyncPsClientTest, RetriesKeepTheStepWithAttemptPlusOne) {
  PsClientOptions options;
  options.initial_backoff = absl::Milliseconds(1);
  Connect(options);
  shard_.FailNext(2, grpc::Status(grpc::StatusCode::UNAVAILABLE, "busy"));
  ASSERT_TRUE(client_->Wait(client_->Start(Tensor(1)), Soon()).ok());
  std::vector<FakeShardServer::Arrival> a = shard_.arrivals();
  ASSERT_EQ(a.size(), 3u);
  for (uint32_t i = 0; i < 3; ++i) {
    EXPECT_EQ(a[i].step, 3u);
    EXPECT_EQ(a[i].attempt, i + 1);
  }
  EXPECT_EQ(client_->stats().retries, 2u);
  EXPECT_EQ(params_[kLength], 1.5f);  // applied once: 2 - 0.5
}

TEST_F(AsyncPsClientTest, OtherErrorsAreNotRetriedAndNameTheShard) {
  Connect();
  shard_.FailNext(
      1, grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "unknown job"));
  absl::Status s = client_->Wait(client_->Start(Tensor(0)), Soon());
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr(absl::StrCat("step 3: shard 0 at ", shard_.address(),
                                     " (PushPull, attempt 1): unknown job")));
}

TEST_F(AsyncPsClientTest, EveryRequestCarriesThePlacementEpoch) {
  Connect(PsClientOptions(), /*epoch=*/3);
  EXPECT_EQ(client_->placement_epoch(), 3u);
  for (ParamOp op : {ParamOp::kPull, ParamOp::kPush, ParamOp::kPushPull}) {
    ASSERT_TRUE(client_->Wait(client_->Start(Tensor(0, op)), Soon()).ok());
  }
  const std::vector<FakeShardServer::Arrival> a = shard_.arrivals();
  ASSERT_EQ(a.size(), 3u);
  for (const FakeShardServer::Arrival& arrival : a) {
    EXPECT_EQ(arrival.placement_epoch, 3u) << arrival.method;
  }
  EXPECT_EQ(a[1].method, "Push");
  EXPECT_EQ(a[1].chunk_ids, std::vector<uint32_t>{0});  // parsed as PushRequest
}

// A re-placed job: the shard's pause (UNAVAILABLE) is retried, its ABORTED
// is not, and it ends the request with that code, naming the shard.
TEST_F(AsyncPsClientTest, AbortedIsNotRetriedAndKeepsItsCode) {
  PsClientOptions options;
  options.initial_backoff = absl::Milliseconds(1);
  Connect(options, /*epoch=*/2);
  shard_.FailNext(2, grpc::Status(grpc::StatusCode::UNAVAILABLE, "paused"));
  ASSERT_TRUE(client_->Wait(client_->Start(Tensor(1)), Soon()).ok());
  ASSERT_EQ(shard_.arrivals().size(), 3u);
  shard_.FailNext(1, grpc::Status(grpc::StatusCode::ABORTED,
                                  "job job was re-placed (placement epoch 3; "
                                  "this request has 2)"));
  const absl::Status s = client_->Wait(client_->Start(Tensor(2)), Soon());
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted) << s;
  EXPECT_THAT(std::string(s.message()),
              HasSubstr(absl::StrCat(
                  "step 3: shard 0 at ", shard_.address(),
                  " (PushPull, attempt 1): job job was re-placed (placement "
                  "epoch 3; this request has 2)")));
  EXPECT_EQ(shard_.arrivals().size(), 4u);  // not retried
  EXPECT_EQ(params_[2 * kLength], -1.0f);   // nothing written
}

// A pause for a re-placement outlasts max_attempts: its answers (marked
// PausedForReplacement across the wire) are retried for the attempt
// deadline; a plain UNAVAILABLE still stops at max_attempts.
TEST_F(AsyncPsClientTest, APauseIsRetriedPastMaxAttempts) {
  PsClientOptions options;
  options.max_attempts = 3;
  options.initial_backoff = absl::Milliseconds(1);
  options.max_backoff = absl::Milliseconds(1);
  Connect(options);
  shard_.FailNext(6, ToGrpcStatus(PausedForReplacement(absl::UnavailableError(
                         "job job pauses at step 3 for a re-placement"))));
  ASSERT_TRUE(client_->Wait(client_->Start(Tensor(1)), Soon()).ok());
  EXPECT_EQ(shard_.arrivals().size(), 7u);
  shard_.FailNext(6, grpc::Status(grpc::StatusCode::UNAVAILABLE, "busy"));
  const absl::Status s = client_->Wait(client_->Start(Tensor(2)), Soon());
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_EQ(shard_.arrivals().size(), 10u);  // 3 attempts
}

TEST_F(AsyncPsClientTest, ShardDyingMidRequestEndsWithAClearError) {
  PsClientOptions options;
  options.max_attempts = 3;
  options.initial_backoff = absl::Milliseconds(1);
  options.rpc_deadline = absl::Seconds(10);
  Connect(options);
  shard_.set_hold(true);
  RequestHandle h = client_->Start(Tensor(0));
  ASSERT_TRUE(shard_.AwaitArrivals(1, Soon()));
  shard_.Kill();
  const absl::Time start = absl::Now();
  absl::Status s = client_->Wait(h, Soon());
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_THAT(std::string(s.message()),
              HasSubstr(absl::StrCat("shard 0 at ", shard_.address(),
                                     " (PushPull, attempt 3)")));
  EXPECT_LT(absl::Now() - start, absl::Seconds(20));
  EXPECT_EQ(client_->stats().retries, 2u);
}

TEST_F(AsyncPsClientTest, ManyThreadsShareOneClient) {
  PsClientOptions options;
  options.max_inflight_per_shard = 2;
  Connect(options);
  constexpr int kSteps = 25;
  std::vector<std::thread> threads;
  std::atomic<int> callbacks{0};
  for (int t = 0; t < kTensors; ++t) {
    threads.emplace_back([&, t] {
      for (int step = 0; step < kSteps; ++step) {
        ParamRequest r = Tensor(t, ParamOp::kPushPull, step % 3);
        r.done = [&](const absl::Status&) { callbacks++; };
        EXPECT_TRUE(client_->Wait(client_->Start(std::move(r)), Soon()).ok());
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(callbacks.load(), kTensors * kSteps);
  for (size_t k = 0; k < kFloats; ++k) {
    // Chunk i starts at i + 1; every step took 0.5 off.
    EXPECT_EQ(params_[k], static_cast<float>(k / kLength + 1) - 0.5f * kSteps)
        << k;
  }
}

// A coordinator that says where the shards are: `address` and `problems`.
LocateShards Coordinator(std::string address,
                         std::vector<std::string> problems = {}) {
  return [=](absl::Time) -> absl::StatusOr<ShardAddressesResponse> {
    ShardAddressesResponse r;
    r.add_addresses(address);
    for (const std::string& p : problems) r.add_problems(p);
    return r;
  };
}

TEST_F(AsyncPsClientTest, AShardThatMovedIsFollowedWithTheSameStep) {
  // The shard's state lives on in `moved` (as a restarted psd restores its
  // checkpoint); the first shard dies mid-request.
  FakeShardServer moved(std::vector<uint64_t>(kTensors, kLength));
  PsClientOptions options;
  options.max_attempts = 50;
  options.initial_backoff = absl::Milliseconds(1);
  options.max_backoff = absl::Milliseconds(20);
  options.locate_interval = absl::Milliseconds(10);
  options.locate_shards = Coordinator(moved.address());
  Connect(options);
  shard_.set_hold(true);
  RequestHandle h = client_->Start(Tensor(1));
  ASSERT_TRUE(shard_.AwaitArrivals(1, Soon()));
  shard_.Kill();
  ASSERT_TRUE(client_->Wait(h, Soon()).ok());
  std::vector<FakeShardServer::Arrival> a = moved.arrivals();
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].step, 3u);
  EXPECT_GT(a[0].attempt, 1u);        // a retry of the same call
  EXPECT_EQ(params_[kLength], 1.5f);  // applied once, at the new address
  // Later requests go straight to the new address.
  ASSERT_TRUE(client_->Wait(client_->Start(Tensor(2)), Soon()).ok());
  EXPECT_EQ(moved.arrivals().size(), 2u);
}

// A primary cut off from the network (alive, silent: no error comes back)
// is failed over; the heartbeat's new replica epoch makes a lookup, and
// the call still on the wire to the old address goes to the successor at
// once, the same step, attempt + 1, instead of at its deadline.
TEST_F(AsyncPsClientTest, AFailoverMovesCallsStillOnTheWire) {
  FakeShardServer successor(std::vector<uint64_t>(kTensors, kLength));
  auto failed_over = std::make_shared<std::atomic<bool>>(false);
  PsClientOptions options;
  options.locate_interval = absl::Milliseconds(10);
  options.relocate_signal = std::make_shared<RelocateSignal>();
  options.locate_shards =
      [failed_over, old_address = shard_.address(),
       new_address = successor.address()](
          absl::Time) -> absl::StatusOr<ShardAddressesResponse> {
    ShardAddressesResponse r;
    r.add_addresses(failed_over->load() ? new_address : old_address);
    return r;
  };
  Connect(options);
  shard_.set_hold(true);
  RequestHandle h = client_->Start(Tensor(1));
  ASSERT_TRUE(shard_.AwaitArrivals(1, Soon()));
  failed_over->store(true);
  options.relocate_signal->OnReplicaEpoch(2);
  ASSERT_TRUE(client_->Wait(h, Soon()).ok());
  std::vector<FakeShardServer::Arrival> a = successor.arrivals();
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].step, 3u);
  EXPECT_EQ(a[0].attempt, 2u);
  EXPECT_EQ(params_[kLength], 1.5f);  // applied once, by the successor
  EXPECT_EQ(client_->stats().retries, 1u);
}

TEST_F(AsyncPsClientTest, AShardNotFoundEndsNamingTheCoordinatorsProblem) {
  PsClientOptions options;
  options.max_attempts = 20;
  options.initial_backoff = absl::Milliseconds(1);
  options.max_backoff = absl::Milliseconds(50);
  options.locate_interval = absl::Milliseconds(10);
  const std::string problem =
      "shards[0].address_file /run/s0.addr: \"junk\" is not host:port";
  options.locate_shards = Coordinator(shard_.address(), {problem});
  Connect(options);
  shard_.Kill();
  const absl::Time start = absl::Now();
  absl::Status s = client_->Wait(client_->Start(Tensor(0)), Soon());
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_THAT(std::string(s.message()),
              HasSubstr(absl::StrCat("shard 0 at ", shard_.address(),
                                     " (PushPull, attempt 20)")));
  EXPECT_THAT(std::string(s.message()), HasSubstr("coordinator: " + problem));
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
}

}  // namespace
}  // namespace ps
