// Fixtures shared by the sparse_table_*_test files.
#ifndef SERVER_SPARSE_TESTING_SPARSE_TABLE_TEST_UTIL_H_
#define SERVER_SPARSE_TESTING_SPARSE_TABLE_TEST_UTIL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/types/span.h"
#include "server/sparse/byte_stream.h"
#include "server/sparse/sparse_table.h"

namespace ps {
namespace sparse_test {

inline constexpr float kLr = 0.5f;

// dim 4, 2 state floats, uniform init: values that differ per id and element.
inline SparseTable::Options SmallOptions() {
  SparseTable::Options o;
  o.name = "emb";
  o.dim = 4;
  o.state_floats_per_row = 2;
  o.init.kind = RowInitializer::Kind::kUniform;
  o.init.scale = 0.1f;
  o.init.seed = 7;
  o.num_stripes = 4;
  o.slab_rows = 8;
  return o;
}

inline std::unique_ptr<SparseTable> MustCreate(SparseTable::Options o) {
  auto t = SparseTable::Create(std::move(o));
  if (!t.ok()) return nullptr;
  return std::move(t).value();
}

// SGD that also counts its calls and sums the gradients into the state:
// row -= kLr * grad; state[0] += 1; state[1] += grad[0].
struct CountingSgd {
  explicit CountingSgd(uint32_t dim) : dim(dim) {}
  void operator()(float* row, float* state, const float* grad, uint64_t id) {
    for (uint32_t e = 0; e < dim; ++e) row[e] -= kLr * grad[e];
    state[0] += 1;
    state[1] += grad[0];
    ++calls;
    updated.push_back(id);
  }
  uint32_t dim;
  int calls = 0;
  std::vector<uint64_t> updated;
};

// The update function of a CountingSgd (FunctionRef calls it as const).
inline auto Fn(CountingSgd& sgd) {
  return [&sgd](float* row, float* state, const float* grad, uint64_t id) {
    sgd(row, state, grad, id);
  };
}

inline std::vector<float> PullRows(SparseTable& t, std::vector<uint64_t> ids) {
  std::vector<float> out(ids.size() * t.options().dim);
  if (!t.Pull(ids, absl::MakeSpan(out)).ok()) return {};
  return out;
}

inline std::vector<float> InitRow(const SparseTable::Options& o, uint64_t id) {
  std::vector<float> v(o.dim);
  o.init.Fill(id, absl::MakeSpan(v));
  return v;
}

// A push of one row per id, gradient `g` on every element.
inline absl::Status PushConst(SparseTable& t, std::vector<uint64_t> ids,
                              float g, uint64_t step, CountingSgd& sgd) {
  std::vector<float> grads(ids.size() * t.options().dim, g);
  return t.Push(ids, grads, step, Fn(sgd));
}

inline std::string SaveBytes(const SparseTable& t) {
  std::string bytes;
  StringSink sink(&bytes);
  if (!t.Save(sink).ok()) return "save failed";
  return bytes;
}

}  // namespace sparse_test
}  // namespace ps

#endif  // SERVER_SPARSE_TESTING_SPARSE_TABLE_TEST_UTIL_H_
