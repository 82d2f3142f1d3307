#include "server/coordinator/job_validation.h"

#include <cmath>
#include <filesystem>
#include <initializer_list>
#include <system_error>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/optimizer_spec.h"
#include "core/table_spec.h"
#include "server/coordinator/data_plan.h"

namespace ps {
namespace {

constexpr size_t kMaxNameLength = 128;

bool ValidNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
         (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.';
}

bool DefaultPathExists(const std::string& path) {
  std::error_code ec;  // an unreadable path counts as missing, never throws
  return std::filesystem::is_directory(path, ec);
}

bool DefaultFileExists(const std::string& path) {
  std::error_code ec;
  return std::filesystem::exists(path, ec) &&
         !std::filesystem::is_directory(path, ec);
}

std::string KnownDatasetList(const ValidationContext& ctx) {
  std::vector<std::string> names;
  for (const auto& [name, shape] : ctx.datasets) names.push_back(name);
  return absl::StrJoin(names, ", ");
}

// Collects problems with a common shape so every message reads the same way.
class Problems {
 public:
  void Add(absl::string_view field, absl::string_view reason) {
    list_.push_back(absl::StrCat(field, ": ", reason));
  }
  // A message that already reads "field: reason".
  void Add(absl::string_view problem) { list_.emplace_back(problem); }
  size_t size() const { return list_.size(); }
  std::vector<std::string> Take() { return std::move(list_); }

 private:
  std::vector<std::string> list_;
};

void CheckName(const JobSpec& spec, Problems& p) {
  const std::string& name = spec.name();
  if (name.empty()) {
    p.Add("name", "must be set");
    return;
  }
  if (name.size() > kMaxNameLength) {
    p.Add("name", absl::StrFormat("%d characters, at most %d allowed",
                                  name.size(), kMaxNameLength));
  }
  for (char c : name) {
    if (!ValidNameChar(c)) {
      // CHexEscape: a hostile name must not put control characters (terminal
      // escapes) into psctl's output.
      p.Add("name", absl::StrFormat("invalid character '%s' in \"%s\" (use "
                                    "letters, digits, '-', '_', '.')",
                                    absl::CHexEscape(std::string(1, c)),
                                    absl::CHexEscape(name)));
      break;
    }
  }
}

// Dimension checks shared by both model kinds. `prefix` is "model.softmax" or
// "model.mlp".
void CheckInputAndClasses(absl::string_view prefix, uint32_t input_dim,
                          uint32_t num_classes, const JobSpec& spec,
                          const ValidationContext& ctx, Problems& p) {
  auto dataset = ctx.datasets.find(spec.data().dataset());
  const DatasetShape* shape =
      dataset == ctx.datasets.end() ? nullptr : &dataset->second;
  if (input_dim == 0) {
    p.Add(absl::StrCat(prefix, ".input_dim"), "must be > 0");
  } else if (shape != nullptr && shape->input_dim != 0 &&
             shape->input_dim != input_dim) {
    p.Add(absl::StrCat(prefix, ".input_dim"),
          absl::StrFormat("%d does not match dataset %s (%d)", input_dim,
                          dataset->first, shape->input_dim));
  }
  if (num_classes < 2) {
    p.Add(absl::StrCat(prefix, ".num_classes"),
          absl::StrFormat("must be >= 2, got %d", num_classes));
  } else if (shape != nullptr && shape->num_classes != 0 &&
             shape->num_classes != num_classes) {
    p.Add(absl::StrCat(prefix, ".num_classes"),
          absl::StrFormat("%d does not match dataset %s (%d)", num_classes,
                          dataset->first, shape->num_classes));
  }
}

// A CNN reads the dataset's examples as height x width x channels images:
// their size must match the dataset's (fashion-mnist: 28 x 28 x 1), as must
// the classes. The layers themselves are ValidateModelSpec's.
void CheckCnnImages(const Cnn& cnn, const JobSpec& spec,
                    const ValidationContext& ctx, Problems& p) {
  auto dataset = ctx.datasets.find(spec.data().dataset());
  if (dataset == ctx.datasets.end()) return;  // CheckData names the dataset
  const DatasetShape& shape = dataset->second;
  const uint64_t image = uint64_t{cnn.height()} * cnn.width() * cnn.channels();
  if (image != 0 && shape.input_dim != 0 && image != shape.input_dim) {
    p.Add("model.cnn",
          absl::StrFormat("height * width * channels = %d * %d * %d = %d "
                          "does not match dataset %s (%d floats per example)",
                          cnn.height(), cnn.width(), cnn.channels(), image,
                          dataset->first, shape.input_dim));
  }
  if (cnn.num_classes() >= 2 && shape.num_classes != 0 &&
      cnn.num_classes() != shape.num_classes) {
    p.Add(
        "model.cnn.num_classes",
        absl::StrFormat("%d does not match dataset %s (%d)", cnn.num_classes(),
                        dataset->first, shape.num_classes));
  }
}

void CheckModelFields(const JobSpec& spec, const ValidationContext& ctx,
                      Problems& p) {
  const ModelSpec& model = spec.model();
  switch (model.model_case()) {
    case ModelSpec::MODEL_NOT_SET:
      p.Add("model", "must be set (softmax, mlp, cnn, lab, ctr or custom)");
      return;
    case ModelSpec::kLab:     // ValidateModelSpec checks every field
    case ModelSpec::kCtr:     // and TableProblems the table it names
    case ModelSpec::kCustom:  // and every tensor
      return;
    case ModelSpec::kSoftmax:
      CheckInputAndClasses("model.softmax", model.softmax().input_dim(),
                           model.softmax().num_classes(), spec, ctx, p);
      return;
    case ModelSpec::kMlp:
      CheckInputAndClasses("model.mlp", model.mlp().input_dim(),
                           model.mlp().num_classes(), spec, ctx, p);
      for (int i = 0; i < model.mlp().hidden_size(); ++i) {
        uint32_t h = model.mlp().hidden(i);
        if (h == 0 || h > kMaxLayerWidth) {
          p.Add(
              absl::StrFormat("model.mlp.hidden[%d]", i),
              absl::StrFormat("must be in [1, %d], got %d", kMaxLayerWidth, h));
        }
      }
      return;
    case ModelSpec::kCnn:
      CheckCnnImages(model.cnn(), spec, ctx, p);
      return;
  }
}

// The coordinator's checks against the dataset and the cluster, then the
// model library's own limits (the workers build exactly that model).
void CheckModel(const JobSpec& spec, const ValidationContext& ctx,
                Problems& p) {
  const size_t before = p.size();
  CheckModelFields(spec, ctx, p);
  if (p.size() != before) return;
  absl::Status s = ValidateModelSpec(spec.model());
  if (!s.ok()) p.Add(s.message());
}

void CheckOptimizer(const OptimizerSpec& o, Problems& p) {
  std::vector<std::string> found;
  AppendOptimizerProblems(o, "optimizer", {SGD, ADAGRAD, ADAM, ADAMW}, &found);
  for (const std::string& problem : found) p.Add(problem);
}

// wire.format: a WireFormat value (UNSPECIFIED = the default);
// wire.topk_fraction, when set: in (0, 1].
void CheckWire(const WireSpec& w, Problems& p) {
  if (!WireFormat_IsValid(w.format())) {
    p.Add("wire.format",
          absl::StrFormat("unknown value %d (FP32, BF16, FP16)", w.format()));
  }
  if (w.has_topk_fraction() &&
      !(w.topk_fraction() > 0 && w.topk_fraction() <= 1)) {
    p.Add("wire.topk_fraction",
          absl::StrFormat("%g is outside (0, 1]", w.topk_fraction()));
  }
}

void CheckConsistency(const JobSpec& spec, Problems& p) {
  const ConsistencySpec& c = spec.consistency();
  const ConsistencyMode mode = c.mode();
  if (mode == CONSISTENCY_UNSPECIFIED) {
    p.Add("consistency.mode", "must be set (BSP, ASP, SSP)");
  } else if (!ConsistencyMode_IsValid(mode)) {
    p.Add("consistency.mode", absl::StrFormat("unknown value %d", mode));
  }
  const bool known_mode =
      mode != CONSISTENCY_UNSPECIFIED && ConsistencyMode_IsValid(mode);
  if (c.staleness() > 0 && known_mode && mode != SSP) {
    p.Add("consistency.staleness",
          absl::StrCat("only SSP uses a staleness bound (mode is ",
                       ConsistencyMode_Name(mode), ")"));
  }
  if (c.backup_workers() > 0) {
    if (known_mode && mode != BSP) {
      p.Add("consistency.backup_workers",
            absl::StrCat("only BSP uses backup workers (mode is ",
                         ConsistencyMode_Name(mode), ")"));
    } else if (spec.num_workers() > 0 &&
               c.backup_workers() >= spec.num_workers()) {
      p.Add("consistency.backup_workers",
            absl::StrFormat("must be < num_workers (%d), got %d",
                            spec.num_workers(), c.backup_workers()));
    }
  }
}

// A model that reads no data of the workers' (lab), or reads its own (a
// custom model's script): every field that names or shapes a data set (and
// the evaluation that needs a test set) must stay unset; `why` says so.
void CheckNoData(const JobSpec& spec, absl::string_view why, Problems& p) {
  const DataSpec& d = spec.data();
  if (!d.dataset().empty()) p.Add("data.dataset", why);
  if (!d.data_dir().empty()) p.Add("data.data_dir", why);
  if (d.synthetic_train() > 0) p.Add("data.synthetic_train", why);
  if (d.synthetic_test() > 0) p.Add("data.synthetic_test", why);
  if (d.max_train_examples() > 0) p.Add("data.max_train_examples", why);
  if (!d.train_file().empty()) p.Add("data.train_file", why);
  if (!d.test_file().empty()) p.Add("data.test_file", why);
  if (spec.eval_every() > 0) p.Add("eval_every", why);
}

// The data set's name and place, for a model that trains on data.
void CheckDataset(const JobSpec& spec, const ValidationContext& ctx,
                  Problems& p) {
  const DataSpec& d = spec.data();
  if (d.dataset().empty()) {
    p.Add("data.dataset",
          absl::StrCat("must be set (one of ", KnownDatasetList(ctx), ")"));
  } else if (ctx.datasets.find(d.dataset()) == ctx.datasets.end()) {
    p.Add("data.dataset",
          absl::StrCat("unknown dataset \"", d.dataset(),
                       "\" (known: ", KnownDatasetList(ctx), ")"));
  }
  if (!d.data_dir().empty()) {
    const bool exists = ctx.path_exists ? ctx.path_exists(d.data_dir())
                                        : DefaultPathExists(d.data_dir());
    if (!exists) {
      p.Add("data.data_dir",
            absl::StrCat("directory \"", d.data_dir(), "\" does not exist"));
    }
  }
}

// criteo-tsv's files: set, absolute or relative to data.data_dir (the
// coordinator cannot know the workers' own data_dir), and present.
void CheckTsvFiles(const DataSpec& d, const ValidationContext& ctx,
                   Problems& p) {
  const std::pair<const char*, const std::string*> files[] = {
      {"data.train_file", &d.train_file()}, {"data.test_file", &d.test_file()}};
  for (const auto& [field, file] : files) {
    if (file->empty()) {
      p.Add(field, absl::StrCat("must be set for ", kCriteoTsvDataset));
      continue;
    }
    std::string path = *file;
    if (path[0] != '/') {
      if (d.data_dir().empty()) {
        p.Add(field, absl::StrCat("\"", path,
                                  "\" is relative; make it absolute or set "
                                  "data.data_dir"));
        continue;
      }
      path = absl::StrCat(d.data_dir(), d.data_dir().back() == '/' ? "" : "/",
                          path);
    }
    const bool exists =
        ctx.path_exists ? ctx.path_exists(path) : DefaultFileExists(path);
    if (!exists) {
      p.Add(field, absl::StrCat("file \"", path, "\" does not exist"));
    }
  }
}

// A ctr model trains on CTR examples, and only it does; the generated set
// needs its sizes, the TSV set its files.
// DataSpec.ctr_cardinalities and ctr_zipf_exponent: ctr-synthetic's only.
void CheckCtrGenerator(const DataSpec& d, bool synthetic, Problems& p) {
  if (!synthetic) {
    const std::string why =
        absl::StrCat("only ", kCtrSyntheticDataset, " uses it");
    if (d.ctr_cardinalities_size() > 0) p.Add("data.ctr_cardinalities", why);
    if (d.ctr_zipf_exponent() != 0.0) p.Add("data.ctr_zipf_exponent", why);
    return;
  }
  const int n = d.ctr_cardinalities_size();
  if (n != 0 && n != kCtrSyntheticFields) {
    p.Add("data.ctr_cardinalities",
          absl::StrFormat("has %d values: want none (Criteo Kaggle's) or one "
                          "per categorical field, %d",
                          n, kCtrSyntheticFields));
  }
  for (int f = 0; f < n; ++f) {
    const uint64_t c = d.ctr_cardinalities(f);
    if (c < 1 || c >= kCtrMaxCardinality) {
      p.Add(absl::StrFormat("data.ctr_cardinalities[%d]", f),
            absl::StrFormat("%d: want 1 <= value < 2^32", c));
    }
  }
  const double e = d.ctr_zipf_exponent();
  if (!std::isfinite(e) || e < 0.0 || e > kCtrMaxZipfExponent) {
    p.Add("data.ctr_zipf_exponent",
          absl::StrFormat("%g: want (0, %g], or 0 for the default 1.1", e,
                          kCtrMaxZipfExponent));
  }
}

void CheckCtrData(const JobSpec& spec, const ValidationContext& ctx,
                  Problems& p) {
  const DataSpec& d = spec.data();
  const bool synthetic = d.dataset() == kCtrSyntheticDataset;
  const bool tsv = d.dataset() == kCriteoTsvDataset;
  if (spec.model().has_ctr() && !synthetic && !tsv && !d.dataset().empty()) {
    p.Add("data.dataset",
          absl::StrCat("a ctr model trains on \"", kCtrSyntheticDataset,
                       "\" or \"", kCriteoTsvDataset, "\", not \"", d.dataset(),
                       "\""));
  }
  if ((synthetic || tsv) && !spec.model().has_ctr()) {
    p.Add("data.dataset",
          absl::StrCat("\"", d.dataset(), "\" is for a ctr model"));
  }
  if (tsv) {
    CheckTsvFiles(d, ctx, p);
  } else if (!spec.model().has_lab()) {
    const std::string why =
        absl::StrCat("only ", kCriteoTsvDataset, " uses it");
    if (!d.train_file().empty()) p.Add("data.train_file", why);
    if (!d.test_file().empty()) p.Add("data.test_file", why);
  }
  if (synthetic) {
    if (d.synthetic_train() == 0) {
      p.Add("data.synthetic_train", "must be > 0 for ctr-synthetic");
    }
    if (d.synthetic_test() == 0) {
      p.Add("data.synthetic_test", "must be > 0 for ctr-synthetic");
    }
  }
  CheckCtrGenerator(d, synthetic, p);
}

void CheckData(const JobSpec& spec, const ValidationContext& ctx, Problems& p) {
  const DataSpec& d = spec.data();
  const bool custom = spec.model().has_custom();
  if (spec.model().has_lab()) {
    CheckNoData(spec, "a lab model reads no data; leave it unset", p);
  } else if (custom) {
    CheckNoData(spec,
                "a custom model's training script reads its own data and "
                "evaluates itself; leave it unset",
                p);
  } else {
    CheckDataset(spec, ctx, p);
  }
  // A lab or custom model's batch_size counts samples for samples/s.
  if (d.batch_size() == 0 || d.batch_size() > kMaxBatchSize) {
    p.Add("data.batch_size", absl::StrFormat("must be in [1, %d], got %d",
                                             kMaxBatchSize, d.batch_size()));
  }
  if (custom) {
    if (d.epochs() != 0) {
      p.Add("data.epochs",
            "a custom model's training script decides when it is done; leave "
            "it unset");
    }
  } else if (d.epochs() == 0) {
    p.Add("data.epochs", "must be >= 1");
  }
  const bool generated =
      d.dataset() == "synthetic" || d.dataset() == kCtrSyntheticDataset;
  if (!spec.model().has_lab() && !custom && !generated) {
    if (d.synthetic_train() > 0) {
      p.Add("data.synthetic_train", "only the synthetic datasets use it");
    }
    if (d.synthetic_test() > 0) {
      p.Add("data.synthetic_test", "only the synthetic datasets use it");
    }
  }
  CheckCtrData(spec, ctx, p);
}

void CheckPartitioning(const JobSpec& spec, Problems& p) {
  const uint64_t bytes = spec.partition_bytes();
  if (bytes == 0) {
    // Defaulted; the chunk-count check below still applies.
  } else if (bytes % 4 != 0) {
    p.Add("partition_bytes",
          absl::StrFormat("must be a multiple of 4 (float32), got %d", bytes));
    return;
  } else if (bytes < kMinPartitionBytes || bytes > kMaxPartitionBytes) {
    p.Add("partition_bytes",
          absl::StrFormat("must be in [%d, %d] (a chunk must fit one "
                          "message), got %d",
                          kMinPartitionBytes, kMaxPartitionBytes, bytes));
    return;
  }
  const uint64_t elements_per_chunk =
      (bytes == 0 ? kDefaultPartitionBytes : bytes) / 4;
  uint64_t chunks = 0;
  for (const TensorSpec& t : ModelTensors(spec.model())) {
    uint64_t n = 1;
    for (uint64_t d : t.shape()) n *= d;
    chunks += (n + elements_per_chunk - 1) / elements_per_chunk;
  }
  if (chunks > kMaxChunks) {
    p.Add("partition_bytes",
          absl::StrFormat("the model needs %d chunks of %d bytes, more than "
                          "the %d a placement may hold; raise it",
                          chunks, elements_per_chunk * 4, kMaxChunks));
  }
}

}  // namespace

std::map<std::string, DatasetShape> KnownDatasets() {
  return {
      {"fashion-mnist", DatasetShape{784, 10}},
      {"mnist", DatasetShape{784, 10}},
      {"synthetic", DatasetShape{0, 0}},
      {kCtrSyntheticDataset, DatasetShape{0, 0}},
      {kCriteoTsvDataset, DatasetShape{0, 0}},
  };
}

std::vector<std::string> ValidateJobSpec(const JobSpec& spec,
                                         const ValidationContext& ctx) {
  Problems p;
  if (ctx.num_shards == 0) p.Add("cluster", "has no shards");
  CheckName(spec, p);
  CheckModel(spec, ctx, p);
  CheckOptimizer(spec.optimizer(), p);
  CheckConsistency(spec, p);
  CheckWire(spec.wire(), p);
  for (std::string& r : ReplicationProblems(spec, ctx)) p.Add(r);
  if (absl::Status st = CheckShardSet(spec, ctx.num_shards);
      !st.ok() && spec.shard_ids_size() > 0) {
    p.Add(st.message());  // (CheckReplication names `shards` alone)
  }
  for (const std::string& problem : TableProblems(spec)) p.Add(problem);
  if (spec.num_workers() == 0 || spec.num_workers() > kMaxNumWorkers) {
    p.Add("num_workers", absl::StrFormat("must be in [1, %d], got %d",
                                         kMaxNumWorkers, spec.num_workers()));
  }
  if (spec.max_workers() != 0 && (spec.max_workers() < spec.num_workers() ||
                                  spec.max_workers() > kMaxNumWorkers)) {
    p.Add("max_workers",
          absl::StrFormat("must be 0 or in [num_workers %d, %d], got %d",
                          spec.num_workers(), kMaxNumWorkers,
                          spec.max_workers()));
  } else if (spec.max_workers() > spec.num_workers() &&
             spec.model().has_custom()) {
    p.Add("max_workers",
          "a custom model's job cannot grow: its workers join it by job id");
  }
  if (!LrRule_IsValid(spec.lr_rule())) {
    p.Add("lr_rule", absl::StrFormat("unknown rule %d", spec.lr_rule()));
  }
  if (!DataRescale_IsValid(spec.data_rescale())) {
    p.Add("data_rescale",
          absl::StrFormat("unknown value %d", spec.data_rescale()));
  } else if (spec.data_rescale() != DATA_RESCALE_EPOCH &&
             !UsesElasticData(spec)) {
    p.Add("data_rescale",
          "only an elastic job (max_workers set) of an mlp or cnn model, "
          "or of a ctr model on ctr-synthetic, splits its data over the "
          "active workers");
  }
  CheckData(spec, ctx, p);
  CheckPartitioning(spec, p);
  if (spec.checkpoint().every_seconds() > kMaxCheckpointSeconds) {
    p.Add("checkpoint.every_seconds",
          absl::StrFormat("%d s is more than 7 days (the unit is seconds)",
                          spec.checkpoint().every_seconds()));
  }
  if (!WorkerFailurePolicy_IsValid(spec.on_worker_failure())) {
    p.Add("on_worker_failure",
          absl::StrFormat("unknown value %d", spec.on_worker_failure()));
  }
  if (spec.tensors_size() > 0) {
    p.Add("tensors",
          absl::StrFormat("derived from model; must be empty, got %d",
                          spec.tensors_size()));
  }
  return p.Take();
}

JobSpec ApplyJobDefaults(const JobSpec& spec) {
  JobSpec out = spec;
  if (out.partition_bytes() == 0) {
    out.set_partition_bytes(kDefaultPartitionBytes);
  }
  ConsistencySpec* c = out.mutable_consistency();
  if (c->step_deadline_ms() == 0)
    c->set_step_deadline_ms(kDefaultStepDeadlineMs);
  if (out.on_worker_failure() == WORKER_FAILURE_UNSPECIFIED) {
    out.set_on_worker_failure(FAIL);
  }
  WireSpec* w = out.mutable_wire();
  if (w->format() == WIRE_FORMAT_UNSPECIFIED) {
    WireFormat format = FP32;
    WireFormat_Parse(kDefaultWireFormat, &format);
    w->set_format(format);
  }
  if (!w->has_topk_fraction()) w->set_topk_fraction(kDefaultTopkFraction);
  ApplyOptimizerDefaults(out.mutable_optimizer());
  for (TableSpec& t : *out.mutable_tables()) ApplyTableDefaults(&t);
  out.clear_tensors();
  for (TensorSpec& t : ModelTensors(out.model())) {
    *out.add_tensors() = std::move(t);
  }
  return out;
}

absl::StatusOr<JobSpec> NormalizeJobSpec(const JobSpec& spec,
                                         const ValidationContext& ctx,
                                         std::vector<std::string>* problems) {
  std::vector<std::string> found = ValidateJobSpec(spec, ctx);
  if (problems != nullptr) *problems = found;
  if (!found.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("job spec has ", found.size(),
                     found.size() == 1 ? " problem: " : " problems: ",
                     absl::StrJoin(found, "; ")));
  }
  return ApplyJobDefaults(spec);
}

}  // namespace ps
