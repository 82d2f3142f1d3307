#include "worker/client/testing/fake_sparse_client.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace ps {

absl::StatusOr<std::unique_ptr<FakeSparseClient>> FakeSparseClient::Create(
    const JobSpec& spec, Options options) {
  for (int i = 0; i < spec.tables_size(); ++i) {
    const TableSpec& t = spec.tables(i);
    if (t.dim() == 0) {
      return absl::InvalidArgumentError(absl::StrCat("tables[", i, "].dim: 0"));
    }
    const float lr = t.optimizer().learning_rate();
    if (!(lr > 0) || !std::isfinite(lr)) {
      return absl::InvalidArgumentError(
          absl::StrCat("tables[", i, "].optimizer.learning_rate: ", lr,
                       " (must be positive and finite)"));
    }
  }
  return std::unique_ptr<FakeSparseClient>(
      new FakeSparseClient(spec, std::move(options)));
}

FakeSparseClient::FakeSparseClient(const JobSpec& spec, Options options)
    : spec_(spec), options_(std::move(options)) {
  absl::MutexLock lock(&mu_);
  version_ = options_.initial_version;
  for (const TableSpec& t : spec_.tables()) {
    tables_.emplace_back();
    tables_.back().name = t.name();
    tables_.back().dim = t.dim();
    tables_.back().learning_rate = t.optimizer().learning_rate();
  }
}

RequestHandle FakeSparseClient::Start(SparseStep s) {
  const RequestHandle handle =
      tracker().Open(absl::StrCat("sparse step ", s.step));
  absl::Status status;
  {
    absl::MutexLock lock(&mu_);
    Record r;
    r.step = s.step;
    r.push = s.push;
    for (const SparseTableStep& t : s.tables) {
      r.tables.push_back(t.table);
      r.pushed_ids += t.push_ids.size();
      r.pulled_ids += t.pull_ids.size();
    }
    records_.push_back(std::move(r));
    status = Run(s);
  }
  if (s.done) s.done(status);
  tracker().Close(handle, std::move(status));
  return handle;
}

void FakeSparseClient::Cancel(RequestHandle) {}

absl::Status FakeSparseClient::Run(const SparseStep& s) {
  PS_ASSIGN_OR_RETURN(std::vector<int> index,
                      CheckSparseStep(spec_, s.push, s.tables));
  for (size_t i = 0; i < s.tables.size(); ++i) {
    const absl::Span<const float> g = s.tables[i].push_grads;
    for (size_t k = 0; k < g.size(); ++k) {
      if (!std::isfinite(g[k])) {
        return absl::InvalidArgumentError(absl::StrCat(
            "tables[", i, "].push_grads[", k, "]: ", g[k], " is not finite"));
      }
    }
  }
  if (s.push && s.step > version_) {
    return absl::InvalidArgumentError(
        absl::StrCat("step: ", s.step, " is ahead of the sparse tables' step ",
                     version_, " (push steps in order)"));
  }
  if (!s.push && s.step > version_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "step: a pull of step ", s.step, " needs version >= ", s.step,
        "; the tables are at ", version_, " and no other worker pushes"));
  }
  stats_.steps++;
  stats_.requests++;
  if (s.push && s.step < version_) {
    stats_.stale++;
  } else if (s.push) {
    for (size_t i = 0; i < s.tables.size(); ++i) {
      Apply(tables_[index[i]], s.tables[i].push_ids, s.tables[i].push_grads);
    }
    ++version_;
  }
  for (size_t i = 0; i < s.tables.size(); ++i) {
    const SparseTableStep& st = s.tables[i];
    const Table& t = tables_[index[i]];
    for (size_t k = 0; k < st.pull_ids.size(); ++k) {
      ReadRow(t, st.pull_ids[k], st.pull_rows.data() + k * t.dim);
    }
    stats_.rows_pushed += st.push_ids.size();
    stats_.rows_pulled += st.pull_ids.size();
    stats_.bytes_sent += st.push_ids.size() * sizeof(uint64_t) +
                         st.push_grads.size() * sizeof(float) +
                         st.pull_ids.size() * sizeof(uint64_t);
    stats_.bytes_received += st.pull_ids.size() * sizeof(uint64_t) +
                             st.pull_rows.size() * sizeof(float);
  }
  return absl::OkStatus();
}

void FakeSparseClient::Apply(Table& t, absl::Span<const uint64_t> ids,
                             absl::Span<const float> grads) {
  // Sum per id first: a repeated id is one update of the summed gradient.
  absl::flat_hash_map<uint64_t, std::vector<float>> sums;
  std::vector<uint64_t> order;
  for (size_t k = 0; k < ids.size(); ++k) {
    auto [it, added] = sums.try_emplace(ids[k], t.dim, 0.0f);
    if (added) order.push_back(ids[k]);
    for (uint32_t e = 0; e < t.dim; ++e) it->second[e] += grads[k * t.dim + e];
  }
  for (uint64_t id : order) {
    auto it = t.rows.find(id);
    if (it == t.rows.end()) {
      std::vector<float> initial(t.dim);
      ReadRow(t, id, initial.data());
      it = t.rows.emplace(id, std::move(initial)).first;
    }
    const std::vector<float>& g = sums[id];
    for (uint32_t e = 0; e < t.dim; ++e) {
      it->second[e] -= t.learning_rate * g[e];
    }
  }
}

void FakeSparseClient::ReadRow(const Table& t, uint64_t id, float* out) const {
  auto it = t.rows.find(id);
  if (it != t.rows.end()) {
    std::memcpy(out, it->second.data(), t.dim * sizeof(float));
    return;
  }
  std::fill(out, out + t.dim, 0.0f);
  if (options_.init) options_.init(t.name, id, absl::MakeSpan(out, t.dim));
}

SparseClientStats FakeSparseClient::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

uint64_t FakeSparseClient::version() const {
  absl::MutexLock lock(&mu_);
  return version_;
}

std::vector<float> FakeSparseClient::Row(const std::string& table,
                                         uint64_t id) const {
  absl::MutexLock lock(&mu_);
  for (const Table& t : tables_) {
    if (t.name != table) continue;
    std::vector<float> row(t.dim);
    ReadRow(t, id, row.data());
    return row;
  }
  return {};
}

size_t FakeSparseClient::stored_rows(const std::string& table) const {
  absl::MutexLock lock(&mu_);
  for (const Table& t : tables_) {
    if (t.name == table) return t.rows.size();
  }
  return 0;
}

std::vector<FakeSparseClient::Record> FakeSparseClient::exchanges() const {
  absl::MutexLock lock(&mu_);
  return records_;
}

}  // namespace ps
