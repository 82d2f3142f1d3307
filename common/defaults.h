// Every default value of the configuration, written once. Each constant is
// also documented in the field comment of the proto field it fills (the
// "Default N" there); common/defaults_test.cc checks that the two agree.
// Readers: common/config.cc (psd and workerd files), the coordinator's job
// defaults, PsClientOptions, TrainerOptions, ShardOptions, psctl, psbench.
//
//   if (c.rpc_max_attempts() == 0) {
//     c.set_rpc_max_attempts(kDefaultRpcMaxAttempts);
//   }
#ifndef COMMON_DEFAULTS_H_
#define COMMON_DEFAULTS_H_

#include <cstddef>
#include <cstdint>

namespace ps {

// ---- PsdConfig (proto/cluster.proto) ---------------------------------------
inline constexpr char kDefaultListenAddress[] = "127.0.0.1:0";
inline constexpr uint32_t kDefaultMaxMessageBytes = 4u << 20;      // 4 MiB
inline constexpr uint64_t kDefaultMemoryBudgetBytes = 8ull << 30;  // 8 GiB
inline constexpr uint32_t kDefaultWorkerTimeoutMs = 10000;
inline constexpr uint32_t kDefaultProgressHistoryRows = 1000;
inline constexpr uint32_t kDefaultShardAddressRefreshMs = 100;
inline constexpr uint32_t kDefaultSucceededJobsKept = 4;

// ---- WorkerdConfig (proto/cluster.proto) -----------------------------------
inline constexpr char kDefaultDevice[] = "cpu:0";
inline constexpr float kDefaultDeviceWeight = 1.0f;
inline constexpr char kDefaultDataDir[] = "/usr/share/datasets/fashion-mnist";
inline constexpr uint32_t kDefaultThreadsPerDevice = 1;
inline constexpr char kDefaultCpuKernels[] = "auto";
// The daemon has always run with 1 (config loading); TrainerOptions said 2.
inline constexpr uint32_t kDefaultLoaderThreads = 1;
inline constexpr uint32_t kDefaultPrefetchBatches = 4;
inline constexpr uint32_t kDefaultHeartbeatIntervalMs = 1000;
inline constexpr uint32_t kDefaultRpcDeadlineMs = 30000;
// With the backoff below, about 13 s of retries: enough to ride through a
// shard restart. (PsClientOptions said 8; workerd always ran with 12.)
inline constexpr uint32_t kDefaultRpcMaxAttempts = 12;
inline constexpr uint32_t kDefaultRpcInitialBackoffMs = 50;
inline constexpr uint32_t kDefaultRpcMaxBackoffMs = 2000;
inline constexpr uint32_t kDefaultMaxInflightPerShard = 4;
// 256 KiB: small requests let a shard answer the first of a step while the
// rest are on the wire (docs/SCALING.md); not slower on loopback.
inline constexpr uint32_t kDefaultMaxRequestBytes = 256u << 10;
inline constexpr uint32_t kDefaultChannelsPerShard = 2;
// link_rate_mbit (PsdConfig, WorkerdConfig): at most 400 Gbit/s.
inline constexpr uint32_t kMaxLinkRateMbit = 400000;
// PsClientOptions.delta_pulls (WorkerdConfig.disable_delta_pulls negates).
inline constexpr bool kDefaultDeltaPulls = true;
// Overlapped steps: layers are held until this many gradient bytes are held,
// then pushed in one request per shard (small tensors fused).
inline constexpr uint32_t kDefaultFusionBytes = 64u << 10;  // 64 KiB
// A local (NCCL) gradient reduce that has not finished by then is reported
// as failed instead of hanging the step.
inline constexpr uint32_t kDefaultLocalReduceTimeoutMs = 60000;
// How often a worker asks where a shard that keeps failing is now.
inline constexpr uint32_t kDefaultShardLocateIntervalMs = 200;

// ---- JobSpec (proto/job.proto) ---------------------------------------------
inline constexpr uint32_t kDefaultStepDeadlineMs = 60000;
// Replicated jobs (JobSpec.replication > 1): a primary's forward to a
// backup, its deadline (doubled after each forward that ran out of time, up
// to the max, and halved after each success) and the wait before a failed
// one is tried again; the coordinator's heartbeat to the shards and the
// missed heartbeats after which it fails a shard over to its backups.
inline constexpr uint32_t kDefaultReplicateDeadlineMs = 1000;
inline constexpr uint32_t kDefaultReplicateMaxDeadlineMs = 8000;
inline constexpr uint32_t kDefaultReplicateRetryMs = 50;
inline constexpr uint32_t kDefaultShardHeartbeatMs = 100;
inline constexpr uint32_t kDefaultShardHeartbeatMisses = 3;
inline constexpr uint64_t kDefaultPartitionBytes = 1u << 20;  // 1 MiB
// OptimizerSpec's optional fields: the coordinator fills them in at submit
// and the shard's optimizer falls back to them for specs that bypass it.
inline constexpr float kDefaultAdamBeta1 = 0.9f;
inline constexpr float kDefaultAdamBeta2 = 0.999f;
inline constexpr float kDefaultAdamEpsilon = 1e-8f;
inline constexpr float kDefaultAdagradEpsilon = 1e-10f;
// WireSpec: the format by name (WireFormat in proto/job.proto; this header
// does not depend on the protos) and the top-k fraction (1 = dense).
inline constexpr char kDefaultWireFormat[] = "FP32";
inline constexpr float kDefaultTopkFraction = 1.0f;
// FTRL's beta (OptimizerSpec.ftrl_beta).
inline constexpr float kDefaultFtrlBeta = 1.0f;
// CtrModel: Criteo's 26 categorical and 13 integer features; hidden layers
// [256, 128] when none are given.
inline constexpr uint32_t kDefaultCtrFields = 26;
inline constexpr uint32_t kDefaultCtrDenseFeatures = 13;
inline constexpr uint32_t kDefaultCtrHidden[] = {256, 128};
// ConvLayer.pool: 2 x 2 max pooling after each conv layer.
inline constexpr uint32_t kDefaultCnnPool = 2;
// TableSpec: admission after this many pushes, hottest ids reported, and the
// initializer when none is given (NORMAL with this scale).
inline constexpr uint32_t kDefaultTableAdmitAfter = 1;
inline constexpr uint32_t kDefaultTableHotIds = 10;
inline constexpr float kDefaultTableInitScale = 0.01f;
// TableSpec.row_cache_bytes when max_row_staleness > 0 leaves it 0.
inline constexpr uint64_t kDefaultRowCacheBytes = uint64_t{64} << 20;

// ---- psctl (tools/psctl/psctl.cc) -------------------------------------------
// How long psctl waits for the cluster (--connect-timeout, seconds).
inline constexpr uint32_t kDefaultConnectTimeoutSeconds = 4;

}  // namespace ps

#endif  // COMMON_DEFAULTS_H_
