#include "worker/client/sparse_step.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace ps {
namespace {

int FindTable(const JobSpec& spec, const std::string& name) {
  for (int i = 0; i < spec.tables_size(); ++i) {
    if (spec.tables(i).name() == name) return i;
  }
  return -1;
}

absl::Status CheckIds(absl::Span<const uint64_t> ids, uint64_t num_ids,
                      const std::string& at) {
  if (num_ids == 0) return absl::OkStatus();
  for (size_t k = 0; k < ids.size(); ++k) {
    if (ids[k] >= num_ids) {
      return absl::InvalidArgumentError(absl::StrCat(
          at, "[", k, "]: id ", ids[k], " is not below num_ids ", num_ids));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<int>> CheckSparseStep(
    const JobSpec& spec, bool push, absl::Span<const SparseTableStep> tables) {
  std::vector<int> index(tables.size(), -1);
  for (size_t i = 0; i < tables.size(); ++i) {
    const SparseTableStep& t = tables[i];
    const std::string at = absl::StrCat("tables[", i, "]");
    const int k = FindTable(spec, t.table);
    if (k < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          at, ".table: \"", t.table, "\" is not a table of the job"));
    }
    for (size_t j = 0; j < i; ++j) {
      if (index[j] == k) {
        return absl::InvalidArgumentError(absl::StrCat(
            at, ".table: \"", t.table, "\" is also tables[", j, "]"));
      }
    }
    index[i] = k;
    const uint64_t dim = spec.tables(k).dim();
    if (!push && !t.push_ids.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          at, ".push_ids: ", t.push_ids.size(), " ids in a step without push"));
    }
    if (t.push_grads.size() != t.push_ids.size() * dim) {
      return absl::InvalidArgumentError(absl::StrCat(
          at, ".push_grads: ", t.push_grads.size(), " floats, expected ",
          t.push_ids.size(), " ids x dim ", dim));
    }
    if (t.pull_rows.size() != t.pull_ids.size() * dim) {
      return absl::InvalidArgumentError(absl::StrCat(
          at, ".pull_rows: ", t.pull_rows.size(), " floats, expected ",
          t.pull_ids.size(), " ids x dim ", dim));
    }
    if (t.pull_ids.size() > std::numeric_limits<uint32_t>::max()) {
      return absl::InvalidArgumentError(absl::StrCat(
          at, ".pull_ids: ", t.pull_ids.size(), " ids, over 2^32"));
    }
    const uint64_t num_ids = spec.tables(k).num_ids();
    PS_RETURN_IF_ERROR(CheckIds(t.push_ids, num_ids, at + ".push_ids"));
    PS_RETURN_IF_ERROR(CheckIds(t.pull_ids, num_ids, at + ".pull_ids"));
  }
  return index;
}

}  // namespace ps
