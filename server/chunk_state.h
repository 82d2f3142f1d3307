// ChunkState: everything a shard knows about one chunk of a job's
// parameters, in one plain value, so that a checkpoint can save and restore
// a chunk whole.
//
//   ChunkState s = NewChunkState(placement, optimizer, num_workers);
//   ... values initialised by core/init.h, updated by the shard ...
//
// Not synchronized: the shard guards each ChunkState with its chunk's mutex.
#ifndef SERVER_CHUNK_STATE_H_
#define SERVER_CHUNK_STATE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "core/float_bytes.h"
#include "proto/job.pb.h"
#include "server/optimizer.h"

namespace ps {

// A worker's gradient for the BSP step being aggregated: the payload left
// where the request arrived (`received`, while it has pieces: no copy, see
// Shard::PushPull), or native floats in a byte buffer (`floats`, AsFloats in
// core/float_bytes.h; capacity kept across steps).
struct PendingGradient {
  std::string floats;
  BytePieces received;
};

struct ChunkState {
  // Which chunk: chunk_id, tensor, index, offset, length, shard.
  ChunkPlacement placement;
  // Updates applied so far; BSP: also the step being aggregated.
  uint64_t version = 0;
  // The parameters, `placement.length()` floats.
  std::vector<float> values;
  // The optimizer's per-chunk slots and step count.
  OptimizerState optimizer;

  // BSP dedup and aggregation for step == version, indexed by worker rank:
  // pushed[w] says whether w's gradient arrived; gradients[w] holds it.
  std::vector<uint8_t> pushed;
  std::vector<PendingGradient> gradients;

  // ASP/SSP dedup, indexed by worker rank: 1 + the last step of w applied
  // to this chunk (0 = none); a push for an earlier or equal step is a
  // duplicate (a retry).
  std::vector<uint64_t> next_step;
};

// A fresh chunk at version 0 with zeroed values (the caller initialises
// them), fresh optimizer state and empty dedup state for `num_workers`.
inline ChunkState NewChunkState(const ChunkPlacement& placement,
                                const Optimizer& optimizer,
                                uint32_t num_workers) {
  ChunkState s;
  s.placement = placement;
  s.values.assign(placement.length(), 0.0f);
  s.optimizer = optimizer.NewState(placement.length());
  s.pushed.assign(num_workers, 0);
  s.gradients.resize(num_workers);
  s.next_step.assign(num_workers, 0);
  return s;
}

}  // namespace ps

#endif  // SERVER_CHUNK_STATE_H_
