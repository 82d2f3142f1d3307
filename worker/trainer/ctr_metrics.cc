#include "worker/trainer/ctr_metrics.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "absl/strings/str_format.h"

namespace ps {
namespace {

// Mann-Whitney AUC of two score sets (sorted here, so taken by value).
absl::StatusOr<double> AucOfClasses(std::vector<double> pos,
                                    std::vector<double> neg) {
  if (pos.empty() || neg.empty()) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "AUC is undefined with %d positives and %d negatives: both classes "
        "are needed",
        pos.size(), neg.size()));
  }
  std::sort(pos.begin(), pos.end());
  std::sort(neg.begin(), neg.end());
  // twice_correct = 2 * #(neg < pos) + #(neg == pos) over all pairs.
  unsigned __int128 twice_correct = 0;
  size_t below = 0;      // negatives < current positive score
  size_t not_above = 0;  // negatives <= current positive score
  for (double s : pos) {
    while (below < neg.size() && neg[below] < s) ++below;
    if (not_above < below) not_above = below;
    while (not_above < neg.size() && neg[not_above] <= s) ++not_above;
    twice_correct += 2 * below + (not_above - below);
  }
  const long double pairs = static_cast<long double>(pos.size()) *
                            static_cast<long double>(neg.size());
  return static_cast<double>(static_cast<long double>(twice_correct) /
                             (2.0L * pairs));
}

}  // namespace

absl::StatusOr<CtrMetricsAccumulator> CtrMetricsAccumulator::WithEpsilon(
    double epsilon) {
  if (!(epsilon > 0 && epsilon < 0.5)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "logloss epsilon %g: want a value in (0, 0.5)", epsilon));
  }
  CtrMetricsAccumulator acc;
  acc.epsilon_ = epsilon;
  return acc;
}

absl::Status CtrMetricsAccumulator::Add(double probability, float label) {
  if (!(probability >= 0.0 && probability <= 1.0)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("probability %g: want a value in [0, 1]", probability));
  }
  const double p = std::clamp(probability, epsilon_, 1.0 - epsilon_);
  if (label == 1.0f) {
    positives_.push_back(probability);
    loss_sum_ -= std::log(p);
  } else if (label == 0.0f) {
    negatives_.push_back(probability);
    loss_sum_ -= std::log1p(-p);
  } else {
    return absl::InvalidArgumentError(
        absl::StrFormat("label %g: want 0 or 1", label));
  }
  return absl::OkStatus();
}

void CtrMetricsAccumulator::Merge(const CtrMetricsAccumulator& other) {
  positives_.insert(positives_.end(), other.positives_.begin(),
                    other.positives_.end());
  negatives_.insert(negatives_.end(), other.negatives_.begin(),
                    other.negatives_.end());
  loss_sum_ += other.loss_sum_;
}

void CtrMetricsAccumulator::Clear() {
  positives_.clear();
  negatives_.clear();
  loss_sum_ = 0.0;
}

absl::StatusOr<double> CtrMetricsAccumulator::Auc() const {
  return AucOfClasses(positives_, negatives_);
}

absl::StatusOr<double> CtrMetricsAccumulator::LogLoss() const {
  if (examples() == 0) {
    return absl::FailedPreconditionError("logloss of no examples");
  }
  return loss_sum_ / static_cast<double>(examples());
}

CtrMetrics CtrMetricsAccumulator::Summary() const {
  constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
  CtrMetrics m;
  m.examples = examples();
  m.positives = positives();
  absl::StatusOr<double> auc = Auc();
  m.auc = auc.ok() ? *auc : kNaN;
  absl::StatusOr<double> loss = LogLoss();
  m.logloss = loss.ok() ? *loss : kNaN;
  return m;
}

absl::StatusOr<double> ExactAuc(const std::vector<double>& scores,
                                const std::vector<float>& labels) {
  if (scores.size() != labels.size()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%d scores but %d labels", scores.size(), labels.size()));
  }
  std::vector<double> pos;
  std::vector<double> neg;
  for (size_t i = 0; i < scores.size(); ++i) {
    if (std::isnan(scores[i])) {
      return absl::InvalidArgumentError(
          absl::StrFormat("scores[%d] is NaN", i));
    }
    if (labels[i] == 1.0f) {
      pos.push_back(scores[i]);
    } else if (labels[i] == 0.0f) {
      neg.push_back(scores[i]);
    } else {
      return absl::InvalidArgumentError(
          absl::StrFormat("labels[%d] = %g: want 0 or 1", i, labels[i]));
    }
  }
  return AucOfClasses(std::move(pos), std::move(neg));
}

}  // namespace ps
