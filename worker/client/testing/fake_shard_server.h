// FakeShardServer: an in-process ParameterServer on 127.0.0.1 (port 0) for
// client tests. It serves PushPull, Pull and Push of one job from its own
// chunk values (SGD with learning rate 1; chunk i starts all i + 1), parsed
// and written with protobuf, and lets a test steer it: hold calls and
// release them one at a time, see the order they arrived in, fail the next
// ones, or kill the shard in the middle of a call.
//
//   FakeShardServer shard({4, 4});  // two chunks of 4 floats
//   shard.set_hold(true);
//   ... client->Start(...) ...
//   ASSERT_TRUE(shard.AwaitArrivals(1, absl::Now() + absl::Seconds(10)));
//   shard.ReleaseOne();
#ifndef WORKER_CLIENT_TESTING_FAKE_SHARD_SERVER_H_
#define WORKER_CLIENT_TESTING_FAKE_SHARD_SERVER_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "proto/ps.grpc.pb.h"

namespace ps {

// Thread-safe.
class FakeShardServer final
    : public ParameterServer::WithRawCallbackMethod_PushPull<
          ParameterServer::WithRawCallbackMethod_Pull<
              ParameterServer::WithRawCallbackMethod_Push<
                  ParameterServer::CallbackService>>> {
 public:
  struct Arrival {
    std::string method;  // "PushPull", "Pull" or "Push"
    uint64_t step = 0;
    uint32_t attempt = 0;
    std::vector<uint32_t> chunk_ids;
    uint64_t placement_epoch = 0;  // as the request carried it
  };

  // Serves chunks of `chunk_lengths[id]` floats.
  explicit FakeShardServer(std::vector<uint64_t> chunk_lengths);
  // Finishes held calls with UNAVAILABLE and stops the server.
  ~FakeShardServer() override;

  std::string address() const { return address_; }

  // While set, calls are recorded and parked until released.
  void set_hold(bool hold);
  // Answers the oldest parked call; false if none is parked.
  bool ReleaseOne();
  // The next `n` calls are answered with `status` (not held).
  void FailNext(int n, grpc::Status status);
  // Waits until `n` calls arrived in all; false at `deadline`.
  bool AwaitArrivals(size_t n, absl::Time deadline);
  std::vector<Arrival> arrivals();
  // Answers parked calls with UNAVAILABLE and shuts the server down: later
  // calls find no one listening.
  void Kill();

  grpc::ServerUnaryReactor* PushPull(grpc::CallbackServerContext* ctx,
                                     const grpc::ByteBuffer* req,
                                     grpc::ByteBuffer* resp) override;
  grpc::ServerUnaryReactor* Pull(grpc::CallbackServerContext* ctx,
                                 const grpc::ByteBuffer* req,
                                 grpc::ByteBuffer* resp) override;
  grpc::ServerUnaryReactor* Push(grpc::CallbackServerContext* ctx,
                                 const grpc::ByteBuffer* req,
                                 grpc::ByteBuffer* resp) override;

 private:
  // Computes a reply into `reply` (or fails).
  using Answer = std::function<grpc::Status(std::string* reply)>;
  grpc::ServerUnaryReactor* Handle(grpc::CallbackServerContext* ctx,
                                   grpc::ByteBuffer* resp, Arrival arrival,
                                   Answer answer);
  // Applies a push (gradients) and fills `reply` with the chunks' values.
  grpc::Status Apply(const PushPullRequest& req, PushPullResponse* reply);
  grpc::Status Read(const std::vector<uint32_t>& ids, PullResponse* reply);

  struct Parked {
    grpc::ServerUnaryReactor* reactor;
    grpc::ByteBuffer* resp;
    Answer answer;
  };
  static void Finish(Parked p);

  std::unique_ptr<grpc::Server> server_;
  std::string address_;
  absl::Mutex mu_;
  std::vector<std::vector<float>> values_ ABSL_GUARDED_BY(mu_);
  std::vector<uint64_t> versions_ ABSL_GUARDED_BY(mu_);
  bool hold_ ABSL_GUARDED_BY(mu_) = false;
  bool killed_ ABSL_GUARDED_BY(mu_) = false;
  int fail_next_ ABSL_GUARDED_BY(mu_) = 0;
  grpc::Status fail_status_ ABSL_GUARDED_BY(mu_);
  std::deque<Parked> parked_ ABSL_GUARDED_BY(mu_);
  std::vector<Arrival> arrivals_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ps

#endif  // WORKER_CLIENT_TESTING_FAKE_SHARD_SERVER_H_
