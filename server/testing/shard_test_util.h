// Fixtures shared by the Shard tests (server/shard_*_test.cc): a small job
// spec, its registration, deterministic gradients, asynchronous calls whose
// callbacks record their status, checksums and stats lookups.
//
//   Shard shard(ShardOptions{});
//   const RegisterJobRequest reg = Registration("j", Spec(BSP, 2));
//   auto call = StartPushPull(shard, reg, /*worker=*/0, /*step=*/0,
//                             /*version=*/0);
//   ASSERT_TRUE(call->done.WaitForNotificationWithTimeout(absl::Seconds(30)));
#ifndef SERVER_TESTING_SHARD_TEST_UTIL_H_
#define SERVER_TESTING_SHARD_TEST_UTIL_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/notification.h"
#include "proto/job.pb.h"
#include "proto/ps.pb.h"
#include "server/shard.h"

namespace ps {
namespace shard_test {

// Chunks of 100 floats: "w" [30, 10] cuts into chunks 0..2, "b" [10] is
// chunk 3.
inline constexpr uint64_t kChunkFloats = 100;
inline constexpr int kNumChunks = 4;

JobSpec Spec(ConsistencyMode mode, uint32_t workers);
// Spec without momentum and with one sparse table "emb" (dim 4, 1000 ids,
// rows initialized to 1, Adagrad at 0.5).
JobSpec SparseSpec(ConsistencyMode mode, uint32_t workers);

// Chunk i goes to shard i % num_shards.
RegisterJobRequest Registration(const std::string& id, const JobSpec& spec,
                                uint32_t num_shards = 1);

// Registration(id, spec, 2) with replication 2: chunk i's primary on
// shard i % 2, its backup on the other.
RegisterJobRequest ReplicatedOnTwo(const std::string& id, JobSpec spec);

ShardOptions Options(uint32_t shard_id, uint64_t budget = 8ull << 30);

// The coordinator's view of two shards at addresses "s0" and "s1": `epoch`,
// with the shards in `failed` failed over.
SetReplicaViewRequest View(uint64_t epoch, std::vector<uint32_t> failed);

uint64_t ChunkLength(const RegisterJobRequest& reg, uint32_t chunk);

// A deterministic gradient with magnitudes over five decades, so that
// summing in another order would change the bits.
std::vector<float> Gradient(uint32_t worker, uint64_t step, uint32_t chunk,
                            uint64_t n);

std::string Bytes(const std::vector<float>& v);
// The first `n` row ids (from 0 up) that ShardForId places on `shard` of
// `num_shards`.
std::vector<uint64_t> IdsOfShard(uint32_t shard, uint32_t num_shards, size_t n);
std::vector<float> Floats(const std::string& bytes);

// Gradients of `worker` for `step` on `chunks`, each tagged with `version`.
template <typename Req>
Req PushRequestFor(const RegisterJobRequest& reg, uint32_t worker,
                   uint64_t step, const std::vector<uint32_t>& chunks,
                   uint64_t version) {
  Req req;
  req.set_job_id(reg.job_id());
  req.set_worker(worker);
  req.set_step(step);
  for (uint32_t c : chunks) {
    ChunkData* g = req.add_gradients();
    g->set_chunk_id(c);
    g->set_version(version);
    g->set_data(Bytes(Gradient(worker, step, c, ChunkLength(reg, c))));
  }
  return req;
}

std::vector<uint32_t> AllChunks();

// One asynchronous call: the callback records the status and notifies.
template <typename Resp>
struct Call {
  absl::Notification done;
  absl::Status status;
  Resp resp;
  std::function<void(absl::Status)> Callback() {
    return [this](absl::Status s) {
      status = std::move(s);
      done.Notify();
    };
  }
};
using PushPullCall = Call<PushPullResponse>;
using PullCall = Call<PullResponse>;

std::unique_ptr<PushPullCall> StartPushPull(Shard& shard,
                                            const PushPullRequest& req);
// A PushPull of `worker` for `step` on every chunk.
std::unique_ptr<PushPullCall> StartPushPull(Shard& shard,
                                            const RegisterJobRequest& reg,
                                            uint32_t worker, uint64_t step,
                                            uint64_t version);

std::unique_ptr<PullCall> StartPull(Shard& shard, const std::string& job,
                                    uint64_t step, uint64_t min_version,
                                    std::vector<uint32_t> chunk_ids = {});

// Every parameter of the job on this shard, by chunk (an immediate pull).
std::vector<std::vector<float>> Params(Shard& shard, const std::string& job);

// A checksum over every parameter bit and version of the job on this shard.
uint64_t Checksum(Shard& shard, const std::string& job);

JobStats StatsOf(const Shard& shard, const std::string& job);

uint64_t Rejected(const JobStats& s, const std::string& reason);

// Checkpoints and restarts.

// A fresh directory under TEST_TMPDIR.
std::string CheckpointDir(const std::string& name);

// The files a kill -9 would leave: a copy of the directory right now.
std::string CrashImage(const std::string& dir, const std::string& name);

std::unique_ptr<Shard> CheckpointingShard(const std::string& dir,
                                          Shard::RestoreReport* report);

JobSpec CheckpointSpec(ConsistencyMode mode, uint32_t every_steps,
                       OptimizerKind kind = SGD);

// Both workers push `step` (in the given order); both answers arrive.
void BspStep(Shard& shard, const RegisterJobRequest& reg, uint64_t step,
             std::vector<uint32_t> order = {0, 1});

// The same steps on a shard without checkpoints.
uint64_t ReferenceChecksum(const RegisterJobRequest& reg, uint64_t steps);

// The parameters after `steps` BSP steps on a fresh shard without
// checkpoints, one thread, workers 0..workers-1 pushing every chunk in
// order: the reference for runs that interleave the same pushes.
std::vector<std::vector<float>> SequentialBspParams(
    const RegisterJobRequest& reg, uint32_t workers, int steps);

}  // namespace shard_test
}  // namespace ps

#endif  // SERVER_TESTING_SHARD_TEST_UTIL_H_
