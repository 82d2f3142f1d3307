#!/usr/bin/python3
"""Tests of psclient.torch and psclient.run against a local cluster of real
psd processes: both examples train through it with 2 workers (small), the
model's parameters live in the client's buffer and start from the shards',
and bad input (another model under the same job name, a float64 model, an
unreachable cluster, a job cancelled while training) raises an error that
names the tensor, the address or the job, and changes nothing on the shards.
"""

import os
import re
import subprocess
import sys
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
# The package psclient sits in this folder (runfiles or a checkout).
sys.path.insert(0, HERE)
ROOT = os.path.dirname(HERE)

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError:  # python3-torch is a test-path package
    torch = None

import psclient  # noqa: E402
from psclient.testing import LocalCluster  # noqa: E402

if torch is not None:
    import psclient.torch as pst  # noqa: E402

RUN_TIMEOUT_S = 240


def mlp():
    return nn.Sequential(nn.Flatten(), nn.Linear(12, 8), nn.ReLU(),
                         nn.Linear(8, 3))


def run_example(cluster, script, *args):
    """`python3 -m psclient.run --workers=2 SCRIPT ARGS`; its output."""
    cmd = [sys.executable, "-m", "psclient.run",
           "--cluster=" + cluster.cluster_file, "--workers=2",
           "--timeout=%d" % RUN_TIMEOUT_S, os.path.join(ROOT, script)]
    env = dict(os.environ, PYTHONPATH=HERE)
    p = subprocess.run(cmd + list(args), env=env, capture_output=True,
                       text=True, timeout=RUN_TIMEOUT_S + 30)
    if p.returncode != 0:
        raise AssertionError("%s failed (%d):\n%s%s" % (
            script, p.returncode, p.stdout[-4000:], p.stderr[-4000:]))
    return p.stdout


def final_accuracy(output):
    m = re.findall(r"\] rank 0 epoch \d+ step (\d+) loss \S+ test_accuracy "
                   r"([0-9.]+)", output)
    if not m:
        raise AssertionError("no epoch line from rank 0 in:\n" + output)
    return int(m[-1][0]), float(m[-1][1])


@unittest.skipIf(torch is None, "python3-torch is not installed")
class TorchTest(unittest.TestCase):
    cluster = None

    @classmethod
    def setUpClass(cls):
        cls.cluster = LocalCluster(shards=2).start()
        cls.client = psclient.connect(cluster=cls.cluster.cluster_file)

    @classmethod
    def tearDownClass(cls):
        cls.cluster.stop()

    def job(self, job_id):
        return self.client.status(job_id)

    def job_named(self, name):
        found = [j for j in self.client.jobs() if j["name"] == name]
        self.assertEqual(len(found), 1, found)
        return found[0]

    def test_mlp_example_trains_with_two_workers(self):
        out = run_example(self.cluster, "examples/torch_mlp.py",
                          "--job=ex-mlp", "--epochs=1", "--max-train=4096")
        steps, acc = final_accuracy(out)
        self.assertEqual(steps, 4096 // 2 // 64)
        self.assertGreater(acc, 0.65, out)
        job = self.job_named("ex-mlp")
        self.assertEqual(job["state"], "SUCCEEDED", job)
        self.assertEqual(job["progress"]["step"], steps)
        self.assertAlmostEqual(job["progress"]["test_accuracy"], acc, places=4)
        self.assertGreater(job["progress"]["samples_per_s"], 0)
        self.assertEqual(len(job["workers"]), 2)

    def test_cnn_example_trains_with_two_workers(self):
        out = run_example(self.cluster, "examples/torch_fmnist_cnn.py",
                          "--job=ex-cnn", "--epochs=1", "--max-train=4096",
                          "--max-test=1000", "--hidden=32", "--lr=0.05")
        steps, acc = final_accuracy(out)
        self.assertEqual(steps, 4096 // 2 // 64)
        self.assertGreater(acc, 0.5, out)  # chance is 0.1
        self.assertEqual(self.job_named("ex-cnn")["state"], "SUCCEEDED")

    def test_parameters_start_from_the_shards_and_follow_sgd(self):
        torch.manual_seed(1)
        model = mlp()
        ps = pst.join(model, job="sgd-check", workers=1, seed=7,
                      optimizer={"kind": "SGD", "learning_rate": 0.5},
                      cluster=self.cluster.cluster_file)
        try:
            # The model's storage is the client's flat buffer.
            w0 = model[1].weight
            self.assertEqual(w0.data_ptr(),
                             torch.from_numpy(ps._w.params).data_ptr())
            # Initial values are the shards' draw: U(-1/sqrt(12), ..).
            bound = 1 / 12 ** 0.5
            self.assertLessEqual(w0.abs().max().item(), bound)
            self.assertGreater(w0.abs().max().item(), bound / 2)
            before = [p.detach().clone() for p in model.parameters()]
            x, y = torch.randn(5, 12), torch.tensor([0, 1, 2, 1, 0])
            F.cross_entropy(model(x), y).backward()
            grads = [p.grad.clone() for p in model.parameters()]
            ps.step()
            for b, g, p in zip(before, grads, model.parameters()):
                torch.testing.assert_close(p.detach(), b - 0.5 * g)
                self.assertIsNone(p.grad)
            self.assertEqual(ps.step_count, 1)
        finally:
            ps.finish()
        self.assertEqual(self.job_named("sgd-check")["state"], "SUCCEEDED")

    def test_another_model_under_the_same_name_is_refused(self):
        first = pst.join(mlp(), job="same-name", workers=1,
                         optimizer={"kind": "SGD", "learning_rate": 0.1},
                         cluster=self.cluster.cluster_file)
        try:
            other = nn.Sequential(nn.Flatten(), nn.Linear(12, 9), nn.ReLU(),
                                  nn.Linear(9, 3))
            with self.assertRaises(psclient.InvalidSpec) as e:
                pst.join(other, job="same-name", workers=1,
                         optimizer={"kind": "SGD", "learning_rate": 0.1},
                         cluster=self.cluster.cluster_file)
            self.assertIn("with another spec", str(e.exception))
            self.assertIn("tensors[0]", str(e.exception))
            self.assertEqual(self.job_named("same-name")["state"], "RUNNING")
        finally:
            first.finish()

    def test_float64_model_is_refused_before_anything_is_submitted(self):
        with self.assertRaises(psclient.ShapeError) as e:
            pst.join(mlp().double(), job="f64", workers=1,
                     optimizer={"kind": "SGD", "learning_rate": 0.1},
                     cluster=self.cluster.cluster_file)
        self.assertIn("parameter '1.weight': dtype torch.float64",
                      str(e.exception))
        self.assertEqual([j for j in self.client.jobs() if j["name"] == "f64"],
                         [])

    def test_unknown_parameter_kind_needs_an_init(self):
        model = mlp()
        model.register_parameter("scale", nn.Parameter(torch.ones(3)))
        with self.assertRaises(ValueError) as e:
            pst.job_spec(model, "x", 1, {"kind": "SGD", "learning_rate": 1})
        self.assertIn("init: parameter 'scale' of shape (3,)",
                      str(e.exception))
        spec = pst.job_spec(model, "x", 1, {"kind": "SGD", "learning_rate": 1},
                            init={"scale": "kind: CONSTANT value: 1"})
        self.assertIn('name: "scale" shape: 3 init { kind: CONSTANT', spec)

    def test_unreachable_cluster_names_the_address_within_the_deadline(self):
        t0 = time.monotonic()
        with self.assertRaises(psclient.Unavailable) as e:
            pst.join(mlp(), job="nowhere", workers=1,
                     optimizer={"kind": "SGD", "learning_rate": 0.1},
                     coordinator="127.0.0.1:1", timeout_s=2.0)
        self.assertIn("127.0.0.1:1", str(e.exception))
        self.assertLess(time.monotonic() - t0, 10)

    def test_cancelled_job_raises_job_aborted_naming_it(self):
        model = mlp()
        ps = pst.join(model, job="to-cancel", workers=1,
                      optimizer={"kind": "SGD", "learning_rate": 0.1},
                      cluster=self.cluster.cluster_file)
        x, y = torch.randn(4, 12), torch.tensor([0, 1, 2, 0])
        F.cross_entropy(model(x), y).backward()
        ps.step()
        self.client.cancel(ps.job_id)
        F.cross_entropy(model(x), y).backward()
        t0 = time.monotonic()
        with self.assertRaises(psclient.JobAborted) as e:
            ps.step()
        self.assertLess(time.monotonic() - t0, 30)
        self.assertIn(ps.job_id, str(e.exception))
        self.assertIn("cancelled by user", str(e.exception))
        ps.close()


if __name__ == "__main__":
    unittest.main()
