// SparseTable against a plain model (a map of rows) over seeded random
// sequences of pushes with duplicate ids, pulls of stored and unseen ids,
// admissions and TTL evictions: the batched, prefetched lookup (segments
// pipelined across stripes, SparseTable::Pipeline) must return exactly the
// rows a one-id-at-a-time table would. Batches up to 700 ids cover stripe
// runs of one segment, of several and of none.
#include <algorithm>
#include <cstdint>
#include <map>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "server/sparse/sparse_table.h"
#include "server/sparse/testing/sparse_table_test_util.h"

namespace ps {
namespace {

using sparse_test::CountingSgd;
using sparse_test::Fn;
using sparse_test::InitRow;
using sparse_test::kLr;
using sparse_test::MustCreate;
using sparse_test::PullRows;

struct ModelRow {
  std::vector<float> values;
  float calls = 0, grad0 = 0;  // CountingSgd's state
  uint64_t last_step = 0;
};

// The table's rules, one id at a time: duplicates summed in request order,
// a row created at its admission_count-th push (initialised, then updated),
// rows idle for ttl_steps evicted by EvictExpired.
class Model {
 public:
  explicit Model(const SparseTable::Options& o) : o_(o) {}

  void Push(const std::vector<uint64_t>& ids, const std::vector<float>& grads,
            uint64_t step) {
    const uint32_t dim = o_.dim;
    std::map<uint64_t, std::vector<float>> summed;
    std::vector<uint64_t> order;
    for (size_t i = 0; i < ids.size(); ++i) {
      auto [it, fresh] = summed.try_emplace(ids[i], dim, 0.0f);
      if (fresh) order.push_back(ids[i]);
      for (uint32_t e = 0; e < dim; ++e) {
        // The first occurrence is copied, later ones added (as MergePush).
        it->second[e] =
            fresh ? grads[i * dim + e] : it->second[e] + grads[i * dim + e];
      }
    }
    for (uint64_t id : order) {
      auto row = rows_.find(id);
      if (row == rows_.end()) {
        if (++seen_[id] < o_.admission_count) continue;
        seen_.erase(id);
        row = rows_.emplace(id, ModelRow{InitRow(o_, id)}).first;
      }
      const std::vector<float>& g = summed[id];
      for (uint32_t e = 0; e < dim; ++e) row->second.values[e] -= kLr * g[e];
      row->second.calls += 1;
      row->second.grad0 += g[0];
      if (step > row->second.last_step) row->second.last_step = step;
    }
  }

  void EvictExpired(uint64_t now) {
    for (auto it = rows_.begin(); it != rows_.end();) {
      const uint64_t last = it->second.last_step;
      if (now >= last && now - last >= o_.ttl_steps) {
        it = rows_.erase(it);
      } else {
        ++it;
      }
    }
  }

  std::vector<float> Row(uint64_t id) const {
    auto it = rows_.find(id);
    return it == rows_.end() ? InitRow(o_, id) : it->second.values;
  }
  size_t rows() const { return rows_.size(); }

 private:
  SparseTable::Options o_;
  std::map<uint64_t, ModelRow> rows_;
  std::map<uint64_t, uint32_t> seen_;
};

struct Config {
  uint32_t stripes, slab_rows, admission, ttl;
};

class SparseTableModelTest : public ::testing::TestWithParam<Config> {};

TEST_P(SparseTableModelTest, BatchedLookupsMatchTheModel) {
  const Config c = GetParam();
  SparseTable::Options o = sparse_test::SmallOptions();
  o.num_stripes = c.stripes;
  o.slab_rows = c.slab_rows;
  o.admission_count = c.admission;
  o.ttl_steps = c.ttl;
  auto t = MustCreate(o);
  ASSERT_NE(t, nullptr);
  Model model(o);
  CountingSgd sgd(o.dim);
  std::mt19937_64 rng(1234 + c.stripes * 7 + c.admission);
  // A universe small enough for many duplicates and re-pushes.
  std::uniform_int_distribution<uint64_t> id_of(0, 1499);
  std::uniform_int_distribution<size_t> size_of(1, 700);
  std::uniform_real_distribution<float> grad_of(-1.0f, 1.0f);
  for (uint64_t step = 1; step <= 60; ++step) {
    const size_t n = size_of(rng);
    std::vector<uint64_t> ids(n);
    for (uint64_t& id : ids) id = id_of(rng);
    std::vector<float> grads(n * o.dim);
    for (float& g : grads) g = grad_of(rng);
    ASSERT_TRUE(t->Push(ids, grads, step, Fn(sgd)).ok()) << "step " << step;
    model.Push(ids, grads, step);
    if (c.ttl > 0 && step % 5 == 0) {
      t->EvictExpired(step);
      model.EvictExpired(step);
    }
    // Pull the pushed ids (shuffled, with duplicates) and some others.
    std::vector<uint64_t> pull = ids;
    for (size_t k = 0; k < n / 2; ++k) pull.push_back(id_of(rng) + 1000);
    std::shuffle(pull.begin(), pull.end(), rng);
    const std::vector<float> got = PullRows(*t, pull);
    ASSERT_EQ(got.size(), pull.size() * o.dim);
    for (size_t i = 0; i < pull.size(); ++i) {
      const std::vector<float> want = model.Row(pull[i]);
      for (uint32_t e = 0; e < o.dim; ++e) {
        ASSERT_EQ(got[i * o.dim + e], want[e])
            << "step " << step << " id " << pull[i] << " element " << e;
      }
    }
    ASSERT_EQ(t->GetStats().rows, model.rows()) << "step " << step;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Configs, SparseTableModelTest,
    ::testing::Values(Config{1, 8, 1, 0}, Config{4, 8, 2, 0},
                      Config{8, 64, 1, 7}, Config{64, 512, 3, 10},
                      Config{4096, 8, 1, 4}),
    [](const ::testing::TestParamInfo<Config>& info) {
      const Config& c = info.param;
      return absl::StrCat("stripes", c.stripes, "_slab", c.slab_rows, "_admit",
                          c.admission, "_ttl", c.ttl);
    });

}  // namespace
}  // namespace ps
