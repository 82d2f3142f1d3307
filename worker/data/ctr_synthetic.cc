#include "worker/data/ctr_synthetic.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "worker/data/internal/rng.h"

namespace ps {
namespace {

// Stream tags: the examples, the calibration examples and the teacher's
// parameters draw from unrelated seeds.
constexpr uint64_t kExampleStream = 0xe8a3;
constexpr uint64_t kCalibrationStream = 0xca11b;
constexpr uint64_t kParamStream = 0x9a7a;

constexpr uint64_t kMaxCardinality = uint64_t{1} << 32;
constexpr int kMaxInteractionDim = 16;
constexpr int kMaxPairs =
    kCtrCategoricalFields * (kCtrCategoricalFields - 1) / 2;
constexpr uint64_t kMinCalibration = 1000;
constexpr uint64_t kMaxCalibration = uint64_t{1} << 24;
constexpr double kMaxZipfExponent = 10.0;
// The bias is searched in [-kBiasRange, kBiasRange] by bisection.
constexpr double kBiasRange = 60.0;
constexpr int kBisectionSteps = 80;
constexpr double kSqrt3 = 1.7320508075688772;

// Dense feature parameter ranges (documented in the header).
constexpr double kMaxDenseMissing = 0.4;
constexpr double kMaxDenseMu = 3.0;
constexpr double kMinDenseSigma = 0.5;
constexpr double kDenseSigmaSpan = 1.0;
constexpr double kMinFieldScale = 0.5;
constexpr double kFieldScaleSpan = 1.0;

uint64_t Hash(uint64_t key, uint64_t x) {
  uint64_t state = key ^ (x * 0xd1b54a32d192ed03ULL);
  return SplitMix64(&state);
}

// Approximately N(0, 1) from 64 hashed bits: four 16-bit uniforms summed
// (Irwin-Hall, variance 1/3) and rescaled.
double HashNormal(uint64_t h) {
  double sum = 0.0;
  for (int i = 0; i < 4; ++i) {
    sum += static_cast<double>((h >> (16 * i)) & 0xffff) * 0x1.0p-16;
  }
  return (sum - 2.0) * kSqrt3;
}

double Sigmoid(double x) {
  if (x >= 0) return 1.0 / (1.0 + std::exp(-x));
  const double e = std::exp(x);
  return e / (1.0 + e);
}

absl::Status OutOfRange(const std::string& field, double value,
                        const std::string& want) {
  return absl::InvalidArgumentError(
      absl::StrFormat("%s = %g: want %s", field, value, want));
}

absl::Status Validate(const CtrSyntheticConfig& c) {
  for (int f = 0; f < kCtrCategoricalFields; ++f) {
    if (c.cardinalities[f] < 1 || c.cardinalities[f] >= kMaxCardinality) {
      return absl::InvalidArgumentError(
          absl::StrFormat("cardinalities[%d] = %d: want 1 <= value < 2^32", f,
                          c.cardinalities[f]));
    }
  }
  if (!(c.zipf_exponent > 0 && c.zipf_exponent <= kMaxZipfExponent)) {
    return OutOfRange("zipf_exponent", c.zipf_exponent, "a value in (0, 10]");
  }
  if (!(c.weight_stddev >= 0 && std::isfinite(c.weight_stddev))) {
    return OutOfRange("weight_stddev", c.weight_stddev, "finite and >= 0");
  }
  if (!(c.rank_scale > 0 && std::isfinite(c.rank_scale))) {
    return OutOfRange("rank_scale", c.rank_scale, "finite and > 0");
  }
  if (!(c.dense_weight_stddev >= 0 && std::isfinite(c.dense_weight_stddev))) {
    return OutOfRange("dense_weight_stddev", c.dense_weight_stddev,
                      "finite and >= 0");
  }
  if (c.interaction_pairs < 0 || c.interaction_pairs > kMaxPairs) {
    return OutOfRange("interaction_pairs", c.interaction_pairs,
                      "a value in [0, 325]");
  }
  if (c.interaction_dim < 1 || c.interaction_dim > kMaxInteractionDim) {
    return OutOfRange("interaction_dim", c.interaction_dim,
                      "a value in [1, 16]");
  }
  if (!(c.interaction_stddev >= 0 && std::isfinite(c.interaction_stddev))) {
    return OutOfRange("interaction_stddev", c.interaction_stddev,
                      "finite and >= 0");
  }
  if (!(c.positive_rate > 0 && c.positive_rate < 1)) {
    return OutOfRange("positive_rate", c.positive_rate, "a value in (0, 1)");
  }
  if (c.calibration_examples < kMinCalibration ||
      c.calibration_examples > kMaxCalibration) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "calibration_examples = %d: want a value in [%d, %d]",
        c.calibration_examples, kMinCalibration, kMaxCalibration));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<CtrSyntheticGenerator> CtrSyntheticGenerator::Create(
    const CtrSyntheticConfig& config) {
  if (absl::Status s = Validate(config); !s.ok()) return s;
  CtrSyntheticGenerator gen(config);
  gen.CalibrateBias();
  return gen;
}

CtrSyntheticGenerator::CtrSyntheticGenerator(const CtrSyntheticConfig& config)
    : config_(config) {
  Rng rng(MixSeed({config.seed, kParamStream}));
  for (int f = 0; f < kCtrCategoricalFields; ++f) {
    zipf_.emplace_back(config.cardinalities[f], config.zipf_exponent);
    permutation_.emplace_back(config.cardinalities[f], rng.NextU64());
    field_scale_[f] = kMinFieldScale + kFieldScaleSpan * rng.Uniform();
    weight_key_[f] = rng.NextU64();
    vector_key_[f] = rng.NextU64();
  }
  for (DenseParams& d : dense_) {
    d.missing = kMaxDenseMissing * rng.Uniform();
    d.mu = kMaxDenseMu * rng.Uniform();
    d.sigma = kMinDenseSigma + kDenseSigmaSpan * rng.Uniform();
    d.weight = config.dense_weight_stddev * rng.Normal();
  }
  std::vector<std::pair<int, int>> all;
  for (int a = 0; a < kCtrCategoricalFields; ++a) {
    for (int b = a + 1; b < kCtrCategoricalFields; ++b) all.emplace_back(a, b);
  }
  Shuffle(all.data(), all.size(), &rng);
  pairs_.assign(all.begin(), all.begin() + config.interaction_pairs);
  std::sort(pairs_.begin(), pairs_.end());
}

double CtrSyntheticGenerator::Features(uint64_t stream, uint64_t index,
                                       CtrExample* out, uint64_t* ranks) const {
  Rng rng(MixSeed({config_.seed, stream, index}));
  for (int f = 0; f < kCtrCategoricalFields; ++f) {
    ranks[f] = zipf_[f].Sample(&rng) - 1;
    out->ids[f] = CtrId(f, permutation_[f].Forward(ranks[f]));
  }
  for (int j = 0; j < kCtrDenseFeatures; ++j) {
    const DenseParams& d = dense_[j];
    if (rng.Uniform() < d.missing) {
      out->dense[j] = 0.0f;
      continue;
    }
    const double count = std::floor(std::exp(d.mu + d.sigma * rng.Normal()));
    out->dense[j] = static_cast<float>(std::log1p(count));
  }
  return rng.Uniform();
}

double CtrSyntheticGenerator::IdWeight(int field, uint64_t rank) const {
  const double shrink =
      1.0 / std::sqrt(1.0 + static_cast<double>(rank + 1) / config_.rank_scale);
  return config_.weight_stddev * field_scale_[field] * shrink *
         HashNormal(Hash(weight_key_[field], rank));
}

void CtrSyntheticGenerator::IdVector(int field, uint64_t rank,
                                     double* v) const {
  const double shrink =
      1.0 / std::sqrt(1.0 + static_cast<double>(rank + 1) / config_.rank_scale);
  uint64_t h = 0;
  for (int i = 0; i < config_.interaction_dim; ++i) {
    if (i % 4 == 0) h = Hash(vector_key_[field], rank * 4 + i / 4);
    const double u = static_cast<double>((h >> (16 * (i % 4))) & 0xffff) *
                     0x1.0p-16;  // [0, 1)
    v[i] = shrink * (2.0 * u - 1.0) * kSqrt3;
  }
}

double CtrSyntheticGenerator::LogitFromRanks(const uint64_t* ranks,
                                             const float* dense,
                                             const bool* known) const {
  double logit = 0.0;
  for (int f = 0; f < kCtrCategoricalFields; ++f) {
    if (known == nullptr || known[f]) logit += IdWeight(f, ranks[f]);
  }
  for (int j = 0; j < kCtrDenseFeatures; ++j) {
    logit += dense_[j].weight * dense[j];
  }
  const int k = config_.interaction_dim;
  const double scale = config_.interaction_stddev / std::sqrt(k);
  double va[kMaxInteractionDim];
  double vb[kMaxInteractionDim];
  for (const auto& [a, b] : pairs_) {
    if (known != nullptr && !(known[a] && known[b])) continue;
    IdVector(a, ranks[a], va);
    IdVector(b, ranks[b], vb);
    double dot = 0.0;
    for (int i = 0; i < k; ++i) dot += va[i] * vb[i];
    logit += scale * dot;
  }
  return logit;
}

void CtrSyntheticGenerator::CalibrateBias() {
  const uint64_t n = config_.calibration_examples;
  std::vector<double> logits(n);
  CtrExample e;
  uint64_t ranks[kCtrCategoricalFields];
  for (uint64_t i = 0; i < n; ++i) {
    Features(kCalibrationStream, i, &e, ranks);
    logits[i] = LogitFromRanks(ranks, e.dense, nullptr);
  }
  // mean(sigmoid(b + logit)) rises with b: bisect for positive_rate.
  double lo = -kBiasRange;
  double hi = kBiasRange;
  for (int step = 0; step < kBisectionSteps; ++step) {
    const double mid = 0.5 * (lo + hi);
    double sum = 0.0;
    for (double l : logits) sum += Sigmoid(mid + l);
    if (sum / static_cast<double>(n) < config_.positive_rate) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  bias_ = 0.5 * (lo + hi);
}

void CtrSyntheticGenerator::Generate(uint64_t index, CtrExample* out,
                                     double* teacher_prob) const {
  uint64_t ranks[kCtrCategoricalFields];
  const double u = Features(kExampleStream, index, out, ranks);
  const double p = Sigmoid(bias_ + LogitFromRanks(ranks, out->dense, nullptr));
  out->label = u < p ? 1.0f : 0.0f;
  if (teacher_prob != nullptr) *teacher_prob = p;
}

void CtrSyntheticGenerator::GenerateBatch(uint64_t begin, size_t n,
                                          CtrBatch* batch,
                                          double* teacher_probs) const {
  batch->Resize(n);
  CtrExample e;
  for (size_t b = 0; b < n; ++b) {
    Generate(begin + b, &e,
             teacher_probs != nullptr ? teacher_probs + b : nullptr);
    batch->Set(b, e);
  }
}

absl::StatusOr<double> CtrSyntheticGenerator::TeacherLogit(
    const CtrExample& e,
    const std::array<bool, kCtrCategoricalFields>* known) const {
  uint64_t ranks[kCtrCategoricalFields];
  for (int f = 0; f < kCtrCategoricalFields; ++f) {
    const uint64_t value = CtrIdValue(e.ids[f]);
    if (CtrIdField(e.ids[f]) != f || value >= config_.cardinalities[f]) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "ids[%d] = 0x%x: want field %d and a value below its cardinality "
          "%d",
          f, e.ids[f], f, config_.cardinalities[f]));
    }
    ranks[f] = permutation_[f].Inverse(value);
  }
  return bias_ + LogitFromRanks(ranks, e.dense,
                                known != nullptr ? known->data() : nullptr);
}

}  // namespace ps
