// libFuzzer target: configuration files and job specs.
//
//   bazel run //fuzz:config_fuzzer -- -max_total_time=60
//   $PWD/fuzz/corpus/config
//
// Byte 0 of an input picks what the rest is (byte 0 % 5):
//   0  a cluster file        -> ParseClusterConfig, then Security::FromCluster
//   1  a psd config          -> ParsePsdConfig (its cluster_file is read)
//   2  a workerd config      -> ParseWorkerdConfig
//   3  a JobSpec, text       -> NormalizeJobSpec, PlaceChunks (as SubmitJob)
//   4  a JobSpec, wire bytes -> the same
// Text inputs play a file in a scratch folder that holds a valid cluster
// file, PEM-looking TLS files and a token, so relative paths resolve.
//
// Properties checked (a violation aborts):
//   * nothing crashes or trips ASan/UBSan, on any bytes;
//   * an error is InvalidArgument, NotFound or PermissionDenied whose
//     message names the file (so psd/workerd can print it and exit 2);
//   * a config that loads is one the daemon can run with: the addresses
//     validate, shard_id is in the cluster, message sizes are in range, and
//     Security::FromCluster (run by psd, workerd and psctl after loading)
//     succeeds, so no bad file gets past the exit-2 check;
//   * a spec the coordinator accepts is one every shard accepts
//     (ValidateTensors) and places within kMaxChunks chunks, each on a
//     shard that exists.
//
// `FUZZ_WRITE_SEEDS=DIR config_fuzzer` writes the seed corpus that
// fuzz/corpus/config holds.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/config.h"
#include "common/security.h"
#include "common/text_proto.h"
#include "core/chunking.h"
#include "google/protobuf/stubs/logging.h"
#include "proto/job.pb.h"
#include "server/coordinator/job_validation.h"
#include "server/coordinator/placement.h"

namespace ps {
namespace {

enum Kind : uint8_t {
  kCluster = 0,
  kPsd = 1,
  kWorkerd = 2,
  kJobText = 3,
  kJobWire = 4,
  kNumKinds = 5,
};

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "config_fuzzer: %s\n", what.c_str());
  std::abort();
}

std::string& ScratchDir() {
  static std::string* dir = new std::string;
  return *dir;
}

void Write(const std::string& name, const std::string& text) {
  std::ofstream(ScratchDir() + "/" + name, std::ios::binary) << text;
}

// The files a fuzzed config may name by relative path. The PEM files only
// need to look like PEM: nothing here starts a TLS handshake.
void MakeScratchDir() {
  const char* base = std::getenv("TEST_TMPDIR");
  std::string templ =
      absl::StrCat(base != nullptr ? base : "/tmp", "/config_fuzzer.XXXXXX");
  if (mkdtemp(templ.data()) == nullptr) Fail("mkdtemp failed");
  ScratchDir() = templ;
  Write("cluster.pbtxt",
        "shards { address: \"127.0.0.1:7001\" }\n"
        "shards { address_file: \"s1.addr\" }\n"
        "coordinator_shard: 0\n");
  const std::string cert =
      "-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIUQ2Vy\n-----END "
      "CERTIFICATE-----\n";
  Write("ca.pem", cert);
  Write("cert.pem", cert);
  Write("key.pem",
        "-----BEGIN PRIVATE KEY-----\nMIGHAgEAMBMGByqG\n-----END PRIVATE "
        "KEY-----\n");
  Write("token", "s3cret-token\n");
  Write("empty_token", "\n");
  std::filesystem::create_directories(ScratchDir() + "/run");
}

// Paths outside the scratch folder could name anything on this machine
// (/proc, a device); the daemons' handling of those is ReadFile's, which has
// its own tests. Skip such inputs so a run stays hermetic.
bool Hermetic(const std::vector<std::string>& paths) {
  for (const std::string& p : paths) {
    if (p.empty()) continue;
    if (p[0] == '/' || absl::StrContains(p, "..")) return false;
  }
  return true;
}

void CheckError(const absl::Status& s, const std::string& file,
                const char* what) {
  if (s.ok()) return;
  if (s.code() != absl::StatusCode::kInvalidArgument &&
      s.code() != absl::StatusCode::kNotFound &&
      s.code() != absl::StatusCode::kPermissionDenied) {
    Fail(absl::StrCat(what, ": unexpected code: ", s.ToString()));
  }
  if (!absl::StrContains(s.message(), file)) {
    Fail(
        absl::StrCat(what, ": error does not name ", file, ": ", s.ToString()));
  }
}

void CheckCluster(const LoadedCluster& c) {
  if (c.config.shards_size() == 0) Fail("cluster without shards loaded");
  if (c.config.coordinator_shard() >=
      static_cast<uint32_t>(c.config.shards_size())) {
    Fail("coordinator_shard out of range loaded");
  }
  for (const ShardAddress& a : c.config.shards()) {
    if (a.address().empty() == a.address_file().empty())
      Fail("shard address not exactly one");
    if (!a.address().empty() &&
        !ValidateHostPort(a.address(), "a", false).ok()) {
      Fail("invalid shard address loaded: " + a.address());
    }
  }
  absl::StatusOr<Security> security = Security::FromCluster(c.config);
  if (!security.ok()) {
    Fail(absl::StrCat(
        "a cluster file that loads fails later in Security::FromCluster: ",
        security.status().ToString()));
  }
}

void FuzzCluster(const std::string& text) {
  ClusterConfig peek;
  if (ParseTextProto(text, "peek", &peek).ok() &&
      !Hermetic({peek.tls().cert_file(), peek.tls().key_file(),
                 peek.tls().ca_file(), peek.auth_token_file()})) {
    return;
  }
  const std::string path = ScratchDir() + "/fuzz_cluster.pbtxt";
  absl::StatusOr<LoadedCluster> c = ParseClusterConfig(text, path);
  CheckError(c.status(), path, "cluster");
  if (c.ok()) CheckCluster(*c);
}

void FuzzPsd(const std::string& text) {
  PsdConfig peek;
  if (ParseTextProto(text, "peek", &peek).ok() &&
      !Hermetic(
          {peek.cluster_file(), peek.address_file(), peek.checkpoint_dir()})) {
    return;
  }
  const std::string path = ScratchDir() + "/fuzz_psd.pbtxt";
  absl::StatusOr<LoadedPsdConfig> c = ParsePsdConfig(text, path);
  // Names this file, or the cluster file it points to.
  CheckError(c.status(), ScratchDir(), "psd");
  if (!c.ok()) return;
  const PsdConfig& p = c->psd;
  if (!ValidateHostPort(p.listen_address(), "l", true).ok())
    Fail("bad listen_address loaded");
  if (p.max_message_bytes() < kMinMaxMessageBytes ||
      p.max_message_bytes() > kMaxMaxMessageBytes) {
    Fail("max_message_bytes out of range loaded");
  }
  if (p.worker_timeout_ms() < kMinWorkerTimeoutMs)
    Fail("worker_timeout_ms too small loaded");
  if (p.shard_id() >= static_cast<uint32_t>(c->cluster.config.shards_size())) {
    Fail("shard_id outside the cluster loaded");
  }
  CheckCluster(c->cluster);
}

void FuzzWorkerd(const std::string& text) {
  WorkerdConfig peek;
  if (ParseTextProto(text, "peek", &peek).ok() &&
      !Hermetic({peek.cluster_file(), peek.data_dir()})) {
    return;
  }
  const std::string path = ScratchDir() + "/fuzz_workerd.pbtxt";
  absl::StatusOr<LoadedWorkerdConfig> c = ParseWorkerdConfig(text, path);
  CheckError(c.status(), ScratchDir(), "workerd");
  if (!c.ok()) return;
  const WorkerdConfig& w = c->workerd;
  if (w.devices_size() == 0 || w.devices_size() != w.device_weights_size()) {
    Fail("devices and device_weights disagree after loading");
  }
  CheckCluster(c->cluster);
}

void FuzzJobSpec(const JobSpec& spec, uint32_t num_shards) {
  ValidationContext ctx;
  ctx.num_shards = num_shards;
  // Deterministic and hermetic: only this folder "exists".
  ctx.path_exists = [](const std::string& p) { return p == "/data"; };
  std::vector<std::string> problems;
  absl::StatusOr<JobSpec> normalized = NormalizeJobSpec(spec, ctx, &problems);
  if (!normalized.ok()) {
    if (problems.empty()) Fail("a refused spec lists no problem");
    for (const std::string& p : problems) {
      if (p.find(": ") == std::string::npos || p.find(": ") == 0) {
        Fail("a problem does not name its field: " + p);
      }
    }
    return;
  }
  if (!problems.empty()) Fail("an accepted spec lists problems");
  if (absl::Status s = ValidateTensors(*normalized); !s.ok()) {
    Fail("the coordinator accepts a spec that a shard refuses: " +
         s.ToString());
  }
  absl::StatusOr<Placement> placement = PlaceChunks(*normalized, num_shards);
  if (!placement.ok()) {
    Fail("an accepted spec cannot be placed: " + placement.status().ToString());
  }
  if (static_cast<uint64_t>(placement->chunks_size()) > kMaxChunks) {
    Fail("placement over kMaxChunks");
  }
  if (static_cast<size_t>(placement->chunks_size()) !=
      CutIntoChunks(*normalized).size()) {
    Fail("placement and CutIntoChunks disagree on the chunk count");
  }
  for (const ChunkPlacement& c : placement->chunks()) {
    if (c.shard() >= num_shards)
      Fail("a chunk placed on a shard that does not exist");
  }
}

void WriteSeeds(const std::string& dir) {
  std::vector<std::pair<std::string, std::string>> seeds = {
      {"cluster_plain",
       "shards { address: \"127.0.0.1:7001\" }\nshards { address_file: "
       "\"s1.addr\" }\ncoordinator_shard: 1\n"},
      {"cluster_mtls",
       "shards { address: \"localhost:7001\" }\ntls { cert_file: \"cert.pem\" "
       "key_file: \"key.pem\" ca_file: \"ca.pem\" mutual: true "
       "server_name_override: \"localhost\" }\nauth_token_file: \"token\"\n"},
      {"cluster_bad",
       "shards { address: \"[::1]:70000\" }\nshards { address: \"[::1]:70000\" "
       "}\n"
       "coordinator_shard: 4\ntls { key_file: \"nope.pem\" }\n"
       "auth_token_file: \"empty_token\"\n"},
      {"psd_full",
       "listen_address: \"0.0.0.0:0\"\nshard_id: 1\ncluster_file: "
       "\"cluster.pbtxt\"\naddress_file: \"run/s1.addr\"\nmax_message_bytes: "
       "8388608\nmemory_budget_bytes: 1048576\nworker_timeout_ms: 3000\n"
       "log_level: \"warn\"\n"},
      {"psd_bad", "listen_adress: \"127.0.0.1:0\"\nshard_id: \"zero\"\n"},
      {"psd_values",
       "listen_address: \"300.1.1.1:80\"\ncluster_file: \"missing.pbtxt\"\n"
       "max_message_bytes: 4294967295\nworker_timeout_ms: 5\n"},
      {"workerd_full",
       "cluster_file: \"cluster.pbtxt\"\nname: \"w0\"\ndevices: \"cpu:0\"\n"
       "devices: \"cpu:1\"\ndevice_weights: 1\ndevice_weights: 2.5\n"
       "data_dir: \"data\"\nheartbeat_interval_ms: 200\n"},
      {"workerd_bad",
       "cluster_file: \"cluster.pbtxt\"\nname: \"w\\001\"\ndevices: \"cpu:0\"\n"
       "devices: \"cpu:0\"\ndevices: \"tpu:x\"\ndevice_weights: nan\n"},
      {"job_mlp",
       "name: \"mlp\"\nmodel { mlp { input_dim: 784 hidden: 256 hidden: 128 "
       "num_classes: 10 } }\ndata { dataset: \"fashion-mnist\" batch_size: 64 "
       "epochs: 2 }\noptimizer { kind: ADAM learning_rate: 0.001 "
       "}\nconsistency { "
       "mode: BSP backup_workers: 1 }\nnum_workers: 2\npartition_bytes: "
       "65536\n"},
      {"job_softmax_ssp",
       "name: \"s\"\nmodel { softmax { input_dim: 20 num_classes: 3 } }\n"
       "data { dataset: \"synthetic\" batch_size: 8 epochs: 1 "
       "synthetic_train: 100 data_dir: \"/data\" }\noptimizer { kind: SGD "
       "learning_rate: 0.1 momentum: 0.9 nesterov: true }\nconsistency { "
       "mode: SSP staleness: 2 }\nnum_workers: 3\n"},
      {"job_hostile",
       "name: \"x\\033[31m\"\nmodel { mlp { input_dim: 4294967295 hidden: "
       "1000000000 num_classes: 1 } }\ndata { dataset: \"synthetic\" }\n"
       "optimizer { kind: ADAGRAD learning_rate: -1 epsilon: 0 }\nnum_workers: "
       "1000000000\npartition_bytes: 4\ntensors { name: \"t\" }\n"},
  };
  int i = 0;
  for (const auto& [name, text] : seeds) {
    Kind kind = absl::StartsWith(name, "cluster")   ? kCluster
                : absl::StartsWith(name, "psd")     ? kPsd
                : absl::StartsWith(name, "workerd") ? kWorkerd
                                                    : kJobText;
    std::string bytes = std::string(1, static_cast<char>(kind)) + text;
    std::ofstream(dir + "/" + name, std::ios::binary) << bytes;
    if (kind == kJobText) {
      JobSpec spec;
      if (ParseTextProto(text, name, &spec).ok()) {
        std::string wire(1,
                         static_cast<char>(kJobWire + kNumKinds * (i++ % 3)));
        std::ofstream(dir + "/" + name + "_wire", std::ios::binary)
            << wire + spec.SerializeAsString();
      }
    }
  }
  std::fprintf(stderr, "wrote seeds to %s\n", dir.c_str());
}

}  // namespace
}  // namespace ps

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (const char* dir = std::getenv("FUZZ_WRITE_SEEDS")) {
    ps::WriteSeeds(dir);
    std::exit(0);
  }
  ps::MakeScratchDir();
  // Protobuf logs every string field with invalid UTF-8; fuzzed bytes are
  // full of them, and the refusals are what is checked.
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ps;  // NOLINT: a libFuzzer entry point lives outside ps
  if (size == 0) return 0;
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  // Shard counts 1-3 for job specs, from the selector's high bits.
  const uint32_t num_shards = 1 + (data[0] / kNumKinds) % 3;
  switch (data[0] % kNumKinds) {
    case kCluster:
      FuzzCluster(text);
      break;
    case kPsd:
      FuzzPsd(text);
      break;
    case kWorkerd:
      FuzzWorkerd(text);
      break;
    case kJobText: {
      JobSpec spec;
      if (ParseTextProto(text, "job.pbtxt", &spec).ok())
        FuzzJobSpec(spec, num_shards);
      break;
    }
    case kJobWire: {
      JobSpec spec;
      if (spec.ParseFromString(text)) FuzzJobSpec(spec, num_shards);
      break;
    }
  }
  return 0;
}
