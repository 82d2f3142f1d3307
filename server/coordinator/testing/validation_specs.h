// The job validation tests' helpers: a JobSpec from text, and the context
// they validate in (2 shards; only /data/fashion-mnist exists, whatever the
// machine's file system holds).
//
//   JobSpec spec = validation_test::ParseSpec(R"pb(name: "x" ...)pb");
//   EXPECT_THAT(ValidateJobSpec(spec, validation_test::Context()), IsEmpty());
#ifndef SERVER_COORDINATOR_TESTING_VALIDATION_SPECS_H_
#define SERVER_COORDINATOR_TESTING_VALIDATION_SPECS_H_

#include <string>

#include "proto/job.pb.h"
#include "server/coordinator/job_validation.h"

namespace ps {
namespace validation_test {

// Fails the calling test (EXPECT) when `text` does not parse.
JobSpec ParseSpec(const std::string& text);

ValidationContext Context();

}  // namespace validation_test
}  // namespace ps

#endif  // SERVER_COORDINATOR_TESTING_VALIDATION_SPECS_H_
