#include "worker/trainer/exchange_pipeline.h"

#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

// Keeps every exchange until the test finishes it.
class HeldClient final : public ParameterClient {
 public:
  absl::Status Pull(uint64_t, absl::Span<float>) override {
    return absl::UnimplementedError("Pull");
  }
  absl::Status PushPull(uint64_t, absl::Span<const float>,
                        absl::Span<float>) override {
    return absl::UnimplementedError("PushPull");
  }
  bool supports_exchange() const override { return true; }
  void StartExchange(TensorExchange x) override {
    absl::MutexLock lock(&mu_);
    held_.push_back(std::move(x));
  }

  std::vector<std::vector<std::string>> tensors() {
    absl::MutexLock lock(&mu_);
    std::vector<std::vector<std::string>> out;
    for (const TensorExchange& x : held_) out.push_back(x.tensors);
    return out;
  }
  std::vector<int> priorities() {
    absl::MutexLock lock(&mu_);
    std::vector<int> out;
    for (const TensorExchange& x : held_) out.push_back(x.priority);
    return out;
  }
  // Finishes exchange i with `s`.
  void Finish(size_t i, absl::Status s) {
    std::function<void(const absl::Status&)> done;
    {
      absl::MutexLock lock(&mu_);
      done = std::move(held_[i].done);
    }
    done(s);
  }

 private:
  absl::Mutex mu_;
  std::vector<TensorExchange> held_ ABSL_GUARDED_BY(mu_);
};

// Three layers, last one smallest: fc0 1000 B, fc1 400 B, fc2 40 B.
std::vector<ExchangePipeline::Layer> Layers() {
  return {{{"fc0/w", "fc0/b"}, 1000},
          {{"fc1/w", "fc1/b"}, 400},
          {{"fc2/w", "fc2/b"}, 40}};
}

struct Fixture {
  explicit Fixture(size_t fusion_bytes)
      : grad(360),
        params(360),
        pipe(&client, Layers(), {fusion_bytes}, grad, absl::MakeSpan(params)) {}
  ~Fixture() {
    // Whatever is still held must end before the pipeline can go.
    for (size_t i = finished; i < client.tensors().size(); ++i) {
      client.Finish(i, absl::OkStatus());
    }
  }
  HeldClient client;
  std::vector<float> grad, params;
  ExchangePipeline pipe;
  size_t finished = 0;
};

TEST(ExchangePipelineTest, EachLayerAloneWithoutFusion) {
  Fixture f(/*fusion_bytes=*/1);
  for (size_t l : {2, 1, 0}) f.pipe.LayerReady(7, l);
  f.pipe.Flush(7);
  EXPECT_EQ(f.client.tensors(),
            (std::vector<std::vector<std::string>>{
                {"fc2/w", "fc2/b"}, {"fc1/w", "fc1/b"}, {"fc0/w", "fc0/b"}}));
  // The first layer, needed first by the next forward, goes first.
  EXPECT_EQ(f.client.priorities(), (std::vector<int>{1, 2, 3}));
}

TEST(ExchangePipelineTest, SmallLayersRideWithTheNext) {
  Fixture f(/*fusion_bytes=*/256);
  f.pipe.LayerReady(0, 2);  // 40 B: held
  EXPECT_TRUE(f.client.tensors().empty());
  f.pipe.LayerReady(0, 1);  // 440 B held: out
  ASSERT_EQ(f.client.tensors().size(), 1u);
  EXPECT_EQ(f.client.tensors()[0],
            (std::vector<std::string>{"fc2/w", "fc2/b", "fc1/w", "fc1/b"}));
  EXPECT_EQ(f.client.priorities()[0], 2);
  f.pipe.LayerReady(0, 0);
  f.pipe.Flush(0);  // nothing held
  EXPECT_EQ(f.client.tensors().size(), 2u);
  EXPECT_EQ(f.pipe.exchanges_started(), 2u);
}

TEST(ExchangePipelineTest, AtMostMaxExchangesPerStep) {
  HeldClient client;
  std::vector<float> grad(360), params(360);
  ExchangePipeline::Options options;
  options.fusion_bytes = 1;
  options.max_exchanges_per_step = 2;
  {
    ExchangePipeline pipe(&client, Layers(), options, grad,
                          absl::MakeSpan(params));
    for (uint64_t step : {0, 1}) {
      for (size_t l : {2, 1, 0}) pipe.LayerReady(step, l);
      pipe.Flush(step);
    }
    // Per step: fc2 alone, then the rest together.
    EXPECT_EQ(client.tensors(), (std::vector<std::vector<std::string>>{
                                    {"fc2/w", "fc2/b"},
                                    {"fc1/w", "fc1/b", "fc0/w", "fc0/b"},
                                    {"fc2/w", "fc2/b"},
                                    {"fc1/w", "fc1/b", "fc0/w", "fc0/b"}}));
    for (size_t i = 0; i < 4; ++i) client.Finish(i, absl::OkStatus());
  }
}

TEST(ExchangePipelineTest, FlushSendsWhatIsHeld) {
  Fixture f(/*fusion_bytes=*/1 << 20);
  for (size_t l : {2, 1, 0}) f.pipe.LayerReady(3, l);
  EXPECT_TRUE(f.client.tensors().empty());
  f.pipe.Flush(3);
  ASSERT_EQ(f.client.tensors().size(), 1u);
  EXPECT_EQ(f.client.tensors()[0].size(), 6u);
  EXPECT_EQ(f.client.priorities()[0], 3);
}

TEST(ExchangePipelineTest, AwaitLayerBlocksUntilItsExchangeIsDone) {
  Fixture f(/*fusion_bytes=*/1);
  // Before any step every layer is in (the initial pull).
  EXPECT_TRUE(f.pipe.AwaitLayer(0).ok());
  for (size_t l : {2, 1, 0}) f.pipe.LayerReady(7, l);
  absl::Notification got0;
  absl::Status s0;
  std::thread waiter([&] {
    s0 = f.pipe.AwaitLayer(0);
    got0.Notify();
  });
  f.client.Finish(0, absl::OkStatus());  // fc2
  f.client.Finish(1, absl::OkStatus());  // fc1
  EXPECT_TRUE(f.pipe.AwaitLayer(1).ok());
  EXPECT_FALSE(got0.WaitForNotificationWithTimeout(absl::Milliseconds(50)));
  f.client.Finish(2, absl::UnavailableError("shard 0 gone"));  // fc0
  f.finished = 3;
  waiter.join();
  EXPECT_EQ(s0.code(), absl::StatusCode::kUnavailable);
  const absl::Status all = f.pipe.AwaitAll();
  EXPECT_EQ(all.code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(f.pipe.AwaitAll().ok());        // reported once
  EXPECT_EQ(f.pipe.first_failed_step(), 7u);  // kept: where to resume
}

TEST(ExchangePipelineTest, DiscardFailsTheHeldLayers) {
  Fixture f(/*fusion_bytes=*/1 << 20);
  f.pipe.LayerReady(0, 2);
  f.pipe.Discard(absl::InternalError("device 1 failed"));
  EXPECT_EQ(f.pipe.AwaitLayer(2).code(), absl::StatusCode::kInternal);
  EXPECT_TRUE(f.pipe.AwaitLayer(1).ok());
  EXPECT_TRUE(f.client.tensors().empty());
  EXPECT_TRUE(f.pipe.AwaitAll().ok());
  EXPECT_FALSE(f.pipe.first_failed_step().has_value());  // no exchange failed
}

}  // namespace
}  // namespace ps
