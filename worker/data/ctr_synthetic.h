// CtrSyntheticGenerator: a deterministic, streaming, Criteo-like
// click-through-rate data set whose labels come from a planted teacher, so
// the best reachable AUC is known.
//
//   absl::StatusOr<CtrSyntheticGenerator> gen =
//       CtrSyntheticGenerator::Create(CtrSyntheticConfig{});
//   if (!gen.ok()) return gen.status();
//   CtrExample e;
//   double p;  // the teacher's P(label = 1 | features)
//   gen->Generate(kCtrTestBegin + i, &e, &p);
//
// Streaming: example i is a pure function of (config, i) through
// counter-based hashing; nothing is stored, any worker can generate any slice
// in any order, and a set larger than RAM is never materialised. A training
// set and a test set are disjoint index ranges; the convention is train =
// [0, T) and test = [kCtrTestBegin, kCtrTestBegin + E), so the test set does
// not change with T.
//
// Features (CtrExample's layout, worker/data/ctr_example.h):
//  - dense[j]: like Criteo's log-transformed counts: missing (0) with
//    probability m_j, else log(1 + floor(exp(mu_j + sigma_j * z))), z ~
//    N(0, 1), with (m_j, mu_j, sigma_j) drawn once from the seed in
//    m in [0, 0.4], mu in [0, 3], sigma in [0.5, 1.5].
//  - ids[f] = CtrId(f, v): a rank r ~ Zipf(cardinalities[f],
//    zipf_exponent), mapped to the value v = pi_f(r - 1) in
//    [0, cardinalities[f]) by a seeded permutation pi_f, so hot values are
//    scattered and not 0, 1, 2. No synthetic categorical is missing.
//
// The planted teacher (nothing stored; every parameter is a hash of the
// seed, the field and the rank):
//   logit  = bias + sum_f w_f(r_f) + sum_j u_j * dense[j]
//            + sum_{(a, b) in pairs} c * <e_a(r_a), e_b(r_b)> / sqrt(k)
//   w_f(r) = weight_stddev * g_f * s(r) * N,  g_f in [0.5, 1.5] per field
//   e_f(r) = s(r) * (k unit-variance uniforms)
//   s(r)   = (1 + r / rank_scale)^(-1/2)
//   u_j    = dense_weight_stddev * N,  c = interaction_stddev,
// with N approximately N(0, 1) and `pairs` interaction_pairs distinct field
// pairs drawn from the seed. s(r) makes rare values matter less, so most of
// the signal sits on values a model sees often in training. The bias is
// solved on calibration_examples examples (a stream of their own) so the
// mean teacher probability is positive_rate; label ~ Bernoulli(sigmoid(logit)).
//
// The default config (tools/datagen/ctr_datagen, 1M test examples from
// kCtrTestBegin): teacher AUC 0.8337, logloss 0.4152, 25.09% positives. With 4M
// training examples, 41% of test examples hold an id never seen in training,
// yet dropping those ids' terms leaves the teacher's AUC at 0.8337 (-0.00001);
// dropping every id seen fewer than 30 times (85% of test examples hold one)
// leaves 0.8333 (-0.0004): the signal is on ids a model can learn.
#ifndef WORKER_DATA_CTR_SYNTHETIC_H_
#define WORKER_DATA_CTR_SYNTHETIC_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "core/zipf.h"
#include "worker/data/ctr_example.h"
#include "worker/data/internal/permutation.h"

namespace ps {

// Where the conventional test range starts (far above any training range).
inline constexpr uint64_t kCtrTestBegin = uint64_t{1} << 48;

// The 26 categorical cardinalities of the Criteo Kaggle (Display Advertising
// Challenge) set as the DLRM benchmark counts them: 3 .. 10,131,227.
inline constexpr std::array<uint64_t, kCtrCategoricalFields>
    kCriteoKaggleCardinalities = {
        1460,  583,  10131227, 2202608, 305, 24,     12517,   633,   3,
        93145, 5683, 8351593,  3194,    27,  14992,  5461306, 10,    5652,
        2173,  4,    7046547,  18,      15,  286181, 105,     142572};

// Every field has a documented default; Create validates them all.
struct CtrSyntheticConfig {
  uint64_t seed = 1;
  // Values of field f are [0, cardinalities[f]); each in [1, 2^32).
  std::array<uint64_t, kCtrCategoricalFields> cardinalities =
      kCriteoKaggleCardinalities;
  // Zipf exponent of every field's value frequencies, in (0, 10].
  double zipf_exponent = 1.1;
  // Teacher: std of a most-frequent value's weight, >= 0.
  double weight_stddev = 0.3;
  // Teacher: ranks r >> rank_scale get weights shrunk by sqrt(rank_scale / r);
  // > 0.
  double rank_scale = 1000.0;
  // Teacher: std of each dense weight, >= 0.
  double dense_weight_stddev = 0.1;
  // Teacher: field pairs with an interaction term, in [0, 325].
  int interaction_pairs = 6;
  // Teacher: dimension k of the interaction vectors, in [1, 16].
  int interaction_dim = 4;
  // Teacher: scale c of each interaction term, >= 0.
  double interaction_stddev = 0.3;
  // Mean teacher probability the bias is solved for, in (0, 1).
  double positive_rate = 0.25;
  // Examples the bias is solved on, in [1000, 2^24].
  uint64_t calibration_examples = 1 << 16;
};

// Immutable after Create; every method is const and thread-safe.
class CtrSyntheticGenerator {
 public:
  // kInvalidArgument naming the field for a value outside its documented
  // range.
  static absl::StatusOr<CtrSyntheticGenerator> Create(
      const CtrSyntheticConfig& config);

  // Example `index` (any uint64), and when `teacher_prob` is not null the
  // teacher's P(label = 1) for it.
  void Generate(uint64_t index, CtrExample* out,
                double* teacher_prob = nullptr) const;

  // Examples [begin, begin + n) into `batch` (resized to n); the teacher's
  // probabilities into teacher_probs[0, n) when not null.
  void GenerateBatch(uint64_t begin, size_t n, CtrBatch* batch,
                     double* teacher_probs = nullptr) const;

  // The teacher's logit for any example whose ids keep this config's
  // cardinalities (what Generate returns does); terms of fields f with
  // known != null and !(*known)[f] are dropped (their prior mean, 0): the
  // logit of an oracle that knows nothing of those ids.
  // kInvalidArgument naming the field for an id of the wrong field or a
  // value >= its cardinality.
  absl::StatusOr<double> TeacherLogit(
      const CtrExample& e,
      const std::array<bool, kCtrCategoricalFields>* known = nullptr) const;

  const CtrSyntheticConfig& config() const { return config_; }
  double bias() const { return bias_; }
  const std::vector<std::pair<int, int>>& interaction_pairs() const {
    return pairs_;
  }

 private:
  struct DenseParams {
    double missing = 0.0;
    double mu = 0.0;
    double sigma = 1.0;
    double weight = 0.0;
  };

  explicit CtrSyntheticGenerator(const CtrSyntheticConfig& config);

  // Features of example `index` of `stream` into *out (label untouched) and
  // its zero-based ranks; returns the uniform its label is drawn with.
  double Features(uint64_t stream, uint64_t index, CtrExample* out,
                  uint64_t* ranks) const;
  // Logit without the bias from ranks and dense features; fields with
  // known != null and !known[f] contribute nothing.
  double LogitFromRanks(const uint64_t* ranks, const float* dense,
                        const bool* known) const;
  double IdWeight(int field, uint64_t rank) const;
  // Writes the interaction vector of (field, rank) to v[0, k).
  void IdVector(int field, uint64_t rank, double* v) const;
  void CalibrateBias();

  CtrSyntheticConfig config_;
  double bias_ = 0.0;
  std::vector<ZipfSampler> zipf_;              // per field
  std::vector<KeyedPermutation> permutation_;  // per field
  std::array<double, kCtrCategoricalFields> field_scale_{};
  std::array<uint64_t, kCtrCategoricalFields> weight_key_{};
  std::array<uint64_t, kCtrCategoricalFields> vector_key_{};
  std::array<DenseParams, kCtrDenseFeatures> dense_{};
  std::vector<std::pair<int, int>> pairs_;
};

}  // namespace ps

#endif  // WORKER_DATA_CTR_SYNTHETIC_H_
