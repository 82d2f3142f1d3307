#include "worker/trainer/ctr_data.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "worker/data/ctr_synthetic.h"
#include "worker/trainer/ctr_data_tsv.h"

namespace ps {
namespace {

// Example i of the training set is generator example i, i in
// [0, synthetic_train); rank r of W takes, in step t of an epoch, the
// batch_size examples from r * floor(N / W) + (t % steps_per_epoch) *
// batch_size, steps_per_epoch = floor(floor(N / W) / batch_size). The test
// set is examples [kCtrTestBegin, + synthetic_test), disjoint from it.
class CtrSyntheticSource : public CtrDataSource {
 public:
  CtrSyntheticSource(CtrSyntheticGenerator generator, uint64_t train_size,
                     uint64_t test_size, uint64_t batch_size, uint64_t begin,
                     uint64_t steps, bool test_set)
      : generator_(std::move(generator)),
        train_size_(train_size),
        test_size_(test_size),
        batch_size_(batch_size),
        begin_(begin),
        steps_per_epoch_(steps),
        test_set_(test_set) {}

  uint64_t steps_per_epoch() const override { return steps_per_epoch_; }

  absl::Status TrainBatch(uint64_t t, CtrBatch* batch) override {
    generator_.GenerateBatch(begin_ + (t % steps_per_epoch_) * batch_size_,
                             batch_size_, batch);
    return absl::OkStatus();
  }

  uint64_t train_examples() const override { return train_size_; }

  absl::Status ExamplesAt(absl::Span<const uint32_t> indices,
                          CtrBatch* batch) override {
    batch->Resize(indices.size());
    CtrExample e;
    for (size_t b = 0; b < indices.size(); ++b) {
      if (indices[b] >= train_size_) {
        return absl::InvalidArgumentError(
            absl::StrFormat("indices[%d]: %d is past the %d training examples",
                            b, indices[b], train_size_));
      }
      generator_.Generate(indices[b], &e);
      batch->Set(b, e);
    }
    return absl::OkStatus();
  }

  absl::Status ForEachTestBatch(size_t max_batch,
                                const TestBatchFn& fn) override {
    if (!test_set_) {
      return absl::FailedPreconditionError("this rank has no test set");
    }
    if (max_batch == 0) {
      return absl::InvalidArgumentError("max_batch: must be >= 1");
    }
    std::vector<double> teacher(max_batch);
    for (uint64_t begin = 0; begin < test_size_; begin += max_batch) {
      const size_t count = std::min<uint64_t>(max_batch, test_size_ - begin);
      generator_.GenerateBatch(kCtrTestBegin + begin, count, &batch_,
                               teacher.data());
      PS_RETURN_IF_ERROR(fn(batch_, teacher.data()));
    }
    return absl::OkStatus();
  }

 private:
  const CtrSyntheticGenerator generator_;
  const uint64_t train_size_;
  const uint64_t test_size_;
  const uint64_t batch_size_;
  const uint64_t begin_;  // this rank's first training example
  const uint64_t steps_per_epoch_;
  const bool test_set_;
  CtrBatch batch_;
};

// The generator's config: the job's seed, and the data section's
// cardinalities and exponent where set (the coordinator checked them; the
// generator checks their ranges again).
absl::StatusOr<CtrSyntheticConfig> SyntheticConfig(const JobSpec& job) {
  const DataSpec& d = job.data();
  CtrSyntheticConfig config;
  config.seed = job.seed();
  const int n = d.ctr_cardinalities_size();
  if (n != 0 && n != kCtrCategoricalFields) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "data.ctr_cardinalities: has %d values, want none or %d", n,
        kCtrCategoricalFields));
  }
  for (int f = 0; f < n; ++f) config.cardinalities[f] = d.ctr_cardinalities(f);
  if (d.ctr_zipf_exponent() != 0.0) {
    config.zipf_exponent = d.ctr_zipf_exponent();
  }
  return config;
}

absl::StatusOr<std::unique_ptr<CtrDataSource>> CreateSynthetic(
    const JobSpec& job, const CtrDataOptions& o) {
  const DataSpec& d = job.data();
  const uint64_t per_worker = d.synthetic_train() / o.num_workers;
  if (per_worker < d.batch_size()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "data.synthetic_train: %d examples over %d workers is less than one "
        "batch of %d each",
        d.synthetic_train(), o.num_workers, d.batch_size()));
  }
  if (d.synthetic_test() == 0) {
    return absl::InvalidArgumentError("data.synthetic_test: must be > 0");
  }
  PS_ASSIGN_OR_RETURN(CtrSyntheticConfig config, SyntheticConfig(job));
  absl::StatusOr<CtrSyntheticGenerator> generator =
      CtrSyntheticGenerator::Create(config);
  if (!generator.ok()) {  // only the two knobs above are the job's
    return absl::InvalidArgumentError(
        absl::StrCat("data.ctr_", generator.status().message()));
  }
  return std::make_unique<CtrSyntheticSource>(
      *std::move(generator), d.synthetic_train(), d.synthetic_test(),
      d.batch_size(), o.rank * per_worker, per_worker / d.batch_size(),
      o.test_set);
}

absl::StatusOr<std::unique_ptr<CtrDataSource>> CreateTsv(
    const JobSpec& job, const CtrDataOptions& o) {
  const DataSpec& d = job.data();
  if (d.train_file().empty()) {
    return absl::InvalidArgumentError("data.train_file: must be set");
  }
  if (d.test_file().empty()) {
    return absl::InvalidArgumentError("data.test_file: must be set");
  }
  CtrTsvSource::Options options;
  options.train_path = ResolveDataPath(d.data_dir(), d.train_file());
  options.test_path = ResolveDataPath(d.data_dir(), d.test_file());
  options.max_lines = d.max_train_examples();
  options.batch_size = d.batch_size();
  options.data = o;
  PS_ASSIGN_OR_RETURN(std::unique_ptr<CtrTsvSource> source,
                      CtrTsvSource::Create(options));
  return std::unique_ptr<CtrDataSource>(std::move(source));
}

}  // namespace

absl::Status CtrDataSource::ExamplesAt(absl::Span<const uint32_t>, CtrBatch*) {
  return absl::UnimplementedError(
      "this data set reads its examples in order only (an elastic data job "
      "needs ctr-synthetic)");
}

std::string ResolveDataPath(const std::string& dir, const std::string& file) {
  if (dir.empty() || (!file.empty() && file[0] == '/')) return file;
  if (dir.back() == '/') return absl::StrCat(dir, file);
  return absl::StrCat(dir, "/", file);
}

absl::StatusOr<std::unique_ptr<CtrDataSource>> CreateCtrDataSource(
    const JobSpec& job, const CtrDataOptions& options) {
  if (options.num_workers == 0 || options.rank >= options.num_workers) {
    return absl::InvalidArgumentError(
        absl::StrFormat("rank: %d is not below num_workers %d", options.rank,
                        options.num_workers));
  }
  if (job.data().batch_size() == 0) {
    return absl::InvalidArgumentError("data.batch_size: must be >= 1");
  }
  const std::string& dataset = job.data().dataset();
  if (dataset == kCtrSyntheticDatasetName) return CreateSynthetic(job, options);
  if (dataset == kCriteoTsvDatasetName) return CreateTsv(job, options);
  return absl::InvalidArgumentError(absl::StrCat(
      "data.dataset: a ctr model trains on \"", kCtrSyntheticDatasetName,
      "\" or \"", kCriteoTsvDatasetName, "\", not \"", dataset, "\""));
}

}  // namespace ps
