// TLS, mutual TLS and the bearer token over real daemons: two psd and one
// workerd whose cluster file turns on mTLS and a token, with certificates
// made by `openssl` at test time (a CA, a server certificate for 127.0.0.1 /
// localhost, a client certificate, and a second CA with its own client).
//
// Checks that an authorised client works (psctl list/stats, PushPull through
// PsClient, a synthetic job trained by workerd), and that every RPC of both
// services (7 ParameterServer on each shard, 8 Coordinator) refuses
//   plaintext, a client certificate from another CA, TLS without a client
//   certificate (UNAVAILABLE: the handshake fails), and a missing, wrong or
//   extended token, or another auth scheme (UNAUTHENTICATED),
// while the daemons stay up and the job's parameters keep every bit.
#include "common/security.h"

#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/config.h"
#include "common/text_proto.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/coordinator.grpc.pb.h"
#include "proto/ps.grpc.pb.h"
#include "server/coordinator/job_validation.h"
#include "server/coordinator/placement.h"
#include "tests/checksum.h"
#include "tests/local_cluster.h"
#include "worker/client/ps_client.h"

namespace ps {
namespace {

using ::testing::HasSubstr;

constexpr char kToken[] = "ps-test-token-7f3a9c";
constexpr char kJobId[] = "job-sec";
constexpr int kShards = 2;

// Extensions for the CA and the leaf certificates. The server certificate
// also serves as the daemons' client certificate (the coordinator calls the
// other shards with it), hence both key usages.
constexpr char kOpensslConfig[] = R"(
[req]
distinguished_name = dn
prompt = no
[dn]
CN = unused
[ca_ext]
basicConstraints = critical,CA:TRUE
keyUsage = critical,keyCertSign,cRLSign
subjectKeyIdentifier = hash
[server_ext]
basicConstraints = CA:FALSE
keyUsage = critical,digitalSignature,keyEncipherment
extendedKeyUsage = serverAuth,clientAuth
subjectAltName = IP:127.0.0.1,DNS:localhost
[client_ext]
basicConstraints = CA:FALSE
keyUsage = critical,digitalSignature
extendedKeyUsage = clientAuth
)";

absl::Status Openssl(const std::string& dir, std::vector<std::string> args) {
  std::vector<std::string> argv = {"/usr/bin/env", "openssl"};
  argv.insert(argv.end(), args.begin(), args.end());
  absl::StatusOr<CommandResult> r = RunCommand(argv, absl::Seconds(60));
  if (!r.ok()) return r.status();
  if (r->exit_code != 0) {
    return absl::InternalError(absl::StrCat(
        "openssl ", absl::StrJoin(args, " "), ": exit ", r->exit_code, ": ",
        r->err, " (is openssl installed? tools/setup.sh)"));
  }
  return absl::OkStatus();
}

// NAME.key + NAME.pem signed by CA (self-signed when ca is "").
absl::Status MakeCert(const std::string& dir, const std::string& name,
                      const std::string& cn, const std::string& ca,
                      const std::string& extensions) {
  const std::string cnf = dir + "/openssl.cnf";
  const std::string key = absl::StrCat(dir, "/", name, ".key");
  const std::string pem = absl::StrCat(dir, "/", name, ".pem");
  const std::vector<std::string> new_key = {
      "-newkey",   "ec",      "-pkeyopt", "ec_paramgen_curve:prime256v1",
      "-nodes",    "-keyout", key,        "-subj",
      "/CN=" + cn, "-config", cnf};
  if (ca.empty()) {
    std::vector<std::string> args = {"req",         "-x509",    "-days", "2",
                                     "-extensions", extensions, "-out",  pem};
    args.insert(args.end(), new_key.begin(), new_key.end());
    return Openssl(dir, args);
  }
  const std::string csr = absl::StrCat(dir, "/", name, ".csr");
  std::vector<std::string> args = {"req", "-new", "-out", csr};
  args.insert(args.end(), new_key.begin(), new_key.end());
  if (absl::Status s = Openssl(dir, args); !s.ok()) return s;
  static int serial = 100;
  return Openssl(dir, {"x509", "-req", "-in", csr, "-CA",
                       absl::StrCat(dir, "/", ca, ".pem"), "-CAkey",
                       absl::StrCat(dir, "/", ca, ".key"), "-set_serial",
                       absl::StrCat(++serial), "-days", "2", "-extfile", cnf,
                       "-extensions", extensions, "-out", pem});
}

absl::Status MakeCerts(const std::string& dir) {
  absl::Status s = WriteFileAtomically(dir + "/openssl.cnf", kOpensslConfig);
  if (s.ok()) s = MakeCert(dir, "ca", "ps-test-ca", "", "ca_ext");
  if (s.ok()) s = MakeCert(dir, "server", "localhost", "ca", "server_ext");
  if (s.ok()) s = MakeCert(dir, "client", "ps-client", "ca", "client_ext");
  if (s.ok()) s = MakeCert(dir, "other_ca", "ps-other-ca", "", "ca_ext");
  if (s.ok())
    s = MakeCert(dir, "other_client", "ps-client", "other_ca", "client_ext");
  return s;
}

// One way of calling: channel credentials and the token it sends.
struct Client {
  std::string name;
  absl::StatusOr<Security> security;
  grpc::StatusCode want;  // what every RPC must answer
  std::string metadata;   // sent as "authorization" instead of the token
};

// One RPC, called with a realistic request (the registered job, a valid
// push) so that only the credentials can make it fail.
struct Rpc {
  std::string name;
  int shard;  // ParameterServer RPCs: which shard; -1: the Coordinator
  std::function<grpc::Status(ParameterServer::Stub*, Coordinator::Stub*,
                             grpc::ClientContext*)>
      call;
};

class SecurityTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(TestDir("security"));
    set_up_ = new absl::Status(SetUpCluster());
  }
  static void TearDownTestSuite() {
    if (cluster_ != nullptr) {
      absl::Status s = cluster_->Stop();
      EXPECT_TRUE(s.ok()) << s;
    }
    delete cluster_;
    cluster_ = nullptr;
  }
  void SetUp() override { ASSERT_TRUE(set_up_->ok()) << *set_up_; }

  static absl::Status SetUpCluster() {
    const std::string& dir = *dir_;
    absl::Status s = MakeCerts(dir);
    if (s.ok())
      s = WriteFileAtomically(dir + "/token", absl::StrCat(kToken, "\n"));
    // psctl and the test's own clients use the client certificate.
    std::string shards;
    for (int i = 0; i < kShards; ++i) {
      absl::StrAppend(&shards, "shards { address_file: \"s", i, ".addr\" }\n");
    }
    if (s.ok()) {
      s = WriteFileAtomically(
          dir + "/client_cluster.pbtxt",
          absl::StrCat(shards,
                       "coordinator_shard: 0\n"
                       "tls { cert_file: \"client.pem\" key_file: "
                       "\"client.key\" ca_file: \"ca.pem\" mutual: true }\n"
                       "auth_token_file: \"token\"\n"));
    }
    if (!s.ok()) return s;
    LocalClusterOptions options;
    options.shards = kShards;
    options.workers = 1;
    options.cluster_extra =
        "tls { cert_file: \"server.pem\" key_file: \"server.key\" ca_file: "
        "\"ca.pem\" "
        "mutual: true }\nauth_token_file: \"token\"\n";
    cluster_ = new LocalCluster(dir, options);
    if (s = cluster_->Start(); !s.ok()) return s;
    absl::StatusOr<LoadedCluster> client =
        LoadClusterConfig(dir + "/client_cluster.pbtxt");
    if (!client.ok()) return client.status();
    absl::StatusOr<Security> security = Security::FromCluster(client->config);
    if (!security.ok()) return security.status();
    authorised_ = new Security(*std::move(security));
    absl::StatusOr<std::vector<std::string>> addresses =
        ResolveShardAddresses(*client, absl::Now() + absl::Seconds(30));
    if (!addresses.ok()) return addresses.status();
    addresses_ = new std::vector<std::string>(*addresses);
    return RegisterJob();
  }

  // A small job registered on both shards, straight through the
  // ParameterServer service (the coordinator does not know it).
  static absl::Status RegisterJob() {
    JobSpec spec;
    absl::Status s = ParseTextProto(
        R"pb(
          name: "sec"
          model { mlp { input_dim: 16 hidden: 8 num_classes: 4 } }
          data {
            dataset: "synthetic"
            batch_size: 8
            epochs: 1
            synthetic_train: 64
          }
          optimizer { kind: SGD learning_rate: 0.1 }
          consistency { mode: BSP step_deadline_ms: 30000 }
          num_workers: 1
          partition_bytes: 4096
          seed: 3
        )pb",
        "spec", &spec);
    if (!s.ok()) return s;
    ValidationContext ctx;
    ctx.num_shards = kShards;
    absl::StatusOr<JobSpec> normalized = NormalizeJobSpec(spec, ctx);
    if (!normalized.ok()) return normalized.status();
    absl::StatusOr<Placement> placement = PlaceChunks(*normalized, kShards);
    if (!placement.ok()) return placement.status();
    assignment_ = new Assignment;
    assignment_->set_job_id(kJobId);
    *assignment_->mutable_spec() = *normalized;
    *assignment_->mutable_placement() = *placement;
    assignment_->set_num_workers(1);
    for (const std::string& a : *addresses_)
      assignment_->add_shard_addresses(a);
    register_ = new RegisterJobRequest;
    register_->set_job_id(kJobId);
    *register_->mutable_spec() = *normalized;
    *register_->mutable_placement() = *placement;
    register_->set_num_workers(1);
    for (int shard = 0; shard < kShards; ++shard) {
      auto stub = ParameterServer::NewStub(
          authorised_->NewChannel((*addresses_)[shard]));
      grpc::ClientContext ctx;
      ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(20)));
      authorised_->Authorize(&ctx);
      RegisterJobResponse resp;
      grpc::Status st = stub->RegisterJob(&ctx, *register_, &resp);
      if (!st.ok()) {
        return absl::InternalError(absl::StrCat("RegisterJob on shard ", shard,
                                                ": ", st.error_message()));
      }
    }
    return absl::OkStatus();
  }

  static std::unique_ptr<PsClient> NewClient(const Security* security) {
    absl::StatusOr<std::unique_ptr<PsClient>> c =
        PsClient::Create(PsClientOptions(), *assignment_, security);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? *std::move(c) : nullptr;
  }

  static std::vector<float> ReadAll() {
    std::unique_ptr<PsClient> c = NewClient(authorised_);
    if (c == nullptr) return {};
    std::vector<float> p(c->num_parameters());
    absl::Status s = c->Pull(0, absl::MakeSpan(p));
    EXPECT_TRUE(s.ok()) << s;
    return p;
  }

  static absl::StatusOr<CommandResult> Psctl(std::vector<std::string> args) {
    std::vector<std::string> argv = {
        "tools/psctl/psctl", "--cluster=" + *dir_ + "/client_cluster.pbtxt"};
    argv.insert(argv.end(), args.begin(), args.end());
    return RunCommand(argv, absl::Seconds(150));
  }

  static absl::StatusOr<Security> Creds(const std::string& cert,
                                        const std::string& ca,
                                        const std::string& token) {
    TlsConfig tls;
    if (!cert.empty()) {
      tls.set_cert_file(absl::StrCat(*dir_, "/", cert, ".pem"));
      tls.set_key_file(absl::StrCat(*dir_, "/", cert, ".key"));
    }
    if (!ca.empty()) tls.set_ca_file(absl::StrCat(*dir_, "/", ca, ".pem"));
    return Security::FromParts(tls, token);
  }

  // Every RPC of both services, with requests that an authorised client
  // could send and that would change something if they were accepted.
  static std::vector<Rpc> AllRpcs() {
    std::vector<Rpc> rpcs;
    for (int shard = 0; shard < kShards; ++shard) {
      // A zero gradient for the first chunk this shard holds: valid for
      // worker 0 at step 0.
      ChunkData grad;
      for (const ChunkPlacement& c : register_->placement().chunks()) {
        if (static_cast<int>(c.shard()) == shard) {
          grad.set_chunk_id(c.chunk_id());
          grad.set_data(std::string(c.length() * sizeof(float), '\0'));
          break;
        }
      }
      const std::string s = absl::StrCat(" (shard ", shard, ")");
      rpcs.push_back({"RegisterJob" + s, shard, [](auto* ps, auto*, auto* ctx) {
                        RegisterJobRequest req = *register_;
                        req.set_job_id("intruder-job");
                        RegisterJobResponse resp;
                        return ps->RegisterJob(ctx, req, &resp);
                      }});
      rpcs.push_back({"DropJob" + s, shard, [](auto* ps, auto*, auto* ctx) {
                        DropJobRequest req;
                        req.set_job_id(kJobId);
                        DropJobResponse resp;
                        return ps->DropJob(ctx, req, &resp);
                      }});
      rpcs.push_back(
          {"SetMembership" + s, shard, [](auto* ps, auto*, auto* ctx) {
             SetMembershipRequest req;
             req.set_job_id(kJobId);
             req.add_active_workers(0);
             SetMembershipResponse resp;
             return ps->SetMembership(ctx, req, &resp);
           }});
      rpcs.push_back(
          {"PushPull" + s, shard, [grad](auto* ps, auto*, auto* ctx) {
             PushPullRequest req;
             req.set_job_id(kJobId);
             *req.add_gradients() = grad;
             PushPullResponse resp;
             return ps->PushPull(ctx, req, &resp);
           }});
      rpcs.push_back({"Pull" + s, shard, [](auto* ps, auto*, auto* ctx) {
                        PullRequest req;
                        req.set_job_id(kJobId);
                        PullResponse resp;
                        return ps->Pull(ctx, req, &resp);
                      }});
      rpcs.push_back({"Push" + s, shard, [grad](auto* ps, auto*, auto* ctx) {
                        PushRequest req;
                        req.set_job_id(kJobId);
                        *req.add_gradients() = grad;
                        PushResponse resp;
                        return ps->Push(ctx, req, &resp);
                      }});
      rpcs.push_back({"Stats" + s, shard, [](auto* ps, auto*, auto* ctx) {
                        StatsRequest req;
                        ShardStats resp;
                        return ps->Stats(ctx, req, &resp);
                      }});
    }
    rpcs.push_back({"SubmitJob", -1, [](auto*, auto* co, auto* ctx) {
                      SubmitJobRequest req;
                      *req.mutable_spec() = register_->spec();
                      req.mutable_spec()->clear_tensors();
                      req.mutable_spec()->set_name("intruder-job");
                      SubmitJobResponse resp;
                      return co->SubmitJob(ctx, req, &resp);
                    }});
    rpcs.push_back({"GetJob", -1, [](auto*, auto* co, auto* ctx) {
                      GetJobRequest req;
                      req.set_job_id("job-000001");
                      JobStatus resp;
                      return co->GetJob(ctx, req, &resp);
                    }});
    rpcs.push_back({"ListJobs", -1, [](auto*, auto* co, auto* ctx) {
                      ListJobsRequest req;
                      ListJobsResponse resp;
                      return co->ListJobs(ctx, req, &resp);
                    }});
    rpcs.push_back({"CancelJob", -1, [](auto*, auto* co, auto* ctx) {
                      CancelJobRequest req;
                      req.set_job_id("job-000001");
                      CancelJobResponse resp;
                      return co->CancelJob(ctx, req, &resp);
                    }});
    rpcs.push_back({"RegisterWorker", -1, [](auto*, auto* co, auto* ctx) {
                      RegisterWorkerRequest req;
                      req.set_name("worker0");  // would replace the real one
                      req.add_devices("cpu:0");
                      RegisterWorkerResponse resp;
                      return co->RegisterWorker(ctx, req, &resp);
                    }});
    rpcs.push_back({"Heartbeat", -1, [](auto*, auto* co, auto* ctx) {
                      HeartbeatRequest req;
                      req.set_worker_id("w-1");
                      HeartbeatResponse resp;
                      return co->Heartbeat(ctx, req, &resp);
                    }});
    rpcs.push_back({"GetAssignment", -1, [](auto*, auto* co, auto* ctx) {
                      GetAssignmentRequest req;
                      req.set_worker_id("w-1");
                      GetAssignmentResponse resp;
                      return co->GetAssignment(ctx, req, &resp);
                    }});
    rpcs.push_back({"ReportProgress", -1, [](auto*, auto* co, auto* ctx) {
                      ProgressReport req;
                      req.set_worker_id("w-1");
                      req.set_job_id("job-000001");
                      req.set_error("intruder");
                      ProgressReportResponse resp;
                      return co->ReportProgress(ctx, req, &resp);
                    }});
    return rpcs;
  }

  static std::string* dir_;
  static absl::Status* set_up_;
  static LocalCluster* cluster_;
  static Security* authorised_;
  static std::vector<std::string>* addresses_;
  static Assignment* assignment_;
  static RegisterJobRequest* register_;
};

std::string* SecurityTest::dir_ = nullptr;
absl::Status* SecurityTest::set_up_ = nullptr;
LocalCluster* SecurityTest::cluster_ = nullptr;
Security* SecurityTest::authorised_ = nullptr;
std::vector<std::string>* SecurityTest::addresses_ = nullptr;
Assignment* SecurityTest::assignment_ = nullptr;
RegisterJobRequest* SecurityTest::register_ = nullptr;

TEST_F(SecurityTest, DaemonsListenOnLoopbackByDefault) {
  // The psd configs name no listen_address: the default keeps them local.
  for (const std::string& a : *addresses_)
    EXPECT_THAT(a, ::testing::StartsWith("127.0.0.1:"));
}

TEST_F(SecurityTest, AuthorisedClientsWork) {
  absl::StatusOr<CommandResult> list = Psctl({"list"});
  ASSERT_TRUE(list.ok()) << list.status();
  EXPECT_EQ(list->exit_code, 0) << list->out << list->err;
  absl::StatusOr<CommandResult> stats = Psctl({"stats", "--json"});
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->exit_code, 0) << stats->err;
  EXPECT_THAT(stats->out,
              HasSubstr(absl::StrCat("\"job_id\": \"", kJobId, "\"")));

  // psctl with --coordinator still takes TLS and the token from --cluster.
  absl::StatusOr<CommandResult> direct =
      Psctl({"list", "--coordinator=" + (*addresses_)[0]});
  ASSERT_TRUE(direct.ok()) << direct.status();
  EXPECT_EQ(direct->exit_code, 0) << direct->err;

  // One BSP step of the single worker through PsClient: parameters move to
  // version 1 and every shard answers.
  std::unique_ptr<PsClient> client = NewClient(authorised_);
  ASSERT_NE(client, nullptr);
  std::vector<float> params(client->num_parameters()),
      grad(params.size(), 0.5f);
  ASSERT_TRUE(client->Pull(0, absl::MakeSpan(params)).ok());
  std::vector<float> before = params;
  absl::Status s = client->PushPull(0, grad, absl::MakeSpan(params));
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_NE(ParamChecksum(params), ParamChecksum(before))
      << "the step changed nothing";
  EXPECT_EQ(ParamChecksum(ReadAll()), ParamChecksum(params));
}

TEST_F(SecurityTest, EveryRpcRefusesBadCredentials) {
  const std::vector<float> params_before = ReadAll();
  ASSERT_FALSE(params_before.empty());
  std::vector<Client> clients;
  clients.push_back(
      {"plaintext", Creds("", "", kToken), grpc::UNAVAILABLE, ""});
  clients.push_back({"client cert from another CA",
                     Creds("other_client", "ca", kToken), grpc::UNAVAILABLE,
                     ""});
  clients.push_back({"TLS without a client cert", Creds("", "ca", kToken),
                     grpc::UNAVAILABLE, ""});
  clients.push_back(
      {"no token", Creds("client", "ca", ""), grpc::UNAUTHENTICATED, ""});
  clients.push_back({"wrong token",
                     Creds("client", "ca", "ps-test-token-000000"),
                     grpc::UNAUTHENTICATED, ""});
  // Prefix and scheme mistakes a sloppy comparison would let through.
  clients.push_back({"token with a suffix", Creds("client", "ca", ""),
                     grpc::UNAUTHENTICATED,
                     absl::StrCat("Bearer ", kToken, "x")});
  clients.push_back(
      {"token prefix", Creds("client", "ca", ""), grpc::UNAUTHENTICATED,
       absl::StrCat("Bearer ", std::string(kToken).substr(0, 8))});
  clients.push_back({"Basic scheme", Creds("client", "ca", ""),
                     grpc::UNAUTHENTICATED, absl::StrCat("Basic ", kToken)});
  const std::vector<Rpc> rpcs = AllRpcs();
  ASSERT_EQ(rpcs.size(), 7u * kShards + 8u);
  int refused = 0;
  for (const Client& client : clients) {
    ASSERT_TRUE(client.security.ok())
        << client.name << ": " << client.security.status();
    std::vector<std::unique_ptr<ParameterServer::Stub>> ps;
    for (const std::string& a : *addresses_) {
      ps.push_back(ParameterServer::NewStub(client.security->NewChannel(a)));
    }
    auto coordinator =
        Coordinator::NewStub(client.security->NewChannel((*addresses_)[0]));
    for (const Rpc& rpc : rpcs) {
      grpc::ClientContext ctx;
      ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
      client.security->Authorize(&ctx);
      if (!client.metadata.empty())
        ctx.AddMetadata("authorization", client.metadata);
      grpc::Status st = rpc.call(rpc.shard >= 0 ? ps[rpc.shard].get() : nullptr,
                                 coordinator.get(), &ctx);
      EXPECT_EQ(st.error_code(), client.want)
          << client.name << " / " << rpc.name << ": " << st.error_message();
      if (client.want == grpc::UNAUTHENTICATED) {
        EXPECT_THAT(st.error_message(),
                    ::testing::AnyOf(HasSubstr("bearer token"),
                                     HasSubstr("authorization")))
            << client.name << " / " << rpc.name;
      }
      refused += st.error_code() == client.want;
    }
    for (int i = 0; i < kShards; ++i) {
      ASSERT_TRUE(cluster_->shard(i).Alive())
          << "psd " << i << " died after " << client.name;
    }
  }
  EXPECT_EQ(refused, static_cast<int>(clients.size() * rpcs.size()));

  // Nothing of it got through: same parameters, the job still registered,
  // no job submitted, the real worker not replaced.
  EXPECT_EQ(ParamChecksum(ReadAll()), ParamChecksum(params_before));
  absl::StatusOr<CommandResult> list = Psctl({"list"});
  ASSERT_TRUE(list.ok()) << list.status();
  EXPECT_EQ(list->exit_code, 0) << list->err;
  EXPECT_THAT(list->out, ::testing::Not(HasSubstr("intruder")));
  absl::StatusOr<CommandResult> stats = Psctl({"stats", "--json"});
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_THAT(stats->out, ::testing::Not(HasSubstr("intruder")));
  EXPECT_THAT(stats->out, HasSubstr(kJobId)) << "the job was dropped";
  ASSERT_TRUE(cluster_->worker(0).Alive());
}

TEST_F(SecurityTest, PsctlWithoutCredentialsIsRefused) {
  // The daemons' own addresses, but a cluster file without tls/token: psctl
  // reports that it cannot get through, with its "unreachable" exit code.
  ASSERT_TRUE(WriteFileAtomically(*dir_ + "/plain_cluster.pbtxt",
                                  "shards { address_file: \"s0.addr\" }\n"
                                  "shards { address_file: \"s1.addr\" }\n")
                  .ok());
  absl::StatusOr<CommandResult> plain =
      RunCommand({"tools/psctl/psctl",
                  "--cluster=" + *dir_ + "/plain_cluster.pbtxt", "list"},
                 absl::Seconds(60));
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->exit_code, 3) << plain->out << plain->err;
  // TLS but the wrong token: refused as a credentials problem (exit 2).
  ASSERT_TRUE(WriteFileAtomically(*dir_ + "/wrong_token", "nope\n").ok());
  ASSERT_TRUE(WriteFileAtomically(
                  *dir_ + "/wrong_token_cluster.pbtxt",
                  "shards { address_file: \"s0.addr\" }\n"
                  "shards { address_file: \"s1.addr\" }\n"
                  "tls { cert_file: \"client.pem\" key_file: \"client.key\" "
                  "ca_file: \"ca.pem\" mutual: true }\n"
                  "auth_token_file: \"wrong_token\"\n")
                  .ok());
  absl::StatusOr<CommandResult> wrong =
      RunCommand({"tools/psctl/psctl",
                  "--cluster=" + *dir_ + "/wrong_token_cluster.pbtxt", "stats"},
                 absl::Seconds(60));
  ASSERT_TRUE(wrong.ok()) << wrong.status();
  EXPECT_EQ(wrong->exit_code, 2) << wrong->out << wrong->err;
  EXPECT_THAT(wrong->err, HasSubstr("bearer token")) << wrong->err;
  for (int i = 0; i < kShards; ++i) ASSERT_TRUE(cluster_->shard(i).Alive());
}

TEST_F(SecurityTest, WorkerdTrainsASyntheticJobOverTls) {
  ASSERT_TRUE(WriteFileAtomically(*dir_ + "/job.pbtxt", R"pb(
                name: "tls-synthetic"
                model { softmax { input_dim: 784 num_classes: 10 } }
                data {
                  dataset: "synthetic"
                  batch_size: 16
                  epochs: 2
                  synthetic_train: 512
                  synthetic_test: 128
                }
                optimizer { kind: SGD learning_rate: 0.1 }
                consistency { mode: BSP step_deadline_ms: 30000 }
                num_workers: 1
                seed: 9
              )pb")
                  .ok());
  absl::StatusOr<CommandResult> run =
      Psctl({"submit", *dir_ + "/job.pbtxt", "--wait", "--timeout=120"});
  ASSERT_TRUE(run.ok()) << run.status();
  ASSERT_EQ(run->exit_code, 0)
      << run->out << run->err << cluster_->Log("worker0");
  EXPECT_EQ(SummaryField(run->out, "state"), "SUCCEEDED") << run->out;
}

}  // namespace
}  // namespace ps
