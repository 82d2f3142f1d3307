// CtrMetricsAccumulator: exact AUC and logloss of predicted click
// probabilities, accumulated in parts that merge (an evaluation split over
// threads or workers gives the AUC of the whole set, not a mean of AUCs).
//
//   CtrMetricsAccumulator acc;
//   for (size_t i = 0; i < n; ++i) PS_RETURN_IF_ERROR(acc.Add(p[i], y[i]));
//   acc.Merge(other_thread_acc);
//   PS_ASSIGN_OR_RETURN(double auc, acc.Auc());
//   CtrMetrics m = acc.Summary();  // auc is NaN when undefined
//
// AUC is the Mann-Whitney statistic: the fraction of (positive, negative)
// pairs the score orders correctly, a tie counting one half; the same as
// ranking all scores with ties at their average rank. It is undefined when
// either class is empty: Auc() returns kFailedPrecondition and Summary() NaN.
// Counted in integers (2 x correct pairs + tied pairs), so it is exact and
// independent of the order of Add and Merge.
//
// Logloss is mean(-(y log p + (1 - y) log(1 - p))) with p clamped to
// [epsilon, 1 - epsilon] (the clamp bounds the loss of a confident mistake,
// as sklearn's log_loss does). Summed in double: merging in another order
// can change the last bits.
//
// Memory: 8 bytes per example (the scores are kept for the AUC).
#ifndef WORKER_TRAINER_CTR_METRICS_H_
#define WORKER_TRAINER_CTR_METRICS_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace ps {

// The default clamp of probabilities in logloss.
inline constexpr double kDefaultLoglossEpsilon = 1e-7;

struct CtrMetrics {
  uint64_t examples = 0;
  uint64_t positives = 0;
  double auc = 0.0;      // NaN when either class is empty
  double logloss = 0.0;  // NaN when there are no examples
  double positive_rate() const {
    return examples == 0 ? 0.0 : static_cast<double>(positives) / examples;
  }
};

// Thread-compatible: one thread per accumulator; merge the parts after.
class CtrMetricsAccumulator {
 public:
  // Clamps logloss probabilities with kDefaultLoglossEpsilon.
  CtrMetricsAccumulator() = default;

  // Clamps with `epsilon`; kInvalidArgument unless it is in (0, 0.5).
  static absl::StatusOr<CtrMetricsAccumulator> WithEpsilon(double epsilon);

  // Adds one prediction: `probability` in [0, 1] and `label` 0 or 1.
  // kInvalidArgument naming the value otherwise (NaN included); nothing is
  // added then.
  absl::Status Add(double probability, float label);

  // Adds every example of `other` (which is left as it was).
  void Merge(const CtrMetricsAccumulator& other);

  void Clear();

  uint64_t examples() const { return positives_.size() + negatives_.size(); }
  uint64_t positives() const { return positives_.size(); }

  // Exact AUC; kFailedPrecondition when there is no positive or no
  // negative. Sorts a copy of the scores: O(n log n).
  absl::StatusOr<double> Auc() const;

  // Mean clamped logloss; kFailedPrecondition when empty.
  absl::StatusOr<double> LogLoss() const;

  // Everything at once, with NaN for what is undefined.
  CtrMetrics Summary() const;

 private:
  double epsilon_ = kDefaultLoglossEpsilon;
  double loss_sum_ = 0.0;
  std::vector<double> positives_;  // scores of label-1 examples
  std::vector<double> negatives_;  // scores of label-0 examples
};

// AUC of scores[i] against labels[i] (0 or 1), without the accumulator's
// checks on the score range (any finite score ranks). kInvalidArgument for
// mismatched sizes, a NaN score or a label not 0/1; kFailedPrecondition when
// a class is empty.
absl::StatusOr<double> ExactAuc(const std::vector<double>& scores,
                                const std::vector<float>& labels);

}  // namespace ps

#endif  // WORKER_TRAINER_CTR_METRICS_H_
