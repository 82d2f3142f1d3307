// Deterministic test data for the optimizer tests: splitmix64 -> uniform ->
// sum of 4 uniforms (a bell-shaped value with realistic magnitudes and no
// denormals).
//
//   TestRng rng(7);
//   float g = rng.Bell(0.1);
#ifndef SERVER_TESTING_TEST_RNG_H_
#define SERVER_TESTING_TEST_RNG_H_

#include <cstdint>

namespace ps {

class TestRng {
 public:
  explicit TestRng(uint64_t seed) : state_(seed) {}
  double Uniform() {  // [0, 1)
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return static_cast<double>(z >> 11) * 0x1.0p-53;
  }
  float Bell(double scale) {
    double s = 0;
    for (int i = 0; i < 4; ++i) s += Uniform() - 0.5;
    return static_cast<float>(s * scale);
  }

 private:
  uint64_t state_;
};

}  // namespace ps

#endif  // SERVER_TESTING_TEST_RNG_H_
