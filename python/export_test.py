#!/usr/bin/python3
"""psctl export against a local cluster of real psd processes: the
demo-sized PyTorch MLP (examples/torch_mlp.py's model, 1 worker, 4096
Fashion-MNIST images) is trained through psclient.torch, then exported
while its job runs. The .npz holds every tensor by name and shape, equal to
the parameters the worker pulled; loaded into a plain torch.nn module (no
psclient) it gives the test accuracy the job reported, to the 4th decimal.
Then the shards stop and the same parameters come back from their
checkpoints (--from-checkpoint). A SUCCEEDED job exports after it ended,
through psctl and psclient.export (the same bytes), and starts other jobs
(JobSpec.init from_file and from_job) whose initial parameters are
bitwise the exported ones, at the loss where the first one ended; bad warm
starts are refused at submit naming the tensor, the field and the file.
Bad input (an unknown or cancelled job, an unwritable path, another job's
or a corrupt checkpoint directory) exits 2 naming the job or file and
leaves no file under the output name.
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
        # A cancelled job has left the shards.
        spec = ('model { custom { tensors { name: "w" shape: 4 '
                'init { kind: ZEROS } } } } data { batch_size: 1 } '
                "optimizer { kind: SGD learning_rate: 0.1 } "
                "consistency { mode: BSP } num_workers: 1")
        job_id, _ = self.client.submit('name: "gone" ' + spec)
        self.client.cancel(job_id)
        self.assert_refused(self.export(job_id, "-o", bad), job_id,
                            "CANCELLED", "--from-checkpoint")
        with self.assertRaisesRegex(psclient.Error, "CANCELLED"):
            psclient.export(bad, job_id, cluster=self.cluster.cluster_file)
        # Not an .npz: psctl names the command that writes .pt; through
        # psclient.export (which converts) the cancelled job is refused.
        path = os.path.join(self.tmp, "bad.pt")
        self.assert_refused(self.export(job_id, "-o", path), path,
                            "psclient.export_model")
        with self.assertRaisesRegex(psclient.InvalidSpec, "CANCELLED"):
            psclient.export(path, job_id, cluster=self.cluster.cluster_file)
        self.assertFalse(os.path.exists(path))
        # A SUCCEEDED job stays on the shards (succeeded_jobs_kept).
        job_id, _ = self.client.submit('name: "done" ' + spec)
        with self.client.join(job_id) as w:
            w.report(step=0, finished=True)
        self.assertEqual(self.client.status(job_id)["state"], "SUCCEEDED")
        done = os.path.join(self.tmp, "done.npz")
        p = self.export(job_id, "-o", done)
        self.assertEqual(p.returncode, 0, p.stderr)
        with np.load(done) as z:
            np.testing.assert_array_equal(z["w"], np.zeros(4, np.float32))


class WarmStartTest(ExportTest):
    """Export of a SUCCEEDED job, and jobs started from it."""

    # ExportTest's tests run once, under ExportTest.
    test_export_running_job_then_from_its_checkpoints = None
    test_bad_input_exits_2_and_writes_nothing = None

    def join(self, model, job, warm_start):
        ps = pst.join(model, job=job, workers=1, batch_size=BATCH,
                      optimizer={"kind": "SGD", "learning_rate": 0.025,
                                 "momentum": 0.9},
                      cluster=self.cluster.cluster_file,
                      warm_start=warm_start)
        self.addCleanup(ps.close)
        return ps

    def test_finished_job_exports_and_warm_starts_others(self):
        ps, model, job_id, _ = self.train()
        x, y = next(iter(torch.utils.data.DataLoader(
            fmnist.load("t10k"), batch_size=1000)))
        with torch.no_grad():
            end_loss = F.cross_entropy(model(x), y).item()
        ps.finish()
        self.assertEqual(self.client.status(job_id)["state"], "SUCCEEDED")
        final = {n: p.detach().numpy().copy()
                 for n, p in model.named_parameters()}

        # After the end: psctl and psclient.export give the same bytes.
        by_psctl = os.path.join(self.tmp, "final.npz")
        p = self.export(job_id, "-o", by_psctl)
        self.assertEqual(p.returncode, 0, p.stderr)
        by_python = os.path.join(self.tmp, "final-py.npz")
        line = psclient.export(by_python, job_id,
                               cluster=self.cluster.cluster_file)
        self.assertIn(f"exported 6 tensors of job {job_id}", line)
        with open(by_psctl, "rb") as a, open(by_python, "rb") as b:
            self.assertEqual(a.read(), b.read())
        with np.load(by_psctl) as z:
            for name, a in final.items():
                np.testing.assert_array_equal(z[name], a, err_msg=name)

        # Started from the file, and from the job by name: the initial
        # parameters are the final ones bitwise, so the loss starts where
        # the first job ended.
        for job, warm in (("warm-file", {"from_file": by_psctl}),
                          ("warm-job", {"from_job": "export-mlp"})):
            torch.manual_seed(1)
            fresh = demo_mlp()
            self.join(fresh, job, warm)
            for name, p in fresh.named_parameters():
                np.testing.assert_array_equal(p.detach().numpy(), final[name],
                                              err_msg=f"{job} {name}")
            with torch.no_grad():
                self.assertEqual(F.cross_entropy(fresh(x), y).item(),
                                 end_loss, job)

        # Refused at submit, naming the tensor, the field and the file;
        # no job is added.
        jobs_before = len(self.client.jobs())
        truncated = os.path.join(self.tmp, "truncated.npz")
        with open(by_psctl, "rb") as f, open(truncated, "wb") as t:
            t.write(f.read()[:5000])
        opt = {"kind": "SGD", "learning_rate": 0.1}
        wide = nn.Sequential(nn.Flatten(), nn.Linear(784, 300), nn.ReLU(),
                             nn.Linear(300, 128), nn.ReLU(),
                             nn.Linear(128, 10))
        deeper = nn.Sequential(*demo_mlp(), nn.ReLU(), nn.Linear(10, 10))
        cases = [
            (wide, {"from_file": by_psctl},
             ["init.from_file", 'tensor "1.weight"', "[300, 784]",
              "[256, 784]", by_psctl]),
            (deeper, {"from_file": by_psctl},
             ["init.from_file", 'tensor "7.weight"', "is not in", by_psctl]),
            (demo_mlp(), {"from_file": truncated},
             ["init.from_file", truncated]),
            (demo_mlp(), {"from_file": os.path.join(self.tmp, "none.npz")},
             ["init.from_file", "none.npz", "cannot open"]),
            (demo_mlp(), {"from_job": "no-such-job"},
             ["init.from_job", '"no-such-job"']),
            (demo_mlp(), {"from_job": "warm-file"},
             ["init.from_job", "RUNNING"]),
            (wide, {"from_job": job_id},
             ["init.from_job", 'tensor "1.weight"', job_id]),
            (demo_mlp(), {"from_file": by_psctl, "optimizer_state": True},
             ["init.optimizer_state"]),
        ]
        for model, warm, named in cases:
            spec = pst.job_spec(model, "bad", 1, opt, warm_start=warm)
            with self.assertRaises(psclient.InvalidSpec) as e:
                self.client.submit(spec)
            for n in named:
                self.assertIn(n, str(e.exception), warm)
        self.assertEqual(len(self.client.jobs()), jobs_before)


if __name__ == "__main__":
    unittest.main()
