// Job spec validation and normalization for the coordinator.
//
// ValidateJobSpec lists every problem in a user's JobSpec at once (so `psctl
// submit --dry-run` can show them all), each as "field.path: reason".
// NormalizeJobSpec validates, then fills the documented defaults and derives
// the parameter tensors from the model.
//
//   ValidationContext ctx;
//   ctx.num_shards = 2;
//   std::vector<std::string> problems;
//   absl::StatusOr<JobSpec> spec = NormalizeJobSpec(user_spec, ctx, &problems);
//   if (!spec.ok()) { for (auto& p : problems) std::cerr << p << "\n"; }
//
// The tensor list comes from core/model_spec.h (ModelTensors), the
// same function the workers' models use, so both sides agree on the layout.

#ifndef SERVER_COORDINATOR_JOB_VALIDATION_H_
#define SERVER_COORDINATOR_JOB_VALIDATION_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/defaults.h"
#include "core/model_spec.h"  // ModelTensors
#include "proto/job.pb.h"
#include "server/coordinator/placement.h"  // kMaxChunks

namespace ps {

// Limits a spec must respect. They guard against unit mistakes and against
// specs whose placement would not fit one gRPC message.
inline constexpr uint32_t kMaxLayerWidth = 65536;
inline constexpr uint32_t kMaxNumWorkers = 1024;
// JobSpec.replication: copies of each chunk, at most.
inline constexpr uint32_t kMaxReplication = 3;
inline constexpr uint32_t kMaxBatchSize = 65536;
inline constexpr uint64_t kMinPartitionBytes = 4 * 1024;
inline constexpr uint64_t kMaxPartitionBytes = 3 * 1024 * 1024;
// Longer checkpoint periods are almost surely milliseconds typed as seconds.
inline constexpr uint32_t kMaxCheckpointSeconds = 7 * 24 * 3600;

// What a dataset fixes about the model. 0 = any (the synthetic set adapts).
struct DatasetShape {
  uint32_t input_dim = 0;
  uint32_t num_classes = 0;
};

// The CTR data sets (a ctr model's): generated, and Criteo TSV files
// (DataSpec.train_file / test_file).
inline constexpr char kCtrSyntheticDataset[] = "ctr-synthetic";
inline constexpr char kCriteoTsvDataset[] = "criteo-tsv";
// ctr-synthetic's generator knobs (DataSpec.ctr_cardinalities and
// ctr_zipf_exponent; worker/data/ctr_synthetic.h checks the same ranges):
// one cardinality per categorical field, each below 2^32.
inline constexpr int kCtrSyntheticFields = 26;
inline constexpr uint64_t kCtrMaxCardinality = uint64_t{1} << 32;
inline constexpr double kCtrMaxZipfExponent = 10.0;

// "fashion-mnist" and "mnist" (784 inputs, 10 classes), "synthetic" (any),
// "ctr-synthetic" and "criteo-tsv" (a ctr model's).
std::map<std::string, DatasetShape> KnownDatasets();

// What the validator needs to know beyond the spec itself.
struct ValidationContext {
  // Shards in the cluster (must be >= 1).
  uint32_t num_shards = 1;
  // Shards failed over right now: a replicated job needs k live shards
  // among the shards it uses.
  std::vector<uint32_t> failed_shards;
  // Workers registered right now. Informational: a job may ask for more and
  // wait for them, so this never produces a problem.
  uint32_t num_registered_workers = 0;
  // Datasets a job may name.
  std::map<std::string, DatasetShape> datasets = KnownDatasets();
  // Whether a path the job names exists: data.data_dir (a directory) and
  // criteo-tsv's data.train_file and data.test_file (files, after joining a
  // relative one to data_dir). Unset: std::filesystem on this machine
  // (is_directory for data_dir, exists and not a directory for a file). Set
  // it to accept any path when workers run elsewhere.
  std::function<bool(const std::string& path)> path_exists;
};

// Every problem in `spec`, each "field.path: reason"; empty means valid.
// Checks the user's spec as submitted (zeros that have defaults are fine;
// `tensors` must be empty). Never fails otherwise; thread-safe if
// ctx.path_exists is.
std::vector<std::string> ValidateJobSpec(const JobSpec& spec,
                                         const ValidationContext& ctx);

// ValidateJobSpec's checks of `replication` (and `shards`, which bounds
// it), each "field: reason" (job_validation_replication.cc): k in
// [0, kMaxReplication] (0 = 1); k > 1 needs k shards and k live ones among
// those the job uses, and BSP for sparse tables (init.from_job: again once
// the job took its source's shards, SubmitJob).
std::vector<std::string> ReplicationProblems(const JobSpec& spec,
                                             const ValidationContext& ctx);

// `spec` with defaults filled in: partition_bytes, step_deadline_ms,
// on_worker_failure (FAIL), Adam/AdamW beta1/beta2/epsilon, Adagrad epsilon,
// and `tensors` from the model (replacing any given). Does not validate.
JobSpec ApplyJobDefaults(const JobSpec& spec);

// Validates `spec` and returns ApplyJobDefaults(spec). On any problem returns
// INVALID_ARGUMENT whose message lists them all; if `problems` is non-null it
// receives the list (cleared first, empty on success).
absl::StatusOr<JobSpec> NormalizeJobSpec(
    const JobSpec& spec, const ValidationContext& ctx,
    std::vector<std::string>* problems = nullptr);

}  // namespace ps

#endif  // SERVER_COORDINATOR_JOB_VALIDATION_H_
