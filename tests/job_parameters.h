// Reads a job's parameters back from the shards of a LocalCluster, with the
// placement the coordinator reports (`psctl status JOB --json`), through the
// worker's PsClient: what a finished job's tests compare.
//
//   absl::StatusOr<JobParameters> p = ReadJobParameters(cluster, job, 2);
//   ASSERT_TRUE(p.ok()) << p.status();
//   EXPECT_EQ(ParamChecksum(p->values), want);
#ifndef TESTS_JOB_PARAMETERS_H_
#define TESTS_JOB_PARAMETERS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/coordinator.pb.h"
#include "tests/local_cluster.h"

namespace ps {

struct JobParameters {
  JobStatus status;           // as psctl status --json printed it
  std::vector<float> values;  // the flat model, tensors in spec order
};

// `shards`: the cluster's shard count (their address files s<i>.addr). The
// parameters are pulled at the job's reported step. Blocks for at most the
// psctl and pull deadlines.
absl::StatusOr<JobParameters> ReadJobParameters(const LocalCluster& cluster,
                                                const std::string& job,
                                                int shards);

}  // namespace ps

#endif  // TESTS_JOB_PARAMETERS_H_
