// Initial values of sparse-table rows: a pure function of (seed, id, element).
//
//   RowInitializer init{RowInitializer::Kind::kNormal, 0, 0.01f, seed};
//   PS_RETURN_IF_ERROR(init.Validate());
//   init.Fill(id, absl::MakeSpan(row, dim));
//
// A row that is not stored (never admitted, or evicted) reads these values on
// every pull, and a row that is created starts from exactly them, so a value
// must never depend on the time, the shard, the stripe or the order of
// requests. The kinds mirror the dense tensors' (core/init.h): ZEROS,
// CONSTANT (value), UNIFORM in [-scale, scale), NORMAL (mean 0, stddev
// scale). Randomness: element e of row `id` uses the counter-based stream
// MixId64(seed + (id + 1) * G) (G = splitmix64's golden gamma) at counter e;
// normals use Marsaglia's polar method with core/init's IEEE-exact logarithm,
// so the bits are the same on every platform and compiler.
#ifndef SERVER_SPARSE_ROW_INITIALIZER_H_
#define SERVER_SPARSE_ROW_INITIALIZER_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/types/span.h"

namespace ps {

struct RowInitializer {
  enum class Kind { kZeros, kConstant, kUniform, kNormal };

  Kind kind = Kind::kZeros;
  float value = 0;  // kConstant only; must be 0 otherwise
  float scale = 0;  // kUniform (half-width) and kNormal (stddev); >= 0
  uint64_t seed = 0;

  // kInvalidArgument naming the field ("init.scale: ...") when the fields do
  // not fit the kind.
  absl::Status Validate() const;

  // Writes the initial values of row `id` into `out` (element e = out[e]).
  // Requires Validate().ok(). Thread-safe, never blocks.
  void Fill(uint64_t id, absl::Span<float> out) const;
};

}  // namespace ps

#endif  // SERVER_SPARSE_ROW_INITIALIZER_H_
