#include "common/json_string.h"

#include <string>
#include <utility>

#include "gtest/gtest.h"

namespace ps {
namespace {

TEST(JsonStringTest, Table) {
  const std::pair<std::string, std::string> cases[] = {
      {"", "\"\""},
      {"plain", "\"plain\""},
      {"a\"b", "\"a\\\"b\""},
      {"back\\slash", "\"back\\\\slash\""},
      {"line\nbreak", "\"line\\nbreak\""},
      {std::string("tab\t"), "\"tab\\u0009\""},
  };
  for (const auto& [in, want] : cases) EXPECT_EQ(JsonString(in), want) << in;
}

}  // namespace
}  // namespace ps
