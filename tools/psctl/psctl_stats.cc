#include "tools/psctl/psctl_stats.h"

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "proto/ps.grpc.pb.h"
#include "tools/psctl/psctl_tables.h"

namespace ps {
namespace psctl {
namespace {

// Each shard's answer (valid where its status is OK).
struct ShardAnswers {
  std::vector<ShardStats> stats;
  std::vector<absl::Status> status;
};

// Asks every shard at once; each call has the connect deadline. Blocks until
// all have answered or failed.
ShardAnswers AskShards(const Connection& c,
                       const std::vector<std::string>& addresses,
                       const std::string& job_id) {
  const size_t n = addresses.size();
  ShardAnswers answers;
  answers.stats.resize(n);
  answers.status.resize(n);
  std::vector<std::unique_ptr<ParameterServer::Stub>> stubs;
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  StatsRequest req;
  req.set_job_id(job_id);
  absl::Mutex mu;
  size_t done = 0;  // guarded by mu
  for (size_t i = 0; i < n; ++i) {
    stubs.push_back(
        ParameterServer::NewStub(c.security.NewChannel(addresses[i])));
    contexts.push_back(std::make_unique<grpc::ClientContext>());
    contexts.back()->set_deadline(
        absl::ToChronoTime(absl::Now() + c.connect_timeout));
    contexts.back()->set_wait_for_ready(true);
    c.security.Authorize(contexts.back().get());
    stubs.back()->async()->Stats(contexts.back().get(), &req, &answers.stats[i],
                                 [&, i](grpc::Status s) {
                                   absl::MutexLock l(&mu);
                                   answers.status[i] = FromGrpcStatus(s);
                                   ++done;
                                 });
  }
  absl::MutexLock l(&mu);
  auto all = [&]() { return done == n; };
  mu.Await(absl::Condition(&all));
  return answers;
}

// One table row: the shard's totals over its jobs. WIRE_B/STEP: bytes in
// and out per worker step (summed over jobs); RATIO: dense FP32 bytes over
// wire bytes, both directions ("-" before any traffic).
std::string FormatRow(const ShardStats& s, const std::string& address) {
  uint64_t pushes = 0, pulls = 0, in = 0, outb = 0, dup = 0, stale = 0, rej = 0;
  uint64_t dense = 0;
  double p50 = 0, p99 = 0, per_step = 0;
  std::vector<std::string> missing;
  for (const JobStats& j : s.job_stats()) {
    pushes += j.pushes();
    pulls += j.pulls();
    in += j.bytes_in();
    outb += j.bytes_out();
    dense += j.dense_bytes_in() + j.dense_bytes_out();
    per_step += j.wire_bytes_in_per_step() + j.wire_bytes_out_per_step();
    dup += j.duplicates();
    stale += j.stale_pushes();
    for (const auto& [reason, count] : j.rejected()) rej += count;
    p50 = std::max(p50, j.apply_latency_p50_us());
    p99 = std::max(p99, j.apply_latency_p99_us());
    for (uint32_t w : j.missing_workers())
      missing.push_back(absl::StrCat(j.job_id(), ":w", w));
  }
  for (const auto& [reason, count] : s.rejected()) rej += count;
  const std::string ratio =
      in + outb == 0
          ? "-"
          : absl::StrFormat("%.2f", static_cast<double>(dense) /
                                        static_cast<double>(in + outb));
  return absl::StrFormat(
      "%-5d %-21s %8.1f %4d %6d %10d %9d %9d %10d %10d %8.1f %8.1f %5d %5d "
      "%4d %11.0f %6s %s\n",
      s.shard_id(), address, s.uptime_s(), s.jobs(), s.chunks(), s.bytes_held(),
      pushes, pulls, in, outb, p50, p99, dup, stale, rej, per_step, ratio,
      missing.empty() ? "-" : absl::StrJoin(missing, ","));
}

// Replicated jobs (JobSpec.replication > 1): one line per shard and job,
// "" when no job is replicated (the table then reads as it always did).
std::string FormatReplicas(const std::vector<const ShardStats*>& shards) {
  std::string out;
  for (const ShardStats* s : shards) {
    for (const JobStats& j : s->job_stats()) {
      if (j.replica_epoch() == 0 && j.backup_chunks() == 0 &&
          j.replica_forwards() == 0) {
        continue;
      }
      absl::StrAppendFormat(
          &out,
          "replicas: shard %d job %s: %d of %d chunks backups, %d forwards "
          "acknowledged, %d backups dropped, epoch %d\n",
          s->shard_id(), j.job_id(), j.backup_chunks(), j.chunks(),
          j.replica_forwards(), j.replica_drops(), j.replica_epoch());
      if (j.replica_joining()) {
        absl::StrAppendFormat(
            &out,
            "replicas: shard %d job %s: rejoining, copied %d of %d chunks in\n",
            s->shard_id(), j.job_id(), j.replica_copied_chunks(),
            j.backup_chunks());
      }
    }
  }
  return out;
}

void PrintTable(const ShardAnswers& answers,
                const std::vector<std::string>& addresses,
                const TableViewOptions& tables, std::ostream& out) {
  out << absl::StrFormat(
      "%-5s %-21s %8s %4s %6s %10s %9s %9s %10s %10s %8s %8s %5s %5s %4s %11s "
      "%6s %s\n",
      "SHARD", "ADDRESS", "UPTIME_S", "JOBS", "CHUNKS", "BYTES", "PUSHES",
      "PULLS", "BYTES_IN", "BYTES_OUT", "P50_US", "P99_US", "DUP", "STALE",
      "REJ", "WIRE_B/STEP", "RATIO", "MISSING");
  std::vector<const ShardStats*> answered;
  for (size_t i = 0; i < addresses.size(); ++i) {
    if (!answers.status[i].ok()) continue;
    out << FormatRow(answers.stats[i], addresses[i]);
    answered.push_back(&answers.stats[i]);
  }
  out << FormatTableStats(answered, tables);
  out << FormatReplicas(answered);
}

void PrintJson(const ShardAnswers& answers, std::ostream& out) {
  out << "[";
  for (size_t i = 0; i < answers.stats.size(); ++i) {
    if (i) out << ",";
    out << (answers.status[i].ok() ? ToJson(answers.stats[i]) : "null");
  }
  out << "]\n";
}

}  // namespace

int Stats(const Args& a, std::ostream& out, std::ostream& err) {
  TableViewOptions tables;
  absl::StatusOr<uint32_t> hot =
      ParseHotIds(FlagOr(a, "--hot", ""), kDefaultHotIdsShown);
  if (!hot.ok()) {
    err << "psctl stats: " << hot.status().message() << "\n";
    return kExitUsage;
  }
  tables.hot_ids = *hot;
  absl::StatusOr<Connection> c = Connect(a, /*need_cluster=*/true);
  if (!c.ok()) return ReportConnectFailure(c.status(), err);
  absl::StatusOr<std::vector<std::string>> addresses =
      ResolveShardAddresses(c->cluster, absl::Now() + c->connect_timeout);
  if (!addresses.ok()) {
    err << "psctl stats: " << addresses.status().message() << "\n";
    return kExitUnreachable;
  }
  const ShardAnswers answers =
      AskShards(*c, *addresses, FlagOr(a, "--job", ""));
  int rc = kExitOk;
  for (size_t i = 0; i < addresses->size(); ++i) {
    if (!answers.status[i].ok()) {
      err << "psctl stats: shard " << i << " at " << (*addresses)[i] << ": "
          << answers.status[i].message() << "\n";
      // A refused token is a usage error (2), not an unreachable shard (3).
      if (rc == kExitOk) rc = ExitCodeFor(answers.status[i]);
    }
  }
  if (Has(a, "--json")) {
    PrintJson(answers, out);
  } else {
    PrintTable(answers, *addresses, tables, out);
  }
  return rc;
}

}  // namespace psctl
}  // namespace ps
