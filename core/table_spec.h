// The checks on a job's sparse tables (JobSpec.tables, proto/job.proto) and
// their defaults: the coordinator runs both at submit, the shard checks
// again at registration, so a table reaches neither in a shape it cannot
// serve.
//
//   std::vector<std::string> problems = TableProblems(spec);
//   // "tables[0].dim: must be in [1, 4096], got 0"
//   for (TableSpec& t : *spec.mutable_tables()) ApplyTableDefaults(&t);
#ifndef CORE_TABLE_SPEC_H_
#define CORE_TABLE_SPEC_H_

#include <cstdint>
#include <string>
#include <vector>

#include "proto/job.pb.h"

namespace ps {

inline constexpr size_t kMaxTableNameLength = 64;
inline constexpr uint32_t kMaxTables = 64;
inline constexpr uint32_t kMaxTableAdmitAfter = 1000000;
inline constexpr uint32_t kMaxTableHotIds = 1000;
inline constexpr uint32_t kMaxRowStaleness = 64;
inline constexpr uint64_t kMaxRowCacheBytes = uint64_t{64} << 30;
// CheckpointSpec.tables_full_every: the default, and the most.
inline constexpr uint32_t kDefaultTablesFullEvery = 10;
inline constexpr uint32_t kMaxTablesFullEvery = 100;
// Bytes a worker's hot-row cache accounts per row besides its floats: its
// entry (id, version, frequency, links) and about two index slots.
inline constexpr uint64_t kRowCacheOverheadBytes = 64;

// Every problem with spec.tables, each "tables[i].field: reason", and with
// the CTR model's reference to its table ("model.ctr.table: ...",
// "model.ctr.embedding_dim: ..."). Empty means valid. Fields left at zero
// that have defaults are fine. Also checkpoint.tables_full_every.
std::vector<std::string> TableProblems(const JobSpec& spec);

// CheckpointSpec.tables_full_every with its default applied: 1 = every
// checkpoint of the tables full.
uint32_t TablesFullEvery(const CheckpointSpec& spec);

// `t` with the documented defaults filled in: admit_after, hot_ids, the
// initializer (NORMAL, kDefaultTableInitScale) and the optimizer's.
void ApplyTableDefaults(TableSpec* t);

}  // namespace ps

#endif  // CORE_TABLE_SPEC_H_
