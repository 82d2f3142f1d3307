#include "server/coordinator/testing/validation_specs.h"

#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"

namespace ps {
namespace validation_test {

JobSpec ParseSpec(const std::string& text) {
  JobSpec spec;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &spec))
      << text;
  return spec;
}

ValidationContext Context() {
  ValidationContext ctx;
  ctx.num_shards = 2;
  ctx.path_exists = [](const std::string& path) {
    return path == "/data/fashion-mnist";
  };
  return ctx;
}

}  // namespace validation_test
}  // namespace ps
