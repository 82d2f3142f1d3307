#include "worker/data/dataset.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <limits>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "worker/data/idx.h"
#include "worker/data/internal/rng.h"

namespace ps {
namespace {

constexpr size_t kImageClasses = 10;
constexpr size_t kSyntheticDim = 784;
constexpr size_t kSyntheticClasses = 10;
// Centroid entries ~ N(0, kCentroidScale^2) against unit noise: two centroids
// lie ~sqrt(2 * 784) * 0.2 = 7.9 noise sigmas apart, so the best linear rule
// errs on well under 0.1% of examples, and a hundred SGD steps fit it.
constexpr double kCentroidScale = 0.2;

struct ImageSet {
  const char* name;
  float mean;
  float stddev;
};
constexpr ImageSet kImageSets[] = {
    {"fashion-mnist", 0.2860f, 0.3530f},
    {"mnist", 0.1307f, 0.3081f},
};

absl::Status CheckLabels(const std::vector<int32_t>& labels,
                         size_t num_classes) {
  for (size_t i = 0; i < labels.size(); ++i) {
    if (labels[i] < 0 || static_cast<size_t>(labels[i]) >= num_classes) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "labels[%d] = %d is outside [0, %d)", i, labels[i], num_classes));
    }
  }
  return absl::OkStatus();
}

bool FileExists(const std::string& path) {
  std::ifstream f(path);
  return f.good();
}

// `name` as-is, else name + ".gz", in `dir`.
absl::StatusOr<std::string> FindIdxFile(const std::string& dir,
                                        const std::string& name) {
  const std::string base = dir.empty() ? name : absl::StrCat(dir, "/", name);
  for (const std::string& path : {base, absl::StrCat(base, ".gz")}) {
    if (FileExists(path)) return path;
  }
  return absl::NotFoundError(absl::StrCat("no ", base, " or ", base,
                                          ".gz (set data.data_dir or the "
                                          "worker's data dir)"));
}

}  // namespace

absl::StatusOr<Dataset> Dataset::FromPixels(std::vector<uint8_t> pixels,
                                            std::vector<int32_t> labels,
                                            size_t dim, size_t num_classes,
                                            float mean, float stddev) {
  if (dim == 0 || pixels.size() != labels.size() * dim) {
    return absl::InvalidArgumentError(
        absl::StrFormat("pixels: %d values for %d examples of dim %d",
                        pixels.size(), labels.size(), dim));
  }
  if (!(stddev > 0.0f)) {
    return absl::InvalidArgumentError(
        absl::StrCat("stddev: must be > 0, got ", stddev));
  }
  PS_RETURN_IF_ERROR(CheckLabels(labels, num_classes));
  Dataset d;
  d.dim_ = dim;
  d.num_classes_ = num_classes;
  d.labels_ = std::move(labels);
  d.pixels_ = std::move(pixels);
  for (int p = 0; p < 256; ++p) {
    d.lut_[p] = (static_cast<float>(p) / 255.0f - mean) / stddev;
  }
  return d;
}

absl::StatusOr<Dataset> Dataset::FromFeatures(std::vector<float> features,
                                              std::vector<int32_t> labels,
                                              size_t dim, size_t num_classes) {
  if (dim == 0 || features.size() != labels.size() * dim) {
    return absl::InvalidArgumentError(
        absl::StrFormat("features: %d values for %d examples of dim %d",
                        features.size(), labels.size(), dim));
  }
  PS_RETURN_IF_ERROR(CheckLabels(labels, num_classes));
  Dataset d;
  d.dim_ = dim;
  d.num_classes_ = num_classes;
  d.labels_ = std::move(labels);
  d.features_ = std::move(features);
  return d;
}

void Dataset::CopyExample(size_t i, float* x) const {
  if (!features_.empty()) {
    std::memcpy(x, features_.data() + i * dim_, dim_ * sizeof(float));
    return;
  }
  const uint8_t* p = pixels_.data() + i * dim_;
  for (size_t j = 0; j < dim_; ++j) x[j] = lut_[p[j]];
}

void Dataset::Gather(absl::Span<const uint32_t> indices, float* x,
                     int32_t* labels) const {
  for (size_t k = 0; k < indices.size(); ++k) {
    CopyExample(indices[k], x + k * dim_);
    labels[k] = labels_[indices[k]];
  }
}

void Dataset::CopyRange(size_t begin, size_t n, float* x,
                        int32_t* labels) const {
  if (!features_.empty()) {
    std::memcpy(x, features_.data() + begin * dim_, n * dim_ * sizeof(float));
  } else {
    const uint8_t* p = pixels_.data() + begin * dim_;
    for (size_t j = 0; j < n * dim_; ++j) x[j] = lut_[p[j]];
  }
  std::memcpy(labels, labels_.data() + begin, n * sizeof(int32_t));
}

void Dataset::Truncate(size_t n) {
  if (n >= size()) return;
  labels_.resize(n);
  labels_.shrink_to_fit();
  if (!features_.empty()) {
    features_.resize(n * dim_);
    features_.shrink_to_fit();
  } else {
    pixels_.resize(n * dim_);
    pixels_.shrink_to_fit();
  }
}

absl::StatusOr<Dataset> LoadIdxDataset(const std::string& images_path,
                                       const std::string& labels_path,
                                       float mean, float stddev) {
  PS_ASSIGN_OR_RETURN(IdxImages images, ReadIdxImages(images_path));
  PS_ASSIGN_OR_RETURN(std::vector<uint8_t> raw_labels,
                      ReadIdxLabels(labels_path));
  if (images.count != raw_labels.size()) {
    return absl::DataLossError(
        absl::StrFormat("%s has %d images but %s has %d labels", images_path,
                        images.count, labels_path, raw_labels.size()));
  }
  std::vector<int32_t> labels(raw_labels.begin(), raw_labels.end());
  for (size_t i = 0; i < labels.size(); ++i) {
    if (static_cast<size_t>(labels[i]) >= kImageClasses) {
      return absl::DataLossError(
          absl::StrFormat("%s: label %d of example %d is not in [0, %d)",
                          labels_path, labels[i], i, kImageClasses));
    }
  }
  absl::StatusOr<Dataset> d = Dataset::FromPixels(
      std::move(images.pixels), std::move(labels), images.rows * images.cols,
      kImageClasses, mean, stddev);
  if (!d.ok()) {
    return absl::Status(d.status().code(),
                        absl::StrCat(images_path, ": ", d.status().message()));
  }
  return d;
}

TrainTestData MakeSyntheticData(size_t num_train, size_t num_test,
                                uint64_t seed) {
  Rng centroid_rng(MixSeed({seed, 0x5717}));
  std::vector<float> centroids(kSyntheticClasses * kSyntheticDim);
  for (float& c : centroids) {
    c = static_cast<float>(kCentroidScale * centroid_rng.Normal());
  }
  auto make = [&](size_t n, uint64_t stream) {
    Rng rng(MixSeed({seed, 0x5717, stream}));
    std::vector<float> x(n * kSyntheticDim);
    std::vector<int32_t> y(n);
    for (size_t i = 0; i < n; ++i) {
      y[i] = static_cast<int32_t>(rng.UniformInt(kSyntheticClasses));
      const float* c = centroids.data() + y[i] * kSyntheticDim;
      float* xi = x.data() + i * kSyntheticDim;
      for (size_t j = 0; j < kSyntheticDim; ++j) {
        xi[j] = c[j] + static_cast<float>(rng.Normal());
      }
    }
    // Labels are in range and sizes agree by construction.
    return std::make_shared<const Dataset>(*Dataset::FromFeatures(
        std::move(x), std::move(y), kSyntheticDim, kSyntheticClasses));
  };
  TrainTestData data;
  data.train = make(num_train, 1);
  data.test = make(num_test, 2);
  return data;
}

absl::StatusOr<TrainTestData> LoadDataset(const DataSpec& spec,
                                          const std::string& data_dir,
                                          uint64_t seed) {
  const size_t max_train = spec.max_train_examples() > 0
                               ? spec.max_train_examples()
                               : std::numeric_limits<size_t>::max();
  if (spec.dataset() == "synthetic") {
    if (spec.synthetic_train() == 0) {
      return absl::InvalidArgumentError(
          "data.synthetic_train: must be > 0 for the synthetic dataset");
    }
    if (spec.synthetic_test() == 0) {
      return absl::InvalidArgumentError(
          "data.synthetic_test: must be > 0 for the synthetic dataset");
    }
    // Examples come from one stream in order, so generating fewer is the
    // same as truncating.
    return MakeSyntheticData(
        std::min<size_t>(spec.synthetic_train(), max_train),
        spec.synthetic_test(), seed);
  }
  const ImageSet* set = nullptr;
  std::vector<std::string> names;
  for (const ImageSet& s : kImageSets) {
    names.push_back(s.name);
    if (spec.dataset() == s.name) set = &s;
  }
  if (set == nullptr) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "data.dataset: unknown dataset '%s' (want %s or synthetic)",
        spec.dataset(), absl::StrJoin(names, ", ")));
  }
  const std::string dir = spec.data_dir().empty() ? data_dir : spec.data_dir();
  constexpr const char* kFiles[4] = {
      "train-images-idx3-ubyte", "train-labels-idx1-ubyte",
      "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"};
  std::string paths[4];
  for (int i = 0; i < 4; ++i) {
    PS_ASSIGN_OR_RETURN(paths[i], FindIdxFile(dir, kFiles[i]));
  }
  PS_ASSIGN_OR_RETURN(Dataset train, LoadIdxDataset(paths[0], paths[1],
                                                    set->mean, set->stddev));
  PS_ASSIGN_OR_RETURN(
      Dataset test, LoadIdxDataset(paths[2], paths[3], set->mean, set->stddev));
  train.Truncate(max_train);
  TrainTestData data;
  data.train = std::make_shared<const Dataset>(std::move(train));
  data.test = std::make_shared<const Dataset>(std::move(test));
  return data;
}

}  // namespace ps
