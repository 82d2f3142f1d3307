// The CTR jobs the multi-process tests train (ctr_job, ctr_restart,
// row_cache_job, ctr_tsv_job, table_export): one embedding table "emb"
// (NORMAL 0.01, ADAGRAD 0.05) under a small ctr model, ADAGRAD 0.01 on the
// dense part, BSP, 2 workers; what differs between them is a field here.
//
//   CtrJob job;
//   job.name = "ctr-restart";
//   job.hidden = {32};
//   job.extra = "checkpoint { every_steps: 1 }";
//   const std::string spec = CtrJobSpec(job);
#ifndef TESTS_TESTING_CTR_JOB_H_
#define TESTS_TESTING_CTR_JOB_H_

#include <cstdint>
#include <string>
#include <vector>

namespace ps {

struct CtrJob {
  std::string name;
  uint32_t dim = 8;  // embedding_dim and the table's dim
  std::vector<uint32_t> hidden = {64, 32};
  // Lines added inside the table's block (e.g. "max_row_staleness: 4").
  std::string table_extra;
  // The data block's body; empty: ctr-synthetic with the fields below.
  std::string data;
  uint32_t batch_size = 256;
  uint64_t synthetic_train = 81920;
  uint64_t synthetic_test = 16384;
  uint64_t partition_bytes = 65536;  // 0: the default
  uint64_t seed = 11;
  uint32_t step_deadline_ms = 30000;
  std::string extra;  // appended to the spec
};

// The JobSpec text of `job`.
std::string CtrJobSpec(const CtrJob& job);

}  // namespace ps

#endif  // TESTS_TESTING_CTR_JOB_H_
