#!/usr/bin/python3
"""psd speaks the gRPC conventions other tools expect, checked from a client
that is none of ours: Python stubs generated at test time by protoc and its
gRPC Python plugin (Debian's protobuf-compiler, protobuf-compiler-grpc)
from proto/ and python/grpc_standard/ (gRPC's health and reflection protos),
run by Debian's python3-grpcio.

- grpc.health.v1.Health: the coordinator shard (psd 0) answers NOT_SERVING
  for "" and "ps.Coordinator" while it waits for psd 1's address, SERVING
  for "ps.ParameterServer"; Watch sees "" turn SERVING once psd 1 is up;
  psd 1 (no coordinator) refuses a Check of "ps.Coordinator" with
  NOT_FOUND; a SIGTERM'd psd's watchers see NOT_SERVING before the stream
  ends (it drains).
- ParameterServer.Stats answers on both shards.
- Server reflection lists ps.ParameterServer, ps.Coordinator (psd 0 only)
  and grpc.health.v1.Health, and gives the file that defines ps.Stats.
"""

import glob
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)  # psclient.testing (runfiles or a checkout)

try:
    import grpc
except ImportError:  # python3-grpcio is a test-path package
    grpc = None

from psclient.testing import LocalCluster  # noqa: E402

PROTOC = shutil.which("protoc") or "/usr/bin/protoc"
PLUGIN = shutil.which("grpc_python_plugin") or "/usr/bin/grpc_python_plugin"
RPC_TIMEOUT_S = 10
WATCH_TIMEOUT_S = 60


def generate(out):
    """protoc's Python and gRPC Python output for proto/*.proto and the
    standard protos, into `out`; imported from there."""
    protos = sorted(glob.glob(os.path.join(ROOT, "proto", "*.proto")))
    std = os.path.join(HERE, "grpc_standard")
    p = subprocess.run(
        [PROTOC, f"--plugin=protoc-gen-grpc_python={PLUGIN}",
         f"-I{std}", f"-I{ROOT}", f"--python_out={out}",
         f"--grpc_python_out={out}", os.path.join(std, "health.proto"),
         os.path.join(std, "reflection.proto"), *protos],
        timeout=60, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"protoc failed: {p.stderr}")
    sys.path.insert(0, out)


@unittest.skipIf(grpc is None, "python3-grpcio is not installed")
@unittest.skipIf(not (os.access(PROTOC, os.X_OK) and
                      os.access(PLUGIN, os.X_OK)),
                 "protoc or grpc_python_plugin (protobuf-compiler-grpc) is "
                 "missing")
class GrpcConventionsTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="grpc-conventions-",
                                   dir=os.environ.get("TEST_TMPDIR"))
        generate(cls.tmp)
        global health_pb2, health_pb2_grpc, reflection_pb2
        global reflection_pb2_grpc, ps_pb2, ps_pb2_grpc
        import health_pb2
        import health_pb2_grpc
        import reflection_pb2
        import reflection_pb2_grpc
        from proto import ps_pb2, ps_pb2_grpc

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def setUp(self):
        # psd 1 starts later: psd 0's coordinator waits for its address.
        self.cluster = LocalCluster(shards=2, started_shards=1).start()
        self.addCleanup(self.cluster.stop)
        self.channels = []

    def tearDown(self):
        for c in self.channels:
            c.close()

    def channel(self, shard):
        c = grpc.insecure_channel(self.cluster.address(shard))
        self.channels.append(c)
        return c

    def check(self, shard, service):
        stub = health_pb2_grpc.HealthStub(self.channel(shard))
        return stub.Check(health_pb2.HealthCheckRequest(service=service),
                          timeout=RPC_TIMEOUT_S).status

    def watch_until(self, stream, status):
        """Reads Watch updates until `status`; the statuses seen."""
        seen = []
        for update in stream:
            seen.append(update.status)
            if update.status == status:
                return seen
        self.fail(f"the stream ended before {status}: saw {seen}")

    def reflect(self, shard, **request):
        stub = reflection_pb2_grpc.ServerReflectionStub(self.channel(shard))
        replies = stub.ServerReflectionInfo(
            iter([reflection_pb2.ServerReflectionRequest(**request)]),
            timeout=RPC_TIMEOUT_S)
        return list(replies)[0]

    def test_health_stats_and_reflection(self):
        R = health_pb2.HealthCheckResponse
        # psd 0 alone: its shard serves, its coordinator cannot yet.
        self.assertEqual(self.check(0, "ps.ParameterServer"), R.SERVING)
        self.assertEqual(self.check(0, "ps.Coordinator"), R.NOT_SERVING)
        self.assertEqual(self.check(0, ""), R.NOT_SERVING)
        watch = health_pb2_grpc.HealthStub(self.channel(0)).Watch(
            health_pb2.HealthCheckRequest(service=""),
            timeout=WATCH_TIMEOUT_S)
        self.cluster.start_shard(1)
        seen = self.watch_until(watch, R.SERVING)
        self.assertEqual(seen[0], R.NOT_SERVING, seen)
        watch.cancel()
        self.assertEqual(self.check(0, "ps.Coordinator"), R.SERVING)
        self.assertEqual(self.check(1, ""), R.SERVING)
        self.assertEqual(self.check(1, "ps.ParameterServer"), R.SERVING)
        with self.assertRaises(grpc.RpcError) as e:
            self.check(1, "ps.Coordinator")  # not served there
        self.assertEqual(e.exception.code(), grpc.StatusCode.NOT_FOUND)

        # Stats through the generated stub.
        for shard in (0, 1):
            stub = ps_pb2_grpc.ParameterServerStub(self.channel(shard))
            stats = stub.Stats(ps_pb2.StatsRequest(), timeout=RPC_TIMEOUT_S)
            self.assertEqual(stats.shard_id, shard)

        # Reflection: the services, and the file that defines a message.
        names = {s.name for s in self.reflect(0, list_services="")
                 .list_services_response.service}
        self.assertLessEqual({"ps.ParameterServer", "ps.Coordinator",
                              "grpc.health.v1.Health"}, names)
        names = {s.name for s in self.reflect(1, list_services="")
                 .list_services_response.service}
        self.assertIn("ps.ParameterServer", names)
        self.assertNotIn("ps.Coordinator", names)
        files = self.reflect(1, file_containing_symbol="ps.ParameterServer")
        self.assertTrue(files.file_descriptor_response.file_descriptor_proto)

        # Draining: a SIGTERM'd psd's watchers see NOT_SERVING.
        watch = health_pb2_grpc.HealthStub(self.channel(1)).Watch(
            health_pb2.HealthCheckRequest(service=""),
            timeout=WATCH_TIMEOUT_S)
        self.assertEqual(next(watch).status, R.SERVING)
        self.cluster.psd_process(1).send_signal(signal.SIGTERM)
        self.assertEqual(next(watch).status, R.NOT_SERVING)


if __name__ == "__main__":
    unittest.main()
