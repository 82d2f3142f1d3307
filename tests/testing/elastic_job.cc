#include "tests/testing/elastic_job.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace ps {

std::string ElasticMlpJob(const std::string& name, uint32_t epochs,
                          uint32_t max_workers) {
  std::string spec = absl::StrFormat(
      R"pb(
        name: "%s"
        model { mlp { input_dim: 784 hidden: 32 num_classes: 10 } }
        data {
          dataset: "synthetic"
          batch_size: 16
          synthetic_train: 4096
          synthetic_test: 256
          epochs: %d
        }
        optimizer { kind: SGD learning_rate: 0.05 }
        consistency { mode: BSP step_deadline_ms: 60000 }
        partition_bytes: 16384
        seed: 3
        num_workers: 2
        on_worker_failure: SHRINK
      )pb",
      name, epochs);
  if (max_workers > 0) absl::StrAppend(&spec, "max_workers: ", max_workers);
  return spec;
}

int64_t NumberAfter(const std::string& text, const std::string& key) {
  const size_t at = text.find(key);
  if (at == std::string::npos) return -1;
  const size_t begin = at + key.size();
  const size_t end = text.find_first_not_of("0123456789", begin);
  int64_t n = -1;
  if (!absl::SimpleAtoi(text.substr(begin, end - begin), &n)) return -1;
  return n;
}

}  // namespace ps
