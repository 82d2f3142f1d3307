#include "server/sparse/row_initializer.h"

#include <cmath>

#include "absl/strings/str_format.h"
#include "core/init.h"
#include "core/sparse_ids.h"

namespace ps {
namespace {

constexpr uint64_t kGamma = 0x9E3779B97F4A7C15ull;  // splitmix64's increment

// Attempts of the polar method per element (each fails with probability
// 1 - pi/4, so 64 failures happen with probability 1e-43).
constexpr uint64_t kPolarAttempts = 64;

inline double ToUnit(uint64_t bits) {
  return static_cast<double>(bits >> 11) * 0x1.0p-53;
}

inline uint64_t Draw(uint64_t stream, uint64_t counter) {
  return MixId64(stream + (counter + 1) * kGamma);
}

double StandardNormal(uint64_t stream, uint64_t e) {
  for (uint64_t a = 0; a < kPolarAttempts; ++a) {
    const uint64_t c = (e * kPolarAttempts + a) * 2;
    const double u = 2 * ToUnit(Draw(stream, c)) - 1;
    const double v = 2 * ToUnit(Draw(stream, c + 1)) - 1;
    const double s = u * u + v * v;
    if (s > 0 && s < 1) return u * std::sqrt(-2 * PortableLog(s) / s);
  }
  return 0;
}

}  // namespace

absl::Status RowInitializer::Validate() const {
  if (kind != Kind::kZeros && kind != Kind::kConstant &&
      kind != Kind::kUniform && kind != Kind::kNormal) {
    return absl::InvalidArgumentError(
        absl::StrFormat("init.kind: unknown kind %d", static_cast<int>(kind)));
  }
  if (!std::isfinite(value)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("init.value: must be finite, got %g", value));
  }
  if (kind != Kind::kConstant && value != 0) {
    return absl::InvalidArgumentError(
        "init.value: only the constant kind takes a value");
  }
  if (!std::isfinite(scale) || scale < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("init.scale: must be finite and >= 0, got %g", scale));
  }
  if (kind != Kind::kUniform && kind != Kind::kNormal && scale != 0) {
    return absl::InvalidArgumentError(
        "init.scale: only the uniform and normal kinds take a scale");
  }
  return absl::OkStatus();
}

void RowInitializer::Fill(uint64_t id, absl::Span<float> out) const {
  const uint64_t stream = MixId64(seed + (id + 1) * kGamma);
  const size_t n = out.size();
  switch (kind) {
    case Kind::kConstant:
      for (size_t e = 0; e < n; ++e) out[e] = value;
      return;
    case Kind::kUniform:
      for (size_t e = 0; e < n; ++e) {
        const double u = ToUnit(Draw(stream, e));
        out[e] = static_cast<float>(scale * (2 * u - 1));
      }
      return;
    case Kind::kNormal:
      for (size_t e = 0; e < n; ++e) {
        out[e] = static_cast<float>(scale * StandardNormal(stream, e));
      }
      return;
    case Kind::kZeros:
      break;
  }
  for (size_t e = 0; e < n; ++e) out[e] = 0;
}

}  // namespace ps
