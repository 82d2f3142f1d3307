// Deterministic, platform-independent initial values for parameter chunks.
//
//   std::vector<float> values(chunk.length());
//   PS_RETURN_IF_ERROR(InitValues(job.seed(), job.tensors(t), chunk.offset(),
//                                 absl::MakeSpan(values)));
//
// Element e of a tensor gets a value that is a pure function of (job seed,
// tensor name, e): the chunk with index i covers elements
// [i * chunk_elements, ...), so its values depend only on (seed, tensor,
// chunk index) as the design asks, and a job starts from the same parameters
// whatever the shard count (or even the partition size).
//
// Randomness comes from a counter-based generator (splitmix64 of seed +
// counter) and the normal kinds use Marsaglia's polar method with a logarithm
// computed here from +, -, *, / only: every operation is IEEE-exact, so the
// bits are the same on every platform and compiler (no std::
// distributions, no libm transcendental functions).
#ifndef CORE_INIT_H_
#define CORE_INIT_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "proto/job.pb.h"

namespace ps {

// Checks `tensor.init` against the tensor's shape. Errors are
// kInvalidArgument named relative to the tensor, e.g. "init.scale: must be
// >= 0, got -1" (callers prefix "tensors[3]."). INIT_UNSPECIFIED means ZEROS.
absl::Status ValidateInit(const TensorSpec& tensor);

// Fills `out` with elements [offset, offset + out.size()) of the tensor's
// initial values. Requires ValidateInit(tensor).ok() (returns its error
// otherwise, leaving `out` unspecified). Thread-safe, never blocks.
absl::Status InitValues(uint64_t job_seed, const TensorSpec& tensor,
                        uint64_t offset, absl::Span<float> out);

// The 64-bit seed of one tensor's random stream (exposed for tests).
uint64_t TensorSeed(uint64_t job_seed, absl::string_view tensor_name);

// Natural logarithm of x > 0 from IEEE-exact operations only (exposed for
// tests); accurate to a few ulp of a double.
double PortableLog(double x);

}  // namespace ps

#endif  // CORE_INIT_H_
