// Input hardening over real daemons: a table of malformed requests to both
// services (bad configuration files: tests/bad_config_test.cc).
//
// Requests: two psd run a job that the test itself holds as its only worker
// (registered through the Coordinator, heartbeating in the background).
// Each malformed request must be answered at once with the expected code
// and a message naming the offending field, both daemons must stay up, and
// the job's parameters (read through PsClient) must keep every bit.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/security.h"
#include "common/text_proto.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/coordinator.grpc.pb.h"
#include "proto/ps.grpc.pb.h"
#include "tests/checksum.h"
#include "tests/local_cluster.h"
#include "worker/client/ps_client.h"

namespace ps {
namespace {

using ::testing::HasSubstr;

constexpr int kShards = 2;

std::unique_ptr<grpc::ClientContext> Context(
    absl::Duration timeout = absl::Seconds(10)) {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  return ctx;
}

// What a call came back with. For answers that carry their verdict in the
// response (SubmitJob's problems, Heartbeat's reregister), `text` describes
// the response.
struct Outcome {
  grpc::StatusCode code;
  std::string text;
};

Outcome FromStatus(const grpc::Status& s) {
  return {s.error_code(), s.error_message()};
}

constexpr char kJobSpec[] = R"pb(
  name: "hardening"
  model { mlp { input_dim: 784 hidden: 8 num_classes: 4 } }
  data { dataset: "synthetic" batch_size: 8 epochs: 1 synthetic_train: 64 }
  optimizer { kind: ADAM learning_rate: 0.01 }
  consistency { mode: BSP step_deadline_ms: 60000 }
  num_workers: 1
  partition_bytes: 4096
  seed: 17
)pb";

class HardeningTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = TestDir(
        ::testing::UnitTest::GetInstance()->current_test_info()->name());
  }
  void TearDown() override {
    stop_heartbeats_.Notify();
    if (heartbeats_.joinable()) heartbeats_.join();
    if (cluster_ != nullptr) {
      absl::Status s = cluster_->Stop();
      EXPECT_TRUE(s.ok()) << s;
    }
  }

  // Two psd, no workerd; this test registers as the job's one worker.
  void StartJob() {
    LocalClusterOptions options;
    options.shards = kShards;
    options.workers = 0;
    cluster_ = std::make_unique<LocalCluster>(dir_, options);
    ASSERT_TRUE(cluster_->Start().ok());
    for (int i = 0; i < kShards; ++i) {
      absl::StatusOr<std::string> a =
          WaitForFile(absl::StrCat(dir_, "/s", i, ".addr"), absl::Seconds(30));
      ASSERT_TRUE(a.ok()) << a.status();
      ps_.push_back(ParameterServer::NewStub(security_.NewChannel(*a)));
      if (i == 0) coordinator_ = Coordinator::NewStub(security_.NewChannel(*a));
    }
    // The coordinator opens once it has resolved every shard: UNAVAILABLE
    // until then. There is no event to wait on in another process.
    RegisterWorkerRequest reg;
    reg.set_name("hardening-worker");
    reg.add_devices("cpu:0");
    RegisterWorkerResponse registered;
    grpc::Status st;
    absl::Time give_up = absl::Now() + absl::Seconds(30);
    for (absl::Duration backoff = absl::Milliseconds(20);;
         backoff = backoff * 2) {
      st = coordinator_->RegisterWorker(Context().get(), reg, &registered);
      if (st.error_code() != grpc::UNAVAILABLE || absl::Now() > give_up) break;
      std::this_thread::sleep_for(
          absl::ToChronoMilliseconds(std::min(backoff, absl::Seconds(1))));
    }
    ASSERT_TRUE(st.ok()) << st.error_message();
    worker_id_ = registered.worker_id();
    // Heartbeats keep the test's worker (and so its job) alive.
    heartbeats_ = std::thread([this] {
      while (!stop_heartbeats_.WaitForNotificationWithTimeout(
          absl::Milliseconds(250))) {
        HeartbeatRequest req;
        req.set_worker_id(worker_id_);
        HeartbeatResponse resp;
        (void)coordinator_->Heartbeat(Context().get(), req, &resp);
      }
    });

    SubmitJobRequest submit;
    ASSERT_TRUE(ParseTextProto(kJobSpec, "spec", submit.mutable_spec()).ok());
    SubmitJobResponse submitted;
    st = coordinator_->SubmitJob(Context().get(), submit, &submitted);
    ASSERT_TRUE(st.ok()) << st.error_message();
    ASSERT_FALSE(submitted.job_id().empty())
        << absl::StrJoin(submitted.problems(), "; ");
    GetAssignmentRequest poll;
    poll.set_worker_id(worker_id_);
    poll.set_wait_ms(30000);
    GetAssignmentResponse assigned;
    st = coordinator_->GetAssignment(Context(absl::Seconds(40)).get(), poll,
                                     &assigned);
    ASSERT_TRUE(st.ok()) << st.error_message();
    ASSERT_TRUE(assigned.has_assignment());
    assignment_ = assigned.assignment();
    ASSERT_EQ(assignment_.job_id(), submitted.job_id());
  }

  std::vector<float> ReadAll() {
    absl::StatusOr<std::unique_ptr<PsClient>> c =
        PsClient::Create(PsClientOptions(), assignment_, &security_);
    EXPECT_TRUE(c.ok()) << c.status();
    if (!c.ok()) return {};
    std::vector<float> p((*c)->num_parameters());
    absl::Status s = (*c)->Pull(0, absl::MakeSpan(p));
    EXPECT_TRUE(s.ok()) << s;
    return p;
  }

  // The job's registration as the coordinator sent it, for variations.
  RegisterJobRequest Registration(const std::string& job_id) const {
    RegisterJobRequest r;
    r.set_job_id(job_id);
    *r.mutable_spec() = assignment_.spec();
    *r.mutable_placement() = assignment_.placement();
    r.set_num_workers(assignment_.num_workers());
    return r;
  }

  // A chunk of `shard` and a valid step-0 gradient for it from worker 0.
  const ChunkPlacement& ChunkOn(int shard, int nth = 0) const {
    for (const ChunkPlacement& c : assignment_.placement().chunks()) {
      if (static_cast<int>(c.shard()) == shard && nth-- == 0) return c;
    }
    ADD_FAILURE() << "no chunk " << nth << " on shard " << shard;
    return assignment_.placement().chunks(0);
  }
  ChunkData Gradient(const ChunkPlacement& c, float value = 0.01f) const {
    ChunkData d;
    d.set_chunk_id(c.chunk_id());
    std::vector<float> g(c.length(), value);
    d.set_data(reinterpret_cast<const char*>(g.data()),
               g.size() * sizeof(float));
    return d;
  }
  static void SetFloat(ChunkData* d, size_t i, float v) {
    std::memcpy(d->mutable_data()->data() + i * sizeof(float), &v,
                sizeof(float));
  }

  Outcome Register(const RegisterJobRequest& r) {
    RegisterJobResponse resp;
    return FromStatus(ps_[0]->RegisterJob(Context().get(), r, &resp));
  }
  Outcome PushPull(const PushPullRequest& r) {
    PushPullResponse resp;
    return FromStatus(ps_[0]->PushPull(Context().get(), r, &resp));
  }
  Outcome Submit(const std::string& spec_text) {
    SubmitJobRequest req;
    EXPECT_TRUE(ParseTextProto(spec_text, "spec", req.mutable_spec()).ok())
        << spec_text;
    SubmitJobResponse resp;
    grpc::Status st = coordinator_->SubmitJob(Context().get(), req, &resp);
    if (!st.ok()) return FromStatus(st);
    if (!resp.job_id().empty())
      return {grpc::OK, "accepted as " + resp.job_id()};
    // Refused: the answer lists every problem, "field: reason".
    return {grpc::INVALID_ARGUMENT, absl::StrJoin(resp.problems(), "\n")};
  }

  std::string dir_;
  Security security_;
  std::unique_ptr<LocalCluster> cluster_;
  std::vector<std::unique_ptr<ParameterServer::Stub>> ps_;
  std::unique_ptr<Coordinator::Stub> coordinator_;
  std::string worker_id_;
  Assignment assignment_;
  absl::Notification stop_heartbeats_;
  std::thread heartbeats_;
};

struct RequestCase {
  std::string name;
  std::function<Outcome()> call;
  grpc::StatusCode code;
  std::string mentions;  // in the message
};

TEST_F(HardeningTest, MalformedRequestsAreRefusedAndChangeNothing) {
  ASSERT_NO_FATAL_FAILURE(StartJob());
  const std::string job = assignment_.job_id();
  const std::vector<float> before = ReadAll();
  ASSERT_FALSE(before.empty());
  const ChunkPlacement& c0 = ChunkOn(0);
  const ChunkPlacement& c0b = ChunkOn(0, 1);
  auto push_pull = [&](std::function<void(PushPullRequest*)> corrupt) {
    return [=] {
      PushPullRequest r;
      r.set_job_id(job);
      *r.add_gradients() = Gradient(c0);
      corrupt(&r);
      return PushPull(r);
    };
  };
  auto register_job = [&](std::function<void(RegisterJobRequest*)> corrupt) {
    return [=] {
      RegisterJobRequest r = Registration("h-" + job);
      corrupt(&r);
      return Register(r);
    };
  };
  auto mlp = [](const std::string& fields) {
    return absl::StrCat(
        "model { mlp { input_dim: 32 hidden: 16 num_classes: 4 } }\n"
        "data { dataset: \"synthetic\" batch_size: 8 epochs: 1 }\n"
        "optimizer { kind: SGD learning_rate: 0.1 }\nconsistency { mode: BSP "
        "}\n",
        fields);
  };
  const uint32_t kU32Max = std::numeric_limits<uint32_t>::max();

  std::vector<RequestCase> cases = {
      // ParameterServer.RegisterJob
      {"RegisterJob: placement disagrees with the spec",
       register_job([](RegisterJobRequest* r) {
         auto* c = r->mutable_placement()->mutable_chunks(0);
         c->set_length(c->length() + 1);
       }),
       grpc::INVALID_ARGUMENT, "placement.chunks[0]"},
      {"RegisterJob: placement with a chunk on shard 7 of 2",
       register_job([](RegisterJobRequest* r) {
         r->mutable_placement()->mutable_chunks(1)->set_shard(7);
       }),
       grpc::INVALID_ARGUMENT, "placement.chunks[1].shard"},
      {"RegisterJob: placement for zero shards",
       register_job([](RegisterJobRequest* r) {
         r->mutable_placement()->set_num_shards(0);
       }),
       grpc::INVALID_ARGUMENT, "placement.num_shards"},
      {"RegisterJob: 2^60-element tensor",
       register_job([](RegisterJobRequest* r) {
         auto* t = r->mutable_spec()->mutable_tensors(0);
         t->clear_shape();
         t->add_shape(uint64_t{1} << 40);
         t->add_shape(uint64_t{1} << 20);
       }),
       grpc::INVALID_ARGUMENT, "spec.tensors[0].shape"},
      {"RegisterJob: 2^31 chunks from one small message",
       register_job([](RegisterJobRequest* r) {
         r->mutable_spec()->set_partition_bytes(4);
         r->mutable_spec()->mutable_tensors(0)->set_shape(0, uint64_t{1} << 31);
       }),
       grpc::INVALID_ARGUMENT, "spec.tensors[0].shape"},
      {"RegisterJob: zero-size tensor", register_job([](RegisterJobRequest* r) {
         r->mutable_spec()->mutable_tensors(1)->set_shape(0, 0);
       }),
       grpc::INVALID_ARGUMENT, "tensors[1].shape[0]"},
      {"RegisterJob: 4294967295 workers",
       register_job([&](RegisterJobRequest* r) {
         r->set_num_workers(kU32Max);
         r->mutable_spec()->set_num_workers(kU32Max);
         r->mutable_spec()->mutable_consistency()->set_mode(ASP);
       }),
       grpc::INVALID_ARGUMENT, "num_workers"},
      {"RegisterJob: num_workers disagrees with the spec",
       register_job([](RegisterJobRequest* r) { r->set_num_workers(3); }),
       grpc::INVALID_ARGUMENT, "num_workers"},
      {"RegisterJob: empty job_id",
       register_job([](RegisterJobRequest* r) { r->set_job_id(""); }),
       grpc::INVALID_ARGUMENT, "job_id"},
      {"RegisterJob: two tensors named alike",
       register_job([](RegisterJobRequest* r) {
         r->mutable_spec()->mutable_tensors(1)->set_name(
             r->spec().tensors(0).name());
       }),
       grpc::INVALID_ARGUMENT, "tensors[1].name"},
      {"RegisterJob: partition_bytes not a multiple of 4",
       register_job([](RegisterJobRequest* r) {
         r->mutable_spec()->set_partition_bytes(4095);
       }),
       grpc::INVALID_ARGUMENT, "partition_bytes"},
      {"RegisterJob: the running job's id with another spec",
       [&] {
         RegisterJobRequest r = Registration(job);
         r.mutable_spec()->set_seed(r.spec().seed() + 1);
         return Register(r);
       },
       grpc::FAILED_PRECONDITION, "already registered"},
      // ParameterServer.Pull / Push / PushPull / SetMembership
      {"Pull: unknown chunk",
       [&] {
         PullRequest r;
         r.set_job_id(job);
         r.add_chunk_ids(999999);
         PullResponse resp;
         return FromStatus(ps_[0]->Pull(Context().get(), r, &resp));
       },
       grpc::INVALID_ARGUMENT, "chunk_ids[0]"},
      {"Pull: worker out of range",
       [&] {
         PullRequest r;
         r.set_job_id(job);
         r.set_worker(5);
         PullResponse resp;
         return FromStatus(ps_[0]->Pull(Context().get(), r, &resp));
       },
       grpc::INVALID_ARGUMENT, "worker"},
      {"Push: NaN gradient",
       [&] {
         PushRequest r;
         r.set_job_id(job);
         *r.add_gradients() = Gradient(c0);
         SetFloat(r.mutable_gradients(0), 1, std::nanf(""));
         PushResponse resp;
         return FromStatus(ps_[0]->Push(Context().get(), r, &resp));
       },
       grpc::INVALID_ARGUMENT, "NaN"},
      {"Push: version from the future",
       [&] {
         PushRequest r;
         r.set_job_id(job);
         *r.add_gradients() = Gradient(c0);
         r.mutable_gradients(0)->set_version(1000);
         PushResponse resp;
         return FromStatus(ps_[0]->Push(Context().get(), r, &resp));
       },
       grpc::INVALID_ARGUMENT, "gradients[0].version"},
      {"PushPull: Inf in the second chunk (the first is valid)",
       push_pull([&](PushPullRequest* r) {
         *r->add_gradients() = Gradient(c0b);
         SetFloat(r->mutable_gradients(1), 0, INFINITY);
       }),
       grpc::INVALID_ARGUMENT, "Inf"},
      {"PushPull: unknown job",
       push_pull([](PushPullRequest* r) { r->set_job_id("no-such-job"); }),
       grpc::FAILED_PRECONDITION, "job_id"},
      {"PushPull: wrong payload size", push_pull([](PushPullRequest* r) {
         r->mutable_gradients(0)->mutable_data()->resize(6);
       }),
       grpc::INVALID_ARGUMENT, "gradients[0].data"},
      // Wire formats (proto/ps.proto ChunkData.format / .indices).
      {"PushPull: unknown wire format number",
       push_pull([](PushPullRequest* r) {
         r->mutable_gradients(0)->set_format(static_cast<WireFormat>(9));
       }),
       grpc::INVALID_ARGUMENT, "gradients[0].format: 9"},
      {"PushPull: BF16 chunk with FP32's byte count",
       push_pull([](PushPullRequest* r) {
         r->mutable_gradients(0)->set_format(BF16);
       }),
       grpc::INVALID_ARGUMENT, "gradients[0].data"},
      {"PushPull: FP16 Inf", push_pull([&](PushPullRequest* r) {
         ChunkData* g = r->mutable_gradients(0);
         g->set_format(FP16);
         g->mutable_data()->assign(2 * c0.length(), '\0');
         (*g->mutable_data())[7] = '\x7c';  // element 3 = 0x7c00
       }),
       grpc::INVALID_ARGUMENT, "element 3 is Inf"},
      {"PushPull: sparse offset out of range",
       push_pull([&](PushPullRequest* r) {
         ChunkData* g = r->mutable_gradients(0);
         g->mutable_data()->assign(8, '\0');
         const uint32_t offsets[2] = {0, static_cast<uint32_t>(c0.length())};
         g->set_indices(std::string(reinterpret_cast<const char*>(offsets), 8));
       }),
       grpc::INVALID_ARGUMENT, "gradients[0].indices: offset"},
      {"PushPull: sparse offsets not ascending",
       push_pull([](PushPullRequest* r) {
         ChunkData* g = r->mutable_gradients(0);
         g->mutable_data()->assign(8, '\0');
         const uint32_t offsets[2] = {5, 5};
         g->set_indices(std::string(reinterpret_cast<const char*>(offsets), 8));
       }),
       grpc::INVALID_ARGUMENT, "at entry 1 (byte 4) is not above"},
      {"PushPull: sparse values for fewer offsets",
       push_pull([](PushPullRequest* r) {
         ChunkData* g = r->mutable_gradients(0);
         g->mutable_data()->assign(4, '\0');
         const uint32_t offsets[2] = {1, 2};
         g->set_indices(std::string(reinterpret_cast<const char*>(offsets), 8));
       }),
       grpc::INVALID_ARGUMENT, "gradients[0].data: 4 bytes, expected 8"},
      {"PushPull: partial sparse offset", push_pull([](PushPullRequest* r) {
         ChunkData* g = r->mutable_gradients(0);
         g->mutable_data()->assign(4, '\0');
         g->set_indices(std::string(6, '\0'));
       }),
       grpc::INVALID_ARGUMENT, "gradients[0].indices: 6 bytes"},
      // Delta pulls (proto/ps.proto HeldChunk, ChunkData.base_version).
      {"PushPull: held chunks for a job without top-k",
       push_pull([&](PushPullRequest* r) {
         HeldChunk* h = r->add_held();
         h->set_chunk_id(c0.chunk_id());
       }),
       grpc::INVALID_ARGUMENT, "held: job"},
      {"PushPull: a pushed gradient that claims to be a delta",
       push_pull([](PushPullRequest* r) {
         r->mutable_gradients(0)->set_base_version(0);
       }),
       grpc::INVALID_ARGUMENT, "gradients[0].base_version"},
      {"Pull: held chunks for a job without top-k",
       [&] {
         PullRequest r;
         r.set_job_id(job);
         r.add_chunk_ids(c0.chunk_id());
         r.add_held()->set_chunk_id(c0.chunk_id());
         PullResponse resp;
         return FromStatus(ps_[0]->Pull(Context().get(), r, &resp));
       },
       grpc::INVALID_ARGUMENT, "held: job"},
      {"PushPull: chunk of the other shard", push_pull([&](PushPullRequest* r) {
         *r->mutable_gradients(0) = Gradient(ChunkOn(1));
       }),
       grpc::INVALID_ARGUMENT, "gradients[0].chunk_id"},
      {"PushPull: rank 4294967295",
       push_pull([&](PushPullRequest* r) { r->set_worker(kU32Max); }),
       grpc::INVALID_ARGUMENT, "worker"},
      {"PushPull: step from the future",
       push_pull([](PushPullRequest* r) { r->set_step(99); }),
       grpc::INVALID_ARGUMENT, "step"},
      {"SetMembership: rank out of range",
       [&] {
         SetMembershipRequest r;
         r.set_job_id(job);
         r.add_active_workers(0);
         r.add_active_workers(1000);
         SetMembershipResponse resp;
         return FromStatus(ps_[0]->SetMembership(Context().get(), r, &resp));
       },
       grpc::INVALID_ARGUMENT, "active_workers[1]"},
      {"SetMembership: nobody active",
       [&] {
         SetMembershipRequest r;
         r.set_job_id(job);
         SetMembershipResponse resp;
         return FromStatus(ps_[1]->SetMembership(Context().get(), r, &resp));
       },
       grpc::INVALID_ARGUMENT, "active_workers"},
      // Coordinator.SubmitJob with hostile specs
      {"SubmitJob: hidden layer of 10^9 units",
       [&] {
         return Submit(
             "name: \"wide\" model { mlp { input_dim: 32 hidden: 1000000000 "
             "num_classes: 4 } }\n"
             "data { dataset: \"synthetic\" batch_size: 8 epochs: 1 }\n"
             "optimizer { kind: SGD learning_rate: 0.1 } consistency { mode: "
             "BSP }\n"
             "num_workers: 1\n");
       },
       grpc::INVALID_ARGUMENT, "model.mlp.hidden[0]"},
      {"SubmitJob: 10^9 workers",
       [&] { return Submit(mlp("name: \"many\" num_workers: 1000000000\n")); },
       grpc::INVALID_ARGUMENT, "num_workers"},
      {"SubmitJob: name with control characters",
       [&] {
         return Submit(mlp("name: \"evil\\033[2J\\r\\n\" num_workers: 1\n"));
       },
       grpc::INVALID_ARGUMENT, "name"},
      {"SubmitJob: 4-byte partitions",
       [&] {
         return Submit(
             mlp("name: \"tiny\" num_workers: 1 partition_bytes: 4\n"));
       },
       grpc::INVALID_ARGUMENT, "partition_bytes"},
      {"SubmitJob: a model of more chunks than a placement holds",
       [&] {
         return Submit(
             "name: \"many-chunks\" model { mlp { input_dim: 65536 hidden: "
             "2048 "
             "num_classes: 4 } }\ndata { dataset: \"synthetic\" batch_size: 8 "
             "epochs: 1 }\n"
             "optimizer { kind: SGD learning_rate: 0.1 } consistency { mode: "
             "BSP }\n"
             "num_workers: 1 partition_bytes: 4096\n");
       },
       grpc::INVALID_ARGUMENT, "partition_bytes"},
      {"SubmitJob: 2^32 parameters",
       [&] {
         return Submit(
             "name: \"huge\" model { mlp { input_dim: 65536 hidden: 65536 "
             "num_classes: 4 } }\ndata { dataset: \"synthetic\" batch_size: 8 "
             "epochs: 1 }\n"
             "optimizer { kind: SGD learning_rate: 0.1 } consistency { mode: "
             "BSP }\n"
             "num_workers: 1 partition_bytes: 3145728\n");
       },
       grpc::INVALID_ARGUMENT, "model"},
      {"SubmitJob: tensors given by the user",
       [&] {
         return Submit(mlp(
             "name: \"t\" num_workers: 1 tensors { name: \"x\" shape: 1 }\n"));
       },
       grpc::INVALID_ARGUMENT, "tensors"},
      {"SubmitJob: top-k fraction 1.5",
       [&] {
         return Submit(
             mlp("name: \"k\" num_workers: 1 wire { topk_fraction: 1.5 }\n"));
       },
       grpc::INVALID_ARGUMENT, "wire.topk_fraction: 1.5 is outside (0, 1]"},
      {"SubmitJob: unknown wire format number",
       [&] {
         return Submit(mlp("name: \"w\" num_workers: 1 wire { format: 12 }\n"));
       },
       grpc::INVALID_ARGUMENT, "wire.format: unknown value 12"},
      {"SubmitJob: empty spec", [&] { return Submit(""); },
       grpc::INVALID_ARGUMENT, "name: must be set"},
      // Coordinator: workers and progress
      {"ReportProgress: rank out of range",
       [&] {
         ProgressReport r;
         r.set_worker_id(worker_id_);
         r.set_job_id(job);
         r.set_rank(7);
         ProgressReportResponse resp;
         return FromStatus(
             coordinator_->ReportProgress(Context().get(), r, &resp));
       },
       grpc::INVALID_ARGUMENT, "rank"},
      {"ReportProgress: unknown job",
       [&] {
         ProgressReport r;
         r.set_worker_id(worker_id_);
         r.set_job_id("job-999999");
         ProgressReportResponse resp;
         return FromStatus(
             coordinator_->ReportProgress(Context().get(), r, &resp));
       },
       grpc::NOT_FOUND, "job_id"},
      {"Heartbeat: unknown worker id",
       [&] {
         HeartbeatRequest r;
         r.set_worker_id("w-does-not-exist");
         HeartbeatResponse resp;
         grpc::Status st = coordinator_->Heartbeat(Context().get(), r, &resp);
         if (!st.ok()) return FromStatus(st);
         return Outcome{grpc::OK,
                        absl::StrCat("reregister=", resp.reregister())};
       },
       grpc::OK, "reregister=1"},
      {"GetAssignment: absurd wait_ms from an unknown worker",
       [&] {
         GetAssignmentRequest r;
         r.set_worker_id("w-does-not-exist");
         r.set_wait_ms(kU32Max);
         GetAssignmentResponse resp;
         return FromStatus(
             coordinator_->GetAssignment(Context().get(), r, &resp));
       },
       grpc::NOT_FOUND, "worker_id"},
      {"GetAssignment: absurd wait_ms from a worker with a job answers at once",
       [&] {
         GetAssignmentRequest r;
         r.set_worker_id(worker_id_);
         r.set_wait_ms(kU32Max);
         GetAssignmentResponse resp;
         grpc::Status st =
             coordinator_->GetAssignment(Context().get(), r, &resp);
         if (!st.ok()) return FromStatus(st);
         return Outcome{grpc::OK, "job " + resp.assignment().job_id()};
       },
       grpc::OK, "job " + job},
      {"RegisterWorker: no name",
       [&] {
         RegisterWorkerRequest r;
         RegisterWorkerResponse resp;
         return FromStatus(
             coordinator_->RegisterWorker(Context().get(), r, &resp));
       },
       grpc::INVALID_ARGUMENT, "name"},
      {"CancelJob: unknown job",
       [&] {
         CancelJobRequest r;
         r.set_job_id("job-999999");
         CancelJobResponse resp;
         return FromStatus(coordinator_->CancelJob(Context().get(), r, &resp));
       },
       grpc::NOT_FOUND, "job-999999"},
      {"GetJob: id with control characters",
       [&] {
         GetJobRequest r;
         r.set_job_id(std::string("job\0\x1b[2J", 8));
         JobStatus resp;
         return FromStatus(coordinator_->GetJob(Context().get(), r, &resp));
       },
       grpc::NOT_FOUND, "job"},
  };
  ASSERT_GE(cases.size(), 30u);
  for (const RequestCase& c : cases) {
    absl::Time start = absl::Now();
    Outcome o = c.call();
    // Nothing is parked: a refusal waits for no quorum and no deadline.
    EXPECT_LT(absl::Now() - start, absl::Seconds(5))
        << c.name << ": answers are immediate";
    EXPECT_EQ(o.code, c.code) << c.name << ": " << o.text;
    EXPECT_THAT(o.text, HasSubstr(c.mentions)) << c.name;
    for (int i = 0; i < kShards; ++i) {
      ASSERT_TRUE(cluster_->shard(i).Alive())
          << "psd " << i << " died on: " << c.name;
    }
  }
  EXPECT_EQ(ParamChecksum(ReadAll()), ParamChecksum(before))
      << "a refused request changed parameters";

  // The job is still running, and the shards still answer.
  JobStatus status;
  GetJobRequest get;
  get.set_job_id(job);
  ASSERT_TRUE(coordinator_->GetJob(Context().get(), get, &status).ok());
  EXPECT_EQ(status.state(), RUNNING) << status.reason();
  for (int i = 0; i < kShards; ++i) {
    ShardStats stats;
    ASSERT_TRUE(ps_[i]->Stats(Context().get(), StatsRequest(), &stats).ok());
    EXPECT_EQ(stats.jobs(), 1u) << "no registration got through";
  }
}

}  // namespace
}  // namespace ps
