#include "tests/testing/ctr_job.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace ps {

std::string CtrJobSpec(const CtrJob& job) {
  std::string hidden;
  for (uint32_t h : job.hidden) absl::StrAppend(&hidden, " hidden: ", h);
  const std::string data =
      job.data.empty()
          ? absl::StrFormat(
                "dataset: \"ctr-synthetic\" batch_size: %d epochs: 1 "
                "synthetic_train: %d synthetic_test: %d",
                job.batch_size, job.synthetic_train, job.synthetic_test)
          : job.data;
  std::string spec = absl::StrFormat(
      R"pb(
        name: "%s"
        model { ctr { table: "emb" embedding_dim: %d %s } }
        tables {
          name: "emb"
          dim: %d
          init { kind: NORMAL scale: 0.01 }
          optimizer { kind: ADAGRAD learning_rate: 0.05 } %s
        }
        data { %s }
        optimizer { kind: ADAGRAD learning_rate: 0.01 }
        consistency { mode: BSP step_deadline_ms: %d }
        num_workers: 2
        seed: %d
      )pb",
      job.name, job.dim, hidden, job.dim, job.table_extra, data,
      job.step_deadline_ms, job.seed);
  if (job.partition_bytes > 0) {
    absl::StrAppend(&spec, "partition_bytes: ", job.partition_bytes, "\n");
  }
  absl::StrAppend(&spec, job.extra, "\n");
  return spec;
}

}  // namespace ps
