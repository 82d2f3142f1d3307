// A small deterministic random generator (xoshiro256**, seeded through
// SplitMix64) whose output depends only on the seed: the same on every
// platform and standard library, unlike std::*_distribution. Shuffles, the
// synthetic data set and test fixtures draw from it so a job seed fixes a run.
//
//   Rng rng(MixSeed(job_seed, epoch, rank));
//   uint64_t j = rng.UniformInt(n);  // in [0, n)
//   double z = rng.Normal();         // N(0, 1)
#ifndef WORKER_DATA_INTERNAL_RNG_H_
#define WORKER_DATA_INTERNAL_RNG_H_

#include <cmath>
#include <cstdint>
#include <initializer_list>

namespace ps {

inline uint64_t SplitMix64(uint64_t* state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// Folds several values into one seed; different tuples give unrelated seeds.
inline uint64_t MixSeed(std::initializer_list<uint64_t> parts) {
  uint64_t state = 0x5eed5eed5eed5eedULL;
  uint64_t out = 0;
  for (uint64_t p : parts) {
    state ^= p;
    out = SplitMix64(&state);
    state = out;
  }
  return out;
}

// Not thread-safe: one generator per thread or per task.
class Rng {
 public:
  explicit Rng(uint64_t seed) {
    uint64_t sm = seed;
    for (uint64_t& s : s_) s = SplitMix64(&sm);
  }

  uint64_t NextU64() {
    const uint64_t result = Rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = Rotl(s_[3], 45);
    return result;
  }

  // Uniform in [0, 1), 53 random bits.
  double Uniform() { return static_cast<double>(NextU64() >> 11) * 0x1.0p-53; }

  // Uniform in [0, n) without modulo bias (Lemire's method); n > 0.
  uint64_t UniformInt(uint64_t n) {
    unsigned __int128 m = static_cast<unsigned __int128>(NextU64()) * n;
    uint64_t low = static_cast<uint64_t>(m);
    if (low < n) {
      const uint64_t threshold = -n % n;
      while (low < threshold) {
        m = static_cast<unsigned __int128>(NextU64()) * n;
        low = static_cast<uint64_t>(m);
      }
    }
    return static_cast<uint64_t>(m >> 64);
  }

  // Standard normal (Box-Muller; the second value of each pair is kept).
  double Normal() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    double u1;
    do {
      u1 = Uniform();
    } while (u1 <= 0.0);
    const double u2 = Uniform();
    const double r = std::sqrt(-2.0 * std::log(u1));
    const double theta = 6.283185307179586476925 * u2;
    spare_ = r * std::sin(theta);
    has_spare_ = true;
    return r * std::cos(theta);
  }

 private:
  static uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

  uint64_t s_[4];
  double spare_ = 0.0;
  bool has_spare_ = false;
};

// Fisher-Yates shuffle of [first, first + n) driven by `rng`.
template <typename T>
void Shuffle(T* first, uint64_t n, Rng* rng) {
  for (uint64_t i = n; i > 1; --i) {
    const uint64_t j = rng->UniformInt(i);
    T tmp = first[i - 1];
    first[i - 1] = first[j];
    first[j] = tmp;
  }
}

}  // namespace ps

#endif  // WORKER_DATA_INTERNAL_RNG_H_
