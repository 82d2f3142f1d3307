// psctl export of a CTR job's sparse table on real daemons (2 psd, 2
// workerd): the rows streamed from the shards equal what the shards serve,
// bit for bit (every exported id pulled back through SparseExchange, and
// the count equal to the shards' stored rows); numpy reads the file; the
// --tables-dir form and the stopped shards' checkpoints (--from-checkpoint)
// give the same rows; bad input exits 2 and leaves nothing behind.
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/security.h"
#include "core/npz_reader.h"
#include "core/sparse_ids.h"
#include "gtest/gtest.h"
#include "proto/ps.grpc.pb.h"
#include "tests/job_parameters.h"
#include "tests/local_cluster.h"
#include "tests/subprocess.h"
#include "tests/testing/cluster_fixture.h"
#include "tests/testing/ctr_job.h"

namespace ps {
namespace {

// CI-sized: 40 steps of 2 x 128 examples, BSP, checkpoints every 10 steps.
std::string ExportJob() {
  CtrJob job;
  job.name = "ctr-export";
  job.dim = 4;
  job.hidden = {16};
  job.batch_size = 128;
  job.synthetic_train = 10240;
  job.synthetic_test = 1024;
  job.partition_bytes = 0;
  job.seed = 5;
  job.extra = "checkpoint { every_steps: 10 }";
  return CtrJobSpec(job);
}

// id -> the row's float bits.
using Rows = std::map<uint64_t, std::vector<uint32_t>>;

bool Exists(const std::string& path) {
  return ::access(path.c_str(), F_OK) == 0;
}

// The rows of arrays prefix + "ids" / prefix + "values" of an .npz file.
absl::Status ReadRows(const std::string& path, const std::string& prefix,
                      uint32_t dim, Rows* rows) {
  absl::StatusOr<std::vector<NpyArray>> arrays = ReadNpzFile(path);
  if (!arrays.ok()) return arrays.status();
  const NpyArray *ids = nullptr, *values = nullptr;
  for (const NpyArray& a : *arrays) {
    if (a.name == prefix + "ids") ids = &a;
    if (a.name == prefix + "values") values = &a;
  }
  if (ids == nullptr || values == nullptr) {
    return absl::NotFoundError(absl::StrCat(path, ": no ", prefix, "ids"));
  }
  const size_t n = ids->data.size() / 8;
  if (ids->descr != "<u8" || values->descr != "<f4" ||
      values->shape != std::vector<uint64_t>{n, dim} ||
      values->data.size() != n * dim * 4) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": bad arrays"));
  }
  for (size_t i = 0; i < n; ++i) {
    uint64_t id;
    std::memcpy(&id, ids->data.data() + 8 * i, 8);
    std::vector<uint32_t> bits(dim);
    std::memcpy(bits.data(), values->data.data() + 4 * dim * i, 4 * dim);
    if (!rows->emplace(id, bits).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": id ", id, " appears twice"));
    }
  }
  return absl::OkStatus();
}

// The rows of `rows`' ids as shard `s` serves them (a pull as worker 0).
absl::StatusOr<Rows> PullFromShard(const std::string& address,
                                   const std::string& job, uint32_t shard,
                                   uint32_t shards, uint32_t dim,
                                   const Rows& rows) {
  SparseExchangeRequest req;
  req.set_job_id(job);
  SparseRows* pull = req.add_pull();
  pull->set_table("emb");
  std::vector<uint64_t> ids;
  for (const auto& [id, bits] : rows) {
    if (ShardForId(id, shards) == shard) ids.push_back(id);
  }
  pull->set_ids(
      std::string(reinterpret_cast<const char*>(ids.data()), ids.size() * 8));
  Security security;
  auto stub = ParameterServer::NewStub(security.NewChannel(address));
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
  SparseExchangeResponse resp;
  grpc::Status st = stub->SparseExchange(&ctx, req, &resp);
  if (!st.ok()) return absl::UnavailableError(st.error_message());
  Rows out;
  const std::string& v = resp.rows(0).values();
  for (size_t i = 0; i < ids.size(); ++i) {
    std::vector<uint32_t> bits(dim);
    std::memcpy(bits.data(), v.data() + 4 * dim * i, 4 * dim);
    out[ids[i]] = bits;
  }
  return out;
}

uint64_t StoredRows(const std::string& address, const std::string& job) {
  absl::StatusOr<JobStats> s = ReadShardJobStats(address, job);
  if (!s.ok() || s->tables_size() != 1) return 0;
  return s->tables(0).rows();
}

TEST(TableExportTest, RowsEqualTheShardsAndSurviveTheirStop) {
  const std::string dir = TestDir("table_export");
  LocalClusterOptions o;
  o.psd_extra = "checkpoint_dir: \"ckpt\"";
  LocalCluster cluster(dir, o);
  ASSERT_TRUE(cluster.Start().ok());
  absl::StatusOr<CommandResult> run =
      RunJob(cluster, ExportJob(), absl::Seconds(200));
  ASSERT_TRUE(run.ok()) << run.status();
  ASSERT_EQ(run->exit_code, 0) << run->out << run->err;
  const std::string job = SummaryField(run->out, "job");

  // From the running shards.
  const std::string out = dir + "/live.npz";
  absl::StatusOr<CommandResult> ex = cluster.Psctl({"export", job, "-o", out});
  ASSERT_TRUE(ex.ok());
  ASSERT_EQ(ex->exit_code, 0) << ex->out << ex->err;
  EXPECT_NE(ex->out.find("1 sparse tables"), std::string::npos) << ex->out;
  Rows live;
  ASSERT_TRUE(ReadRows(out, "tables/emb/", 4, &live).ok());
  uint64_t stored = 0;
  for (uint32_t s = 0; s < 2; ++s) {
    absl::StatusOr<std::string> addr =
        WaitForFile(absl::StrCat(dir, "/s", s, ".addr"), absl::Seconds(1));
    ASSERT_TRUE(addr.ok());
    stored += StoredRows(*addr, job);
    absl::StatusOr<Rows> served = PullFromShard(*addr, job, s, 2, 4, live);
    ASSERT_TRUE(served.ok()) << served.status();
    for (const auto& [id, bits] : *served) {
      ASSERT_EQ(bits, live.at(id)) << "id " << id << " shard " << s;
    }
  }
  EXPECT_GT(live.size(), 1000u);
  EXPECT_EQ(live.size(), stored);

  // numpy reads it: shapes, dtypes, unique ids, the dense tensors and spec.
  const std::string check = dir + "/check.py";
  std::ofstream(check)
      << "import json, sys, numpy\n"
         "z = numpy.load(sys.argv[1])\n"
         "ids, v = z['tables/emb/ids'], z['tables/emb/values']\n"
         "assert ids.dtype == numpy.uint64 and v.dtype == numpy.float32\n"
         "assert v.shape == (len(ids), 4) and len(set(ids.tolist())) == "
         "len(ids)\n"
         "assert json.loads(z['__job_spec__'].item())['tables'][0]['name'] "
         "== 'emb'\n"
         "print(len(ids))\n";
  absl::StatusOr<CommandResult> py =
      RunCommand({"/usr/bin/python3", check, out}, absl::Seconds(60));
  ASSERT_TRUE(py.ok());
  EXPECT_EQ(py->exit_code, 0) << py->err;
  EXPECT_EQ(py->out, absl::StrCat(live.size(), "\n"));

  // One file per table and shard.
  const std::string tdir = dir + "/rows";
  ex = cluster.Psctl(
      {"export", job, "-o", dir + "/dense.npz", "--tables-dir", tdir});
  ASSERT_TRUE(ex.ok());
  ASSERT_EQ(ex->exit_code, 0) << ex->err;
  Rows split;
  for (int s = 0; s < 2; ++s) {
    ASSERT_TRUE(
        ReadRows(absl::StrCat(tdir, "/emb.shard", s, ".npz"), "", 4, &split)
            .ok());
  }
  EXPECT_EQ(split, live);
  ex = cluster.Psctl({"export", job, "-o", dir + "/dense2.npz", "--tables-dir",
                      tdir});  // exists: refused
  ASSERT_TRUE(ex.ok());
  EXPECT_EQ(ex->exit_code, 2) << ex->err;
  EXPECT_FALSE(Exists(dir + "/dense2.npz"));

  // Bad input: exit 2 naming it, nothing under the output name.
  ex = cluster.Psctl({"export", "job-999999", "-o", dir + "/x.npz"});
  ASSERT_TRUE(ex.ok());
  EXPECT_EQ(ex->exit_code, 2) << ex->err;
  EXPECT_NE(ex->err.find("job-999999"), std::string::npos) << ex->err;
  ex = cluster.Psctl({"export", job, "-o", dir + "/no/such/dir/x.npz"});
  ASSERT_TRUE(ex.ok());
  EXPECT_EQ(ex->exit_code, 2) << ex->err;
  EXPECT_NE(ex->err.find("no/such/dir/x.npz"), std::string::npos) << ex->err;
  EXPECT_FALSE(Exists(dir + "/x.npz"));

  // The stopped shards' checkpoints (the last one written at stop) hold
  // the same rows.
  ASSERT_TRUE(cluster.Stop().ok());
  const std::string ck = dir + "/ck.npz";
  ex = cluster.Psctl(
      {"export", job, "--from-checkpoint", dir + "/ckpt", "-o", ck});
  ASSERT_TRUE(ex.ok());
  ASSERT_EQ(ex->exit_code, 0) << ex->out << ex->err;
  Rows from_ck;
  ASSERT_TRUE(ReadRows(ck, "tables/emb/", 4, &from_ck).ok());
  EXPECT_EQ(from_ck, live);

  // A corrupt tables file: exit 2 naming it, no output.
  std::vector<std::string> tables_files;
  absl::StatusOr<CommandResult> ls = RunCommand(
      {"/bin/sh", "-c", absl::StrCat("ls ", dir, "/ckpt/*.shard1.*.tables")},
      absl::Seconds(10));
  ASSERT_TRUE(ls.ok());
  ASSERT_FALSE(ls->out.empty());
  for (size_t at = 0, nl; (nl = ls->out.find('\n', at)) != std::string::npos;
       at = nl + 1) {
    const std::string f = ls->out.substr(at, nl - at);
    std::fstream file(f, std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(200);
    file.put('\x5a');
  }
  ex = cluster.Psctl({"export", job, "--from-checkpoint", dir + "/ckpt", "-o",
                      dir + "/bad.npz"});
  ASSERT_TRUE(ex.ok());
  EXPECT_EQ(ex->exit_code, 2) << ex->out << ex->err;
  EXPECT_NE(ex->err.find(".tables"), std::string::npos) << ex->err;
  EXPECT_FALSE(Exists(dir + "/bad.npz"));
}

}  // namespace
}  // namespace ps
