// ZipfSampler: O(1) expected-time draws from the Zipf distribution on
// {1, ..., n}, P(k) proportional to k^-s, by rejection-inversion (W. Hormann
// and G. Derflinger, "Rejection-inversion to generate variates from monotone
// discrete distributions", ACM TOMACS 6(3), 1996), the method of Apache
// Commons RNG's RejectionInversionZipfSampler. No table: memory and set-up
// are O(1) for any n, so a field of 10M values costs what one of 10 costs.
//
//   ZipfSampler zipf(/*n=*/10000000, /*exponent=*/1.1);
//   uint64_t rank = zipf.Sample(&rng);  // 1 is the most frequent
//
// The generator is the caller's: any type with `double Uniform()` in
// [0, 1) (worker/data/internal/rng.h's Rng; a std engine behind an adapter),
// so the worker's data generators and the server's benchmarks draw the
// same distribution by the same code.
//
// Each draw takes one uniform and accepts with probability > 0.9 for the
// exponents used here; a rejection costs another uniform.
#ifndef CORE_ZIPF_H_
#define CORE_ZIPF_H_

#include <cmath>
#include <cstdint>

namespace ps {

// Immutable after construction; Sample is const and thread-safe (the
// generator is the caller's).
class ZipfSampler {
 public:
  // n >= 1, exponent > 0 and finite (callers validate).
  ZipfSampler(uint64_t n, double exponent)
      : n_(n),
        exponent_(exponent),
        h_integral_x1_(HIntegral(1.5) - 1.0),
        h_integral_n_(HIntegral(static_cast<double>(n) + 0.5)),
        s_(2.0 - HIntegralInverse(HIntegral(2.5) - H(2.0))) {}

  uint64_t n() const { return n_; }
  double exponent() const { return exponent_; }

  // A rank in [1, n]; draws from `gen->Uniform()`.
  template <typename Generator>
  uint64_t Sample(Generator* gen) const {
    for (;;) {
      const double u =
          h_integral_n_ + gen->Uniform() * (h_integral_x1_ - h_integral_n_);
      const double x = HIntegralInverse(u);
      double k = std::floor(x + 0.5);
      if (k < 1.0) k = 1.0;
      if (k > static_cast<double>(n_)) k = static_cast<double>(n_);
      if (k - x <= s_ || u >= HIntegral(k + 0.5) - H(k)) {
        return static_cast<uint64_t>(k);
      }
    }
  }

 private:
  // H(x) = integral of h(t) = t^-s from 1 to x: (x^(1-s) - 1) / (1 - s),
  // written so it stays accurate as s -> 1.
  double HIntegral(double x) const {
    const double log_x = std::log(x);
    return Helper2((1.0 - exponent_) * log_x) * log_x;
  }
  double H(double x) const { return std::exp(-exponent_ * std::log(x)); }
  double HIntegralInverse(double x) const {
    double t = x * (1.0 - exponent_);
    if (t < -1.0) t = -1.0;  // rounding; the exact value is > -1
    return std::exp(Helper1(t) * x);
  }
  // log1p(x) / x, and its limit 1 at 0.
  static double Helper1(double x) {
    if (std::fabs(x) > 1e-8) return std::log1p(x) / x;
    return 1.0 - x * (0.5 - x * (1.0 / 3.0 - 0.25 * x));
  }
  // expm1(x) / x, and its limit 1 at 0.
  static double Helper2(double x) {
    if (std::fabs(x) > 1e-8) return std::expm1(x) / x;
    return 1.0 + x * 0.5 * (1.0 + x * (1.0 / 3.0) * (1.0 + 0.25 * x));
  }

  uint64_t n_;
  double exponent_;
  double h_integral_x1_;
  double h_integral_n_;
  double s_;
};

}  // namespace ps

#endif  // CORE_ZIPF_H_
