#include "server/sparse/internal/admission_counts.h"

#include <cstdint>
#include <map>
#include <random>

#include "gtest/gtest.h"

namespace ps {
namespace sparse_internal {
namespace {

TEST(AdmissionCountsTest, MatchesAModelUnderRandomOperations) {
  std::mt19937_64 rng(2);
  AdmissionCounts counts;
  std::map<uint64_t, uint32_t> model;
  for (int op = 0; op < 200000; ++op) {
    const uint64_t id = rng() % 3000;
    ASSERT_EQ(counts.Get(id), model.count(id) ? model[id] : 0u);
    if (rng() % 3 == 0) {
      counts.Erase(id);
      model.erase(id);
    } else {
      const size_t planned =
          counts.BytesFor(counts.size() + (model.count(id) ? 0 : 1));
      const uint32_t c = 1 + static_cast<uint32_t>(rng() % 5);
      counts.Set(id, c);
      model[id] = c;
      ASSERT_EQ(counts.bytes(), planned);
    }
    ASSERT_EQ(counts.size(), model.size());
  }
  std::map<uint64_t, uint32_t> seen;
  counts.ForEach([&](uint64_t id, uint32_t c) { seen[id] = c; });
  EXPECT_EQ(seen, model);
}

}  // namespace
}  // namespace sparse_internal
}  // namespace ps
