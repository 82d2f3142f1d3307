#include "core/init.h"

#include <cmath>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace ps {
namespace {

constexpr uint64_t kGamma = 0x9E3779B97F4A7C15ull;  // splitmix64's increment

// splitmix64's output function: a bijective 64-bit mixer.
inline uint64_t Mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Draw `counter` of the stream `seed`: counter-based, so any element can be
// generated independently of the others.
inline uint64_t Draw(uint64_t seed, uint64_t counter) {
  return Mix64(seed + (counter + 1) * kGamma);
}

// [0, 1) with 53 random bits.
inline double ToUnit(uint64_t bits) {
  return static_cast<double>(bits >> 11) * 0x1.0p-53;
}

// Attempts of the polar method per element before giving up (each fails
// with probability 1 - pi/4, so 64 failures happen with probability 1e-43).
constexpr uint64_t kPolarAttempts = 64;

// A standard normal for element e, from its own slice of the stream.
double StandardNormal(uint64_t seed, uint64_t e) {
  for (uint64_t a = 0; a < kPolarAttempts; ++a) {
    const uint64_t c = (e * kPolarAttempts + a) * 2;
    const double u = 2 * ToUnit(Draw(seed, c)) - 1;
    const double v = 2 * ToUnit(Draw(seed, c + 1)) - 1;
    const double s = u * u + v * v;
    if (s > 0 && s < 1) return u * std::sqrt(-2 * PortableLog(s) / s);
  }
  return 0;
}

uint64_t Fnv1a(absl::string_view s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

absl::Status Bad(absl::string_view field, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", why));
}

struct Fans {
  double in, out;
};

Fans FansOf(const TensorSpec& t) {
  if (t.shape_size() == 1) {
    return {static_cast<double>(t.shape(0)), static_cast<double>(t.shape(0))};
  }
  return {static_cast<double>(t.shape(0)), static_cast<double>(t.shape(1))};
}

}  // namespace

double PortableLog(double x) {
  int e = 0;
  double m = std::frexp(x, &e);  // exact: x = m * 2^e, m in [0.5, 1)
  if (m < 0.70710678118654752440) {
    m *= 2;  // exact
    --e;
  }
  // log(m) = 2 atanh(s) = 2 (s + s^3/3 + s^5/5 + ...), |s| <= 0.1716: 12 terms
  // take the series below double precision.
  const double s = (m - 1) / (m + 1);
  const double s2 = s * s;
  double sum = 1.0 / 25;
  for (int k = 11; k >= 0; --k) sum = 1.0 / (2 * k + 1) + s2 * sum;
  // ln 2 split so that e * kLn2Hi is exact for |e| < 2^11.
  constexpr double kLn2Hi = 6.93147180369123816490e-01;
  constexpr double kLn2Lo = 1.90821492927058770002e-10;
  return e * kLn2Hi + (e * kLn2Lo + 2 * s * sum);
}

uint64_t TensorSeed(uint64_t job_seed, absl::string_view tensor_name) {
  return Mix64(Mix64(job_seed + kGamma) ^ Fnv1a(tensor_name));
}

absl::Status ValidateInit(const TensorSpec& tensor) {
  const InitSpec& init = tensor.init();
  const std::string kind = InitKind_Name(init.kind());
  if (kind.empty()) {
    return Bad("init.kind",
               absl::StrCat("unknown kind ", static_cast<int>(init.kind())));
  }
  const bool uses_value = init.kind() == CONSTANT;
  const bool uses_scale = init.kind() == UNIFORM || init.kind() == NORMAL;
  if (!std::isfinite(init.value())) {
    return Bad("init.value",
               absl::StrFormat("must be finite, got %g", init.value()));
  }
  if (!uses_value && init.value() != 0) {
    return Bad("init.value",
               absl::StrCat(kind, " takes no value (only CONSTANT)"));
  }
  if (uses_scale) {
    if (!std::isfinite(init.scale()) || init.scale() < 0) {
      return Bad("init.scale",
                 absl::StrFormat("must be >= 0, got %g", init.scale()));
    }
  } else if (init.scale() != 0) {
    return Bad("init.scale",
               absl::StrCat(kind, " takes no scale (only UNIFORM and NORMAL)"));
  }
  if (init.kind() == GLOROT_UNIFORM || init.kind() == HE_NORMAL) {
    if (tensor.shape_size() < 1 || tensor.shape_size() > 2) {
      return Bad("shape", absl::StrCat(kind, " needs a 1-D or 2-D shape, got ",
                                       tensor.shape_size(), "-D"));
    }
    for (int i = 0; i < tensor.shape_size(); ++i) {
      if (tensor.shape(i) == 0) {
        return Bad(absl::StrCat("shape[", i, "]"), "must be > 0");
      }
    }
  }
  return absl::OkStatus();
}

absl::Status InitValues(uint64_t job_seed, const TensorSpec& tensor,
                        uint64_t offset, absl::Span<float> out) {
  if (absl::Status st = ValidateInit(tensor); !st.ok()) return st;
  const InitSpec& init = tensor.init();
  const uint64_t seed = TensorSeed(job_seed, tensor.name());
  const size_t n = out.size();
  switch (init.kind()) {
    case INIT_UNSPECIFIED:
    case ZEROS:
      for (size_t i = 0; i < n; ++i) out[i] = 0;
      break;
    case CONSTANT:
      for (size_t i = 0; i < n; ++i) out[i] = init.value();
      break;
    case UNIFORM:
    case GLOROT_UNIFORM: {
      double a = init.scale();
      if (init.kind() == GLOROT_UNIFORM) {
        const Fans f = FansOf(tensor);
        a = std::sqrt(6.0 / (f.in + f.out));
      }
      for (size_t i = 0; i < n; ++i) {
        const double u = ToUnit(Draw(seed, offset + i));
        out[i] = static_cast<float>(a * (2 * u - 1));
      }
      break;
    }
    case NORMAL:
    case HE_NORMAL: {
      double sigma = init.scale();
      if (init.kind() == HE_NORMAL) sigma = std::sqrt(2.0 / FansOf(tensor).in);
      for (size_t i = 0; i < n; ++i) {
        out[i] = static_cast<float>(sigma * StandardNormal(seed, offset + i));
      }
      break;
    }
    default:
      return Bad("init.kind",
                 absl::StrCat("unknown kind ", static_cast<int>(init.kind())));
  }
  return absl::OkStatus();
}

}  // namespace ps
