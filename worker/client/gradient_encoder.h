// GradientEncoder: a worker's gradients as they go on the wire under the
// job's WireSpec (proto/job.proto): dense in FP32 / BF16 / FP16, or top-k
// sparsified with error feedback.
//
//   GradientEncoder enc(spec.wire(), chunk_lengths);
//   EncodedChunk out;
//   enc.Encode(chunk_id, gradient_of_that_chunk, &out);
//   ChunkData: format = out.format, data = out.data, indices = out.indices
//
// Top-k (topk_fraction < 1): per chunk, v = gradient + residual; the
// k = ceil(topk_fraction * length) entries of largest |v| are sent (ties:
// the lower offset; a total order, so the choice is deterministic and BSP
// stays bitwise reproducible), in ascending offset order, in the wire
// format; the new residual is v minus what the shard will decode (0 where
// sent in FP32; the rounding error in BF16/FP16; v elsewhere). Hence, per
// chunk and over any number of steps, sum of what was sent + residual ==
// sum of the gradients (up to float rounding of the additions). A chunk
// is the unit of selection: each chunk of a tensor sends its own top
// fraction, so the tensor as a whole sends that fraction too.
//
// A value that the narrow format cannot hold (finite but beyond its range)
// makes the chunk travel as FP32: counted in fallbacks(), never inf.
//
// A step encoded again (EncodeStep with the step last encoded for that
// chunk) gets the same encoding back and leaves the residual alone: a
// worker that follows a re-placement (worker/placement_follower.h) reruns
// the refused step with a new client but this encoder, and computes the very
// same gradient, so the step is encoded once, as in an undisturbed run.
//
// Thread safety: Encode may run concurrently for different chunks; calls
// for one chunk are serialized by its own mutex (its residual).
#ifndef WORKER_CLIENT_GRADIENT_ENCODER_H_
#define WORKER_CLIENT_GRADIENT_ENCODER_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "proto/job.pb.h"

namespace ps {

struct EncodedChunk {
  WireFormat format = WIRE_FORMAT_UNSPECIFIED;  // as sent (FP32 = 0)
  std::string data;
  std::string indices;  // empty = dense
};

class GradientEncoder {
 public:
  // `chunk_lengths[id]`: elements of chunk `id`. `wire` as validated at
  // submit (an unset topk_fraction is 1).
  GradientEncoder(const WireSpec& wire, std::vector<uint64_t> chunk_lengths);

  // True when gradients go dense in FP32: callers send the gradient's own
  // bytes (zero copy) and need not call Encode.
  bool passthrough() const { return passthrough_; }
  bool topk() const { return topk_; }
  // Entries a top-k chunk of `length` elements sends: ceil(fraction *
  // length) of the decimal fraction (a float's rounding error ignored), at
  // least 1.
  uint64_t TopkCount(uint64_t length) const;

  // Encodes chunk `id`'s gradient (chunk_lengths[id] floats) into `*out`,
  // updating its residual under top-k.
  void Encode(uint32_t id, absl::Span<const float> gradient, EncodedChunk* out);
  // As Encode, for the push of `step`. Under top-k, the step last encoded
  // for the chunk is answered with that encoding again, residual untouched
  // (see the file comment); `gradient` must be the one it was encoded from.
  void EncodeStep(uint32_t id, uint64_t step, absl::Span<const float> gradient,
                  EncodedChunk* out);
  // Whether this encoder serves chunks of these lengths under `wire` (a
  // client of a re-placed job reuses its predecessor's: same chunks).
  bool Serves(const WireSpec& wire, const std::vector<uint64_t>& lengths) const;

  // The residual of chunk `id` (tests).
  std::vector<float> Residual(uint32_t id) const;
  // Chunks sent as FP32 because a value did not fit the narrow format.
  uint64_t fallbacks() const {
    return fallbacks_.load(std::memory_order_relaxed);
  }

 private:
  struct ChunkResidual {
    mutable absl::Mutex mu;
    std::vector<float> values ABSL_GUARDED_BY(mu);  // empty until first use
    // The last EncodeStep's step and encoding (top-k only).
    bool has_last ABSL_GUARDED_BY(mu) = false;
    uint64_t last_step ABSL_GUARDED_BY(mu) = 0;
    EncodedChunk last ABSL_GUARDED_BY(mu);
  };

  void EncodeTopk(ChunkResidual& r, uint64_t length,
                  absl::Span<const float> gradient, EncodedChunk* out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(r.mu);

  const WireFormat format_;
  const float fraction_;
  const bool topk_;
  const bool passthrough_;
  const std::vector<uint64_t> lengths_;
  std::unique_ptr<ChunkResidual[]> residuals_;
  std::atomic<uint64_t> fallbacks_{0};
};

}  // namespace ps

#endif  // WORKER_CLIENT_GRADIENT_ENCODER_H_
