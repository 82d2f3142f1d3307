#!/usr/bin/python3
"""The built-in MLP and CNN leave the cluster as PyTorch and ONNX files:
each is trained by a workerd on Fashion-MNIST (1 epoch of MAX_TRAIN
images, CI-sized; the CNN smaller than configs/jobs/fashion_cnn.pbtxt's
but with both pool settings and a hidden layer), then
`python3 -m psclient.export_model` writes it as .npz, .pt (state_dict),
.ts (TorchScript) and .onnx. examples/evaluate_exported.py, plain PyTorch
in a process without psclient on its path, gives the test accuracy the job
reported, to the 4th decimal; the state_dict loaded into psclient.models'
module computes what the TorchScript file computes; the ONNX file passes
onnx.checker and holds the state_dict's values. Bad input exits 2 naming
the file, field or tensor and leaves nothing under the output name.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLES = os.path.join(os.path.dirname(HERE), "examples")
sys.path.insert(0, HERE)  # the package psclient (runfiles or a checkout)
sys.path.insert(0, EXAMPLES)

import numpy as np  # noqa: E402

try:
    import onnx
    from onnx import numpy_helper
    import torch
except ImportError:  # python3-torch, python3-onnx: test-path packages
    torch = None

import psclient  # noqa: E402
from psclient.testing import LocalCluster, find_binary  # noqa: E402

if torch is not None:
    import fmnist  # noqa: E402
    from psclient import models  # noqa: E402

TIMEOUT_S = 300
MAX_TRAIN = 1024
COMMON = (
    'data { dataset: "fashion-mnist" batch_size: 64 epochs: 1 '
    f"max_train_examples: {MAX_TRAIN} }} "
    "optimizer { kind: SGD learning_rate: 0.05 momentum: 0.9 } "
    "consistency { mode: BSP step_deadline_ms: 60000 } num_workers: 1 "
    "seed: 42 eval_every: 0 wire { format: FP32 }")
MLP = ('name: "mlp" model { mlp { input_dim: 784 hidden: 256 hidden: 128 '
       "num_classes: 10 } } " + COMMON)
CNN = ('name: "cnn" model { cnn { height: 28 width: 28 channels: 1 '
       "conv { filters: 8 kernel: 5 } conv { filters: 16 kernel: 3 pool: 1 } "
       "conv { filters: 16 kernel: 3 } hidden: 64 num_classes: 10 } } "
       + COMMON)


@unittest.skipIf(torch is None, "python3-torch or python3-onnx is missing")
@unittest.skipIf(not os.path.isdir(fmnist.DATA_DIR if torch else ""),
                 "Fashion-MNIST (dataset-fashion-mnist) is not installed")
class BuiltinExportTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="builtin-export-",
                                   dir=os.environ.get("TEST_TMPDIR"))
        cls.cluster = LocalCluster(shards=2, workerds=1).start()
        cls.psctl = find_binary("tools/psctl/psctl")
        cls.client = psclient.connect(cluster=cls.cluster.cluster_file)
        cls.jobs = {}
        try:
            for name, spec in (("mlp", MLP), ("cnn", CNN)):
                cls.jobs[name] = cls.train(name, spec)
        except BaseException:
            cls.tearDownClass()
            raise

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        cls.cluster.stop()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    @classmethod
    def train(cls, name, spec):
        """Runs the job to its end; returns (job id, reported accuracy)."""
        path = os.path.join(cls.tmp, name + ".pbtxt")
        with open(path, "w") as f:
            f.write(spec)
        p = subprocess.run(
            [cls.psctl, "submit", path, "--wait", f"--timeout={TIMEOUT_S}",
             "--cluster=" + cls.cluster.cluster_file],
            capture_output=True, text=True, timeout=TIMEOUT_S + 30)
        if p.returncode != 0:
            raise AssertionError(f"{name}: {p.stdout}{p.stderr}\n"
                                 + cls.cluster.log(0)[-3000:])
        job = [j for j in cls.client.jobs() if j["name"] == name][-1]
        status = cls.client.status(job["job_id"])
        assert status["state"] == "SUCCEEDED", status
        return job["job_id"], status["progress"]["test_accuracy"]

    def export_model(self, *args):
        env = dict(os.environ, PYTHONPATH=HERE)
        return subprocess.run(
            [sys.executable, "-m", "psclient.export_model", *args,
             "--cluster=" + self.cluster.cluster_file],
            capture_output=True, text=True, timeout=TIMEOUT_S, env=env)

    def plain_accuracy(self, ts_path):
        """examples/evaluate_exported.py in a process whose path holds no
        psclient: (accuracy, examples)."""
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        p = subprocess.run(
            [sys.executable, "-I", os.path.join(EXAMPLES,
                                                "evaluate_exported.py"),
             ts_path], capture_output=True, text=True, timeout=TIMEOUT_S,
            env=env, cwd=self.tmp)
        self.assertEqual(p.returncode, 0, p.stderr)
        m = re.fullmatch(r"test_accuracy=([0-9.]+) examples=(\d+)\n",
                         p.stdout)
        self.assertIsNotNone(m, p.stdout)
        return float(m.group(1)), int(m.group(2))

    def check_model(self, name, kind):
        job_id, reported = self.jobs[name]
        self.assertGreater(reported, 0.5, name)  # it learned something
        paths = {ext: os.path.join(self.tmp, f"{name}{ext}")
                 for ext in (".npz", ".pt", ".ts", ".onnx")}
        for ext, path in paths.items():
            p = self.export_model(job_id, "-o", path)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertTrue(os.path.isfile(path), path)
            if ext != ".npz":
                self.assertIn(f"wrote {kind}", p.stdout)
                self.assertIn(f"job {job_id}", p.stdout)

        accuracy, examples = self.plain_accuracy(paths[".ts"])
        self.assertEqual(examples, 10000)
        self.assertAlmostEqual(accuracy, reported, places=4, msg=name)

        # The state_dict in psclient.models' module: the TorchScript
        # file's outputs (the same module, traced).
        with np.load(paths[".npz"]) as z:
            module, _ = models.from_npz(z)
        state = torch.load(paths[".pt"])
        self.assertEqual(sorted(state), sorted(module.state_dict()))
        module.load_state_dict(state)
        traced = torch.jit.load(paths[".ts"])
        x = fmnist.load("t10k", limit=256).tensors[0]
        with torch.no_grad():
            torch.testing.assert_close(traced(x), module(x), rtol=0, atol=0)

        # ONNX: checked, its initializers the state_dict's values.
        graph = onnx.load(paths[".onnx"])
        onnx.checker.check_model(graph)
        inits = {i.name: numpy_helper.to_array(i)
                 for i in graph.graph.initializer}
        for key, value in state.items():
            self.assertIn(key, inits)
            np.testing.assert_array_equal(inits[key], value.numpy(),
                                          err_msg=key)
        self.assertEqual([i.name for i in graph.graph.input], ["input"])
        self.assertEqual([o.name for o in graph.graph.output], ["logits"])

    def test_mlp(self):
        self.check_model("mlp", "Mlp")

    def test_cnn(self):
        self.check_model("cnn", "Cnn")

    def assert_refused(self, p, out, *named):
        self.assertEqual(p.returncode, 2, p.stdout + p.stderr)
        for n in named:
            self.assertIn(n, p.stderr)
        folder = os.path.dirname(out)
        left = [f for f in os.listdir(folder)
                if os.path.basename(out) in f] if os.path.isdir(folder) else []
        self.assertEqual(left, [], out)

    def test_bad_input_exits_2_and_writes_nothing(self):
        job_id, _ = self.jobs["mlp"]
        out = os.path.join(self.tmp, "bad.onnx")
        self.assert_refused(self.export_model("no-such-job", "-o", out), out,
                            "no-such-job")
        bad = os.path.join(self.tmp, "bad.txt")
        self.assert_refused(self.export_model(job_id, "-o", bad), bad,
                            bad, ".onnx")
        nowhere = os.path.join(self.tmp, "no", "dir", "m.ts")
        self.assert_refused(self.export_model(job_id, "-o", nowhere), nowhere,
                            os.path.dirname(nowhere))
        # psctl names the command for the formats it does not write.
        p = subprocess.run([self.psctl, "export", job_id, "-o", out,
                            "--cluster=" + self.cluster.cluster_file],
                           capture_output=True, text=True, timeout=TIMEOUT_S)
        self.assert_refused(p, out, "python3 -m psclient.export_model")

        # A file that is not an .npz, and one whose tensors do not fit.
        junk = os.path.join(self.tmp, "junk.npz")
        with open(junk, "wb") as f:
            f.write(b"not a zip")
        self.assert_refused(self.export_model("--from-npz", junk, "-o", out),
                            out, junk)
        npz = os.path.join(self.tmp, "mlp-bad.npz")
        self.assertEqual(self.export_model(job_id, "-o", npz).returncode, 0)
        with np.load(npz) as z:
            arrays = {k: z[k] for k in z.files}
        arrays["fc1/w"] = arrays["fc1/w"][:, :100]
        np.savez(npz, **arrays)
        self.assert_refused(self.export_model("--from-npz", npz, "-o", out),
                            out, 'tensor "fc1/w"', "[256, 100]", "[256, 128]")
        spec = json.loads(arrays["__job_spec__"].item())
        spec["model"] = {"ctr": {}}
        arrays = {k: v for k, v in arrays.items()}
        arrays["__job_spec__"] = np.array(json.dumps(spec).encode())
        np.savez(npz, **arrays)
        self.assert_refused(self.export_model("--from-npz", npz, "-o", out),
                            out, "model.ctr")


if __name__ == "__main__":
    unittest.main()
