// KeyedPermutation: a bijection of [0, n) chosen by a key, with O(1) memory
// and O(1) expected time each way: a 4-round balanced Feistel network on the
// smallest even bit width holding n - 1 (round function: keyed multiplicative
// hashing, a scrambler, not a cipher), restricted to [0, n) by cycle
// walking (at most 4 network passes on average, as the width is < 4n).
//
//   KeyedPermutation perm(/*n=*/10000000, /*key=*/MixSeed({seed, field}));
//   uint64_t v = perm.Forward(rank - 1);  // in [0, n)
//   assert(perm.Inverse(v) == rank - 1);
#ifndef WORKER_DATA_INTERNAL_PERMUTATION_H_
#define WORKER_DATA_INTERNAL_PERMUTATION_H_

#include <cstdint>

#include "worker/data/internal/rng.h"

namespace ps {

// Immutable after construction; thread-safe.
class KeyedPermutation {
 public:
  // 1 <= n <= 2^62 (callers validate).
  KeyedPermutation(uint64_t n, uint64_t key) : n_(n) {
    int bits = 0;
    while (bits < 64 && (uint64_t{1} << bits) < n) ++bits;
    half_bits_ = bits <= 2 ? 1 : (bits + 1) / 2;
    half_mask_ = (uint64_t{1} << half_bits_) - 1;
    uint64_t state = key;
    for (uint64_t& k : round_keys_) k = SplitMix64(&state);
  }

  uint64_t n() const { return n_; }

  // x < n.
  uint64_t Forward(uint64_t x) const {
    if (n_ == 1) return 0;
    do {
      x = Encrypt(x);
    } while (x >= n_);
    return x;
  }

  // y < n; Inverse(Forward(x)) == x.
  uint64_t Inverse(uint64_t y) const {
    if (n_ == 1) return 0;
    do {
      y = Decrypt(y);
    } while (y >= n_);
    return y;
  }

 private:
  static constexpr int kRounds = 4;

  // Multiplicative hashing: the top bits of a product depend on every bit
  // of the keyed input; one multiply keeps a round at a few cycles.
  uint64_t Round(int r, uint64_t half) const {
    return ((half ^ round_keys_[r]) * 0x9e3779b97f4a7c15ULL) >>
           (64 - half_bits_);
  }
  uint64_t Encrypt(uint64_t x) const {
    uint64_t left = x >> half_bits_;
    uint64_t right = x & half_mask_;
    for (int r = 0; r < kRounds; ++r) {
      const uint64_t next = left ^ Round(r, right);
      left = right;
      right = next;
    }
    return (left << half_bits_) | right;
  }
  uint64_t Decrypt(uint64_t y) const {
    uint64_t left = y >> half_bits_;
    uint64_t right = y & half_mask_;
    for (int r = kRounds - 1; r >= 0; --r) {
      const uint64_t prev = right ^ Round(r, left);
      right = left;
      left = prev;
    }
    return (left << half_bits_) | right;
  }

  uint64_t n_;
  int half_bits_ = 1;
  uint64_t half_mask_ = 1;
  uint64_t round_keys_[kRounds] = {};
};

}  // namespace ps

#endif  // WORKER_DATA_INTERNAL_PERMUTATION_H_
