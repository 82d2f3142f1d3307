// table_fill: fills a sparse table on a running cluster with N rows, for
// measuring psctl export's table streaming (docs/OPERATIONS.md "Sparse
// tables"). Submits a one-worker ASP job with a tiny custom dense model and
// a table of `--dim` floats per row (SGD: no optimizer state), joins it as
// its worker, pushes ids 0 .. N-1 once each straight to their shards
// (SparseExchange, at most 3 MiB of rows per call), reports the job finished
// (it SUCCEEDED and stays on the shards) and prints its id.
//
//   table_fill --cluster=cluster.pbtxt --rows=10000000 --dim=16
#include <algorithm>
#include <cstdint>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/coordinator_client.h"
#include "common/status_macros.h"
#include "common/text_proto.h"
#include "core/sparse_ids.h"
#include "proto/ps.grpc.pb.h"
#include "worker/joined_worker.h"

ABSL_FLAG(std::string, cluster, "", "cluster file");
ABSL_FLAG(uint64_t, rows, 1000000, "rows to create");
ABSL_FLAG(uint32_t, dim, 16, "floats per row");

namespace ps {
namespace {

// Rows per SparseExchange: under gRPC's 4 MiB message limit.
constexpr size_t kCallBytes = 3 << 20;

absl::Status Push(ParameterServer::Stub& stub, const Connection& c,
                  const std::string& job, uint64_t step,
                  const std::vector<uint64_t>& ids, uint32_t dim) {
  SparseExchangeRequest req;
  req.set_job_id(job);
  req.set_worker(0);
  req.set_step(step);
  req.set_push(true);
  SparseRows* g = req.add_gradients();
  g->set_table("emb");
  g->set_ids(
      std::string(reinterpret_cast<const char*>(ids.data()), ids.size() * 8));
  std::vector<float> grads(ids.size() * dim);
  for (size_t i = 0; i < grads.size(); ++i) grads[i] = 0.001f * (i % 977);
  g->set_values(std::string(reinterpret_cast<const char*>(grads.data()),
                            grads.size() * 4));
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(120)));
  c.security.Authorize(&ctx);
  SparseExchangeResponse resp;
  grpc::Status st = stub.SparseExchange(&ctx, req, &resp);
  if (!st.ok()) return absl::UnavailableError(st.error_message());
  return absl::OkStatus();
}

absl::Status Run() {
  const uint64_t rows = absl::GetFlag(FLAGS_rows);
  const uint32_t dim = absl::GetFlag(FLAGS_dim);
  const size_t per_call = std::max<size_t>(kCallBytes / (8 + 4 * dim), 1);
  ConnectOptions o;
  o.cluster_file = absl::GetFlag(FLAGS_cluster);
  PS_ASSIGN_OR_RETURN(Connection c, ConnectCoordinator(o));
  CoordinatorClient client(c);
  SubmitJobRequest submit;
  PS_RETURN_IF_ERROR(
      ParseTextProto(absl::StrCat(R"pb(
                                    name: "table-fill"
                                    model {
                                      custom {
                                        tensors {
                                          name: "w"
                                          shape: 1
                                          init { kind: ZEROS }
                                        }
                                      }
                                    }
                                    tables { name: "emb" dim:)pb",
                                  dim, R"pb(
          init { kind: ZEROS }
          optimizer { kind: SGD learning_rate: 1 }
        }
                                 data { batch_size: 1 }
        optimizer { kind: SGD learning_rate: 0.1 }
        consistency { mode: ASP }
        num_workers: 1
      )pb"),
                     "spec", submit.mutable_spec()));
  SubmitJobResponse submitted;
  PS_RETURN_IF_ERROR(
      client.Call(&Coordinator::Stub::SubmitJob, submit, &submitted));
  JoinOptions jo;
  jo.job_id = submitted.job_id();
  PS_ASSIGN_OR_RETURN(std::unique_ptr<JoinedWorker> w,
                      JoinedWorker::Join(c, jo));
  const Assignment& a = w->assignment();
  const uint32_t shards = a.shard_addresses_size();
  std::vector<std::unique_ptr<ParameterServer::Stub>> stubs;
  for (const std::string& addr : a.shard_addresses()) {
    stubs.push_back(ParameterServer::NewStub(c.security.NewChannel(addr)));
  }
  std::vector<std::vector<uint64_t>> pending(shards);
  std::vector<uint64_t> steps(shards, 0);
  const absl::Time start = absl::Now();
  for (uint64_t id = 0; id < rows; ++id) {
    const uint32_t s = ShardForId(id, shards);
    pending[s].push_back(id);
    if (pending[s].size() == per_call || id + 1 == rows) {
      for (uint32_t t = 0; t < shards; ++t) {
        if (pending[t].empty() ||
            (pending[t].size() < per_call && id + 1 < rows)) {
          continue;
        }
        PS_RETURN_IF_ERROR(
            Push(*stubs[t], c, jo.job_id, steps[t]++, pending[t], dim));
        pending[t].clear();
      }
    }
  }
  std::cerr << "filled " << rows << " rows in "
            << absl::ToDoubleSeconds(absl::Now() - start) << " s\n";
  Progress p;
  p.set_step(1);
  PS_RETURN_IF_ERROR(w->Report(p, /*finished=*/true, ""));
  w->Close();
  std::cout << jo.job_id << "\n";
  return absl::OkStatus();
}

}  // namespace
}  // namespace ps

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  absl::Status st = ps::Run();
  if (!st.ok()) {
    std::cerr << "table_fill: " << st << "\n";
    return 1;
  }
  return 0;
}
