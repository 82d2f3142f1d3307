// Dataset: an in-memory labelled set of dense float feature vectors, and
// LoadDataset, which builds the train and test sets a DataSpec names.
//
//   absl::StatusOr<TrainTestData> data =
//       LoadDataset(spec.data(), "/usr/share/datasets/fashion-mnist",
//       spec.seed());
//   if (!data.ok()) return data.status();
//   std::vector<float> x(data->train->dim());
//   data->train->CopyExample(0, x.data());
//
// Normalisation. Image sets keep their uint8 pixels (a quarter of the memory
// of floats) and convert when a batch is gathered: v = (p / 255 - mean) / std
// with FIXED per-dataset constants, the usual published ones (MNIST 0.1307 /
// 0.3081, Fashion-MNIST 0.2860 / 0.3530). Fixed rather than computed, so every
// worker and every max_train_examples sees the same transform and the numbers
// match the usual PyTorch baselines. The synthetic set is generated already
// roughly standardised.
#ifndef WORKER_DATA_DATASET_H_
#define WORKER_DATA_DATASET_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "proto/job.pb.h"

namespace ps {

// Immutable after construction; all methods are const and thread-safe.
class Dataset {
 public:
  // Examples stored as uint8 pixels (num x dim, row-major), converted on
  // read with (p / 255 - mean) / stddev. kInvalidArgument when the sizes
  // disagree, stddev <= 0 or a label is outside [0, num_classes).
  static absl::StatusOr<Dataset> FromPixels(std::vector<uint8_t> pixels,
                                            std::vector<int32_t> labels,
                                            size_t dim, size_t num_classes,
                                            float mean, float stddev);

  // Examples stored as floats (num x dim, row-major), read as they are.
  // Errors as FromPixels.
  static absl::StatusOr<Dataset> FromFeatures(std::vector<float> features,
                                              std::vector<int32_t> labels,
                                              size_t dim, size_t num_classes);

  size_t size() const { return labels_.size(); }
  size_t dim() const { return dim_; }
  size_t num_classes() const { return num_classes_; }
  int32_t label(size_t i) const { return labels_[i]; }

  // Writes example i's dim() features to x. i < size().
  void CopyExample(size_t i, float* x) const;

  // Writes examples indices[0..n) to x (n * dim() floats) and their labels
  // to `labels` (n ints). Every index < size().
  void Gather(absl::Span<const uint32_t> indices, float* x,
              int32_t* labels) const;

  // Writes examples [begin, begin + n) as Gather does. begin + n <= size().
  void CopyRange(size_t begin, size_t n, float* x, int32_t* labels) const;

  // Keeps only the first n examples (n >= size() keeps all).
  void Truncate(size_t n);

 private:
  Dataset() = default;

  size_t dim_ = 0;
  size_t num_classes_ = 0;
  std::vector<int32_t> labels_;
  // Exactly one of pixels_ / features_ holds the examples.
  std::vector<uint8_t> pixels_;
  std::vector<float> features_;
  float lut_[256] = {};  // pixel value -> normalised feature
};

// The train and test split of one data set. Shared and immutable, so a
// worker can hand the same sets to consecutive jobs and to its loader threads.
struct TrainTestData {
  std::shared_ptr<const Dataset> train;
  std::shared_ptr<const Dataset> test;
};

// Reads an IDX image file and label file (plain or gzipped) into a Dataset of
// 10 classes normalised with (mean, stddev). kDataLoss naming the file for a
// corrupt file or a label >= 10; naming both files when their counts differ.
absl::StatusOr<Dataset> LoadIdxDataset(const std::string& images_path,
                                       const std::string& labels_path,
                                       float mean, float stddev);

// The synthetic set: 784 features, 10 classes, each class a Gaussian blob
// N(centroid_c, I) around a random centroid with entries N(0, 0.2^2); the
// classes are linearly separable up to a small overlap (Bayes error well
// under 0.1%).
// Train and test share the centroids and draw distinct examples. Identical for
// identical (num_train, num_test, seed).
TrainTestData MakeSyntheticData(size_t num_train, size_t num_test,
                                uint64_t seed);

// Builds the sets `spec` names:
//  - "fashion-mnist" / "mnist": train-{images-idx3,labels-idx1}-ubyte and
//    t10k-*, each as-is or with ".gz", from spec.data_dir() when set, else
//    from `data_dir`;
//  - "synthetic": MakeSyntheticData(spec.synthetic_train(),
//    spec.synthetic_test(), seed).
// spec.max_train_examples() > 0 keeps only that many training examples.
// kInvalidArgument naming the field for an unknown dataset or empty synthetic
// sizes; kNotFound naming the paths tried for a missing file; file errors as
// LoadIdxDataset.
absl::StatusOr<TrainTestData> LoadDataset(const DataSpec& spec,
                                          const std::string& data_dir,
                                          uint64_t seed);

}  // namespace ps

#endif  // WORKER_DATA_DATASET_H_
