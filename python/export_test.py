#!/usr/bin/python3
"""psctl export against a local cluster of real psd processes: the
demo-sized PyTorch MLP (examples/torch_mlp.py's model, 1 worker, 4096
Fashion-MNIST images) is trained through psclient.torch, then exported
while its job runs. The .npz holds every tensor by name and shape, equal to
the parameters the worker pulled; loaded into a plain torch.nn module (no
psclient) it gives the test accuracy the job reported, to the 4th decimal.
Then the shards stop and the same parameters come back from their
checkpoints (--from-checkpoint). Bad input (an unknown or finished job, an
unwritable path, another job's or a corrupt checkpoint directory) exits 2
naming the job or file and leaves no file under the output name.
"""

import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)  # the package psclient (runfiles or a checkout)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "examples"))

import numpy as np  # noqa: E402

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError:  # python3-torch is a test-path package
    torch = None

import psclient  # noqa: E402
from psclient.testing import LocalCluster, find_binary  # noqa: E402

if torch is not None:
    import fmnist  # noqa: E402
    import psclient.torch as pst  # noqa: E402

PSCTL_TIMEOUT_S = 60
MAX_TRAIN = 4096
BATCH = 64


def demo_mlp():
    """examples/torch_mlp.py's model."""
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(),
                         nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, 10))


@unittest.skipIf(torch is None, "python3-torch is not installed")
@unittest.skipIf(not os.path.isdir(fmnist.DATA_DIR if torch else ""),
                 "Fashion-MNIST (dataset-fashion-mnist) is not installed")
class ExportTest(unittest.TestCase):

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="export-",
                                    dir=os.environ.get("TEST_TMPDIR"))
        self.addCleanup(shutil.rmtree, self.tmp, ignore_errors=True)
        self.ckpt = os.path.join(self.tmp, "ckpt")
        self.cluster = LocalCluster(
            shards=2, psd_extra=f'checkpoint_dir: "{self.ckpt}"').start()
        self.addCleanup(self.cluster.stop)
        self.client = psclient.connect(cluster=self.cluster.cluster_file)
        self.addCleanup(self.client.close)
        self.psctl = find_binary("tools/psctl/psctl")

    def export(self, *args, cluster=True):
        argv = [self.psctl, "export", *args]
        if cluster:
            argv.append("--cluster=" + self.cluster.cluster_file)
        return subprocess.run(argv, capture_output=True, text=True,
                              timeout=PSCTL_TIMEOUT_S)

    def assert_refused(self, p, *named):
        self.assertEqual(p.returncode, 2, p.stdout + p.stderr)
        for n in named:
            self.assertIn(n, p.stderr)
        left = os.listdir(self.tmp)
        self.assertFalse([f for f in left if f.startswith("bad")], left)

    def train(self):
        """Trains the demo MLP for one epoch of MAX_TRAIN images; returns
        (worker, model, job id, the accuracy the job reported)."""
        torch.manual_seed(0)
        torch.set_num_threads(1)
        model = demo_mlp()
        ps = pst.join(model, job="export-mlp", workers=1, batch_size=BATCH,
                      optimizer={"kind": "SGD", "learning_rate": 0.025,
                                 "momentum": 0.9},
                      cluster=self.cluster.cluster_file,
                      checkpoint_every_steps=1)
        self.addCleanup(ps.close)
        train = fmnist.load("train", limit=MAX_TRAIN)
        loader = torch.utils.data.DataLoader(train, batch_size=BATCH,
                                             shuffle=True, drop_last=True)
        for x, y in loader:
            F.cross_entropy(model(x), y).backward()
            ps.step()
        ps.report(epoch=1, test_accuracy=fmnist.accuracy(
            model, fmnist.load("t10k")))
        job_id = [j for j in self.client.jobs()
                  if j["name"] == "export-mlp"][0]["job_id"]
        status = self.client.status(job_id)
        self.assertEqual(status["state"], "RUNNING", status)
        self.assertEqual(status["progress"]["step"], MAX_TRAIN // BATCH)
        return ps, model, job_id, status["progress"]["test_accuracy"]

    def test_export_running_job_then_from_its_checkpoints(self):
        ps, model, job_id, reported = self.train()
        live = os.path.join(self.tmp, "live.npz")
        p = self.export(job_id, "-o", live)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn(f"exported 6 tensors of job {job_id}", p.stdout)

        params = dict(model.named_parameters())
        with np.load(live) as z:
            arrays = {k: z[k] for k in z.files}
        spec = json.loads(arrays.pop("__job_spec__").item())
        self.assertEqual(spec["name"], "export-mlp")
        self.assertEqual(sorted(arrays), sorted(params))
        for name, a in arrays.items():
            self.assertEqual(a.dtype, np.float32, name)
            self.assertEqual(a.shape, tuple(params[name].shape), name)
            # The worker's buffer holds what it pulled after its last step.
            np.testing.assert_array_equal(a, params[name].detach().numpy(),
                                          err_msg=name)

        # Plain PyTorch, no psclient: the job's accuracy to the 4th decimal.
        plain = demo_mlp()
        plain.load_state_dict({k: torch.from_numpy(v)
                               for k, v in arrays.items()})
        acc = fmnist.accuracy(plain, fmnist.load("t10k"))
        self.assertAlmostEqual(acc, reported, places=4)

        # Unwritable: a folder that does not exist.
        path = os.path.join(self.tmp, "no", "dir", "m.npz")
        self.assert_refused(self.export(job_id, "-o", path), path)
        self.assertFalse(os.path.exists(os.path.join(self.tmp, "no")))

        # The shards go; their checkpoints stay (every step, and at stop).
        self.cluster.stop_daemons()
        restored = os.path.join(self.tmp, "restored.npz")
        p = self.export("--from-checkpoint", self.ckpt, "-o", restored,
                        cluster=False)
        self.assertEqual(p.returncode, 0, p.stderr)
        with np.load(restored) as z:
            self.assertEqual(sorted(z.files),
                             sorted(arrays) + ["__job_spec__"])
            for name, a in arrays.items():
                np.testing.assert_array_equal(z[name], a, err_msg=name)

        bad = os.path.join(self.tmp, "bad.npz")
        self.assert_refused(self.export("other-job", "--from-checkpoint",
                                        self.ckpt, "-o", bad, cluster=False),
                            '"other-job"', job_id)
        self.assert_refused(self.export("--from-checkpoint",
                                        os.path.join(self.tmp, "nowhere"),
                                        "-o", bad, cluster=False), "nowhere")
        # Every checkpoint of shard 1 damaged: refused naming the files.
        corrupt = os.path.join(self.tmp, "corrupt")
        shutil.copytree(self.ckpt, corrupt)
        damaged = glob.glob(os.path.join(corrupt, "*.shard1.*.ckpt"))
        self.assertTrue(damaged)
        for f in damaged:
            with open(f, "r+b") as fh:
                fh.seek(60)
                fh.write(b"\xff" * 8)
        self.assert_refused(self.export("--from-checkpoint", corrupt, "-o",
                                        bad, cluster=False),
                            "shard 1", os.path.basename(damaged[0]))

    def test_bad_input_exits_2_and_writes_nothing(self):
        bad = os.path.join(self.tmp, "bad.npz")
        self.assert_refused(self.export("no-such-job", "-o", bad),
                            "no-such-job")
        # A finished job has left the shards.
        job_id, _ = self.client.submit(
            'name: "done" model { custom { tensors { name: "w" shape: 4 '
            'init { kind: ZEROS } } } } data { batch_size: 1 } '
            "optimizer { kind: SGD learning_rate: 0.1 } "
            "consistency { mode: BSP } num_workers: 1")
        with self.client.join(job_id) as w:
            w.report(step=0, finished=True)
        self.assertEqual(self.client.status(job_id)["state"], "SUCCEEDED")
        self.assert_refused(self.export(job_id, "-o", bad), job_id,
                            "SUCCEEDED", "--from-checkpoint")
        # Not an .npz.
        path = os.path.join(self.tmp, "bad.pt")
        self.assert_refused(self.export(job_id, "-o", path), path)


if __name__ == "__main__":
    unittest.main()
