// BatchLoader: background threads that gather a worker's training batches
// ahead of the consumer, in step order, into a bounded set of reused buffers.
//
//   absl::StatusOr<std::unique_ptr<BatchLoader>> loader = BatchLoader::Create(
//       data.train, *std::move(plan), /*start_step=*/0, total_steps, {});
//   for (;;) {
//     absl::StatusOr<std::unique_ptr<Batch>> batch =
//         (*loader)->Pop(absl::Now() + absl::Seconds(60));
//     if (absl::IsOutOfRange(batch.status())) break;  // every step popped
//     if (!batch.ok()) return batch.status();
//     ... use (*batch)->x, (*batch)->labels ...
//     (*loader)->Recycle(*std::move(batch));  // buffers go back to the pool
//   }
//
// Life cycle:
//
//   Create ──> running ──(every step popped)──> drained (Pop: kOutOfRange)
//                 │
//                 └──(Close or destructor)──> closed (Pop: kCancelled)
//
// Step s holds examples order[b * B, (b + 1) * B) of epoch e = s / spe,
// b = s % spe, where order = plan.EpochOrder(e) and spe = steps per epoch; a
// batch depends only on (plan, s), never on thread timing, so a run is
// reproducible and a worker that starts at step s > 0 sees what it would have
// seen had it run from 0.
//
// Bounded prefetch: threads claim a step only while it is fewer than
// `prefetch` steps ahead of the consumer, so at most `prefetch` batches are
// filled or being filled; with the consumer recycling each batch, the loader
// allocates prefetch + 1 buffers in all and none after warm-up.
#ifndef WORKER_DATA_LOADER_H_
#define WORKER_DATA_LOADER_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "worker/data/dataset.h"
#include "worker/data/shard.h"

namespace ps {

// One step's examples. Owned by whoever holds the unique_ptr; hand it back
// with BatchLoader::Recycle so its buffers are reused.
struct Batch {
  uint64_t step = 0;
  uint64_t epoch = 0;
  size_t size = 0;                // examples, = the plan's batch size
  std::vector<float> x;           // size * dim features, row-major
  std::vector<int32_t> labels;    // size labels
  std::vector<uint32_t> indices;  // size data set indices (tests, debugging)
};

// Thread-safe. Pop is meant for one consumer thread (the order of batches
// across several concurrent consumers is unspecified); Recycle, Close and
// stats may be called from any thread.
class BatchLoader {
 public:
  struct Options {
    // Loader threads (>= 1).
    size_t num_threads = 2;
    // Batches filled ahead of the consumer (>= 1).
    size_t prefetch = 4;
    // Test hook: when set, a loader thread calls it with the step it claimed,
    // before filling that step's batch (tests stall producers with it).
    std::function<void(uint64_t step)> before_fill;
  };

  struct Stats {
    uint64_t filled = 0;   // batches completely filled
    uint64_t popped = 0;   // batches handed to the consumer
    uint64_t starved = 0;  // pops that found their batch not yet filled
    size_t buffers = 0;    // batch buffers ever allocated
  };

  // Starts loader threads producing the batches of steps
  // [start_step, end_step). kInvalidArgument naming the field for
  // num_threads or prefetch of 0, a null `train`, start_step > end_step, or a
  // plan whose share does not index into `train`.
  static absl::StatusOr<std::unique_ptr<BatchLoader>> Create(
      std::shared_ptr<const Dataset> train, ShardPlan plan, uint64_t start_step,
      uint64_t end_step, Options options);

  // Closes and joins the threads. Batches the caller still holds stay valid.
  ~BatchLoader();

  BatchLoader(const BatchLoader&) = delete;
  BatchLoader& operator=(const BatchLoader&) = delete;

  // Returns the next step's batch. Blocks until it is filled, `deadline`
  // passes (kDeadlineExceeded, the step can still be popped later), or the
  // loader is closed (kCancelled). kOutOfRange once every step was popped.
  absl::StatusOr<std::unique_ptr<Batch>> Pop(absl::Time deadline);

  // Returns the buffers of a batch this loader popped for reuse.
  // Non-blocking; null is ignored.
  void Recycle(std::unique_ptr<Batch> batch);

  // Stops the threads after the batches they are filling and wakes every
  // blocked Pop. Idempotent; does not wait for the threads (the destructor
  // does).
  void Close();

  Stats stats() const;

  uint64_t steps_per_epoch() const { return plan_.steps_per_epoch(); }

 private:
  BatchLoader(std::shared_ptr<const Dataset> train, ShardPlan plan,
              uint64_t start_step, uint64_t end_step, Options options);

  void ThreadMain();
  // The visiting order of `epoch`, computed on first use.
  std::shared_ptr<const std::vector<uint32_t>> OrderLocked(uint64_t epoch)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::unique_ptr<Batch> TakeBufferLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool ShouldWakeProducerLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::shared_ptr<const Dataset> train_;
  const ShardPlan plan_;
  const uint64_t end_step_;
  const Options options_;

  mutable absl::Mutex mu_;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t next_claim_ ABSL_GUARDED_BY(mu_);
  uint64_t next_pop_ ABSL_GUARDED_BY(mu_);
  // Filled batches; step s lives in slot s % prefetch (steps in flight span
  // fewer than prefetch consecutive steps, so slots never collide).
  std::vector<std::unique_ptr<Batch>> slots_ ABSL_GUARDED_BY(mu_);
  std::vector<std::unique_ptr<Batch>> free_ ABSL_GUARDED_BY(mu_);
  std::map<uint64_t, std::shared_ptr<const std::vector<uint32_t>>> orders_
      ABSL_GUARDED_BY(mu_);
  Stats stats_ ABSL_GUARDED_BY(mu_);

  std::vector<std::thread> threads_;  // written only in the constructor
};

}  // namespace ps

#endif  // WORKER_DATA_LOADER_H_
