#include "server/rpc/request_limits.h"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/coordinator/job_validation.h"
#include "server/coordinator/placement.h"

namespace ps {
namespace {

using ::testing::HasSubstr;

RegisterJobRequest Valid() {
  RegisterJobRequest r;
  r.set_job_id("j");
  r.set_num_workers(2);
  r.mutable_spec()->set_num_workers(2);
  r.mutable_spec()->set_partition_bytes(4096);
  TensorSpec* w = r.mutable_spec()->add_tensors();
  w->set_name("w");
  w->add_shape(784);
  w->add_shape(10);
  return r;
}

TEST(RequestLimitsTest, Table) {
  struct Case {
    std::string name;
    std::function<void(RegisterJobRequest*)> change;
    std::string error;  // "" = accepted
  } cases[] = {
      {"valid", [](RegisterJobRequest*) {}, ""},
      {"most workers",
       [](RegisterJobRequest* r) { r->set_num_workers(kMaxNumWorkers); }, ""},
      {"too many workers",
       [](RegisterJobRequest* r) { r->set_num_workers(kMaxNumWorkers + 1); },
       "num_workers"},
      {"too many workers in the spec",
       [](RegisterJobRequest* r) {
         r->mutable_spec()->set_num_workers(4000000000u);
       },
       "spec.num_workers"},
      {"exactly kMaxChunks",
       [](RegisterJobRequest* r) {
         r->mutable_spec()->mutable_tensors(0)->set_shape(
             0, kMaxChunks * 1024 / 10);
         r->mutable_spec()->mutable_tensors(0)->set_shape(1, 10);
       },
       ""},
      {"one chunk too many",
       [](RegisterJobRequest* r) {
         r->mutable_spec()->mutable_tensors(0)->set_shape(
             0, kMaxChunks * 1024 + 1);
         r->mutable_spec()->mutable_tensors(0)->set_shape(1, 1);
       },
       "spec.tensors[0].shape"},
      {"overflowing shape",
       [](RegisterJobRequest* r) {
         r->mutable_spec()->mutable_tensors(0)->set_shape(0, UINT64_MAX);
         r->mutable_spec()->mutable_tensors(0)->set_shape(1, UINT64_MAX);
       },
       "spec.tensors[0].shape"},
      {"tiny partitions",
       [](RegisterJobRequest* r) {
         r->mutable_spec()->set_partition_bytes(4);
         r->mutable_spec()->mutable_tensors(0)->set_shape(1,
                                                          100);  // 78400 chunks
       },
       "spec.tensors[0].shape"},
      {"a later tensor tips it over",
       [](RegisterJobRequest* r) {
         TensorSpec* t = r->mutable_spec()->add_tensors();
         t->set_name("b");
         t->add_shape(uint64_t{1} << 40);
       },
       "spec.tensors[1].shape"},
      {"placement too long",
       [](RegisterJobRequest* r) {
         for (uint64_t i = 0; i <= kMaxChunks; ++i)
           r->mutable_placement()->add_chunks();
       },
       "placement.chunks"},
      // Inconsistent specs are the Shard's to refuse, with its own message.
      {"zero dimension",
       [](RegisterJobRequest* r) {
         r->mutable_spec()->mutable_tensors(0)->set_shape(0, 0);
       },
       ""},
      {"partition of 3 bytes",
       [](RegisterJobRequest* r) { r->mutable_spec()->set_partition_bytes(3); },
       ""},
  };
  for (const Case& c : cases) {
    RegisterJobRequest r = Valid();
    c.change(&r);
    absl::Status s = CheckRegisterJobLimits(r);
    if (c.error.empty()) {
      EXPECT_TRUE(s.ok()) << c.name << ": " << s;
    } else {
      EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument)
          << c.name << ": " << s;
      EXPECT_THAT(std::string(s.message()), HasSubstr(c.error + ":")) << c.name;
    }
  }
}

}  // namespace
}  // namespace ps
