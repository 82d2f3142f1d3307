// What multi-process tests read back about a job from a LocalCluster: its
// status as the coordinator reports it (`psctl status JOB --json`), one
// shard's statistics of it, and its parameters from the shards through the
// worker's PsClient (what a finished job's tests compare).
//
//   absl::StatusOr<JobParameters> p = ReadJobParameters(cluster, job, 2);
//   ASSERT_TRUE(p.ok()) << p.status();
//   EXPECT_EQ(ParamChecksum(p->values), want);
#ifndef TESTS_JOB_PARAMETERS_H_
#define TESTS_JOB_PARAMETERS_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/coordinator.pb.h"
#include "proto/ps.pb.h"
#include "tests/local_cluster.h"

namespace ps {

// `psctl status JOB --json`. A non-zero exit is UNAVAILABLE with psctl's
// message; when `unknown` is set, it is set to whether the coordinator
// answered "unknown job".
absl::StatusOr<JobStatus> ReadJobStatus(const LocalCluster& cluster,
                                        const std::string& job,
                                        bool* unknown = nullptr);

// SUCCEEDED, FAILED or CANCELLED.
bool JobEnded(const JobStatus& status);

// The Stats of `job` from the shard at `address` (10 s deadline; NOT_FOUND
// when the shard does not hold the job).
absl::StatusOr<JobStats> ReadShardJobStats(const std::string& address,
                                           const std::string& job);

// The version of every chunk the shard at `address` serves at placement
// epoch `placement_epoch` (a backup's copies are not served), added to
// `versions` by chunk id; FAILED_PRECONDITION for a chunk already in it.
// Under ASP and SSP a chunk's version counts the pushes applied to it.
absl::Status ReadServedVersions(const std::string& address,
                                const std::string& job,
                                uint64_t placement_epoch,
                                std::map<uint32_t, uint64_t>* versions);

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
// The same from the shards at `addresses` (one per shard id, in order):
// where each shard's chunks are served now (a failed-over shard's by its
// successor).
absl::StatusOr<JobParameters> ReadJobParameters(
    const LocalCluster& cluster, const std::string& job,
    const std::vector<std::string>& addresses);

}  // namespace ps

#endif  // TESTS_JOB_PARAMETERS_H_
