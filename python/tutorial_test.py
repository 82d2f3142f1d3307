#!/usr/bin/python3
"""docs/TUTORIAL.md, run top to bottom: its `sh` blocks in one bash
(set -euo pipefail) in a scratch folder, but for the blocks marked
`<!-- tutorial_test: skip` (building, starting and stopping the local
cluster: this test starts its own, 2 psd and 2 workerd on ports they pick,
and sets PATH, PYTHONPATH, REPO and CLUSTER as that block does). CI-sized:
the jobs' data sections get max_train_examples (SUBSTITUTIONS, each of
which must still match the page). Then: the exported model evaluated in
plain PyTorch gives the job's reported accuracy to the 4th decimal, every
file the page names is there, the fine-tune job SUCCEEDED.
"""

import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)  # the package psclient (runfiles or a checkout)

try:
    import onnx  # noqa: F401
    import torch  # noqa: F401
except ImportError:  # python3-torch, python3-onnx: test-path packages
    torch = None

from psclient.testing import LocalCluster, find_binary  # noqa: E402

TUTORIAL = os.path.join(ROOT, "docs", "TUTORIAL.md")
DATA_DIR = "/usr/share/datasets/fashion-mnist"
TIMEOUT_S = 600
SKIP = "<!-- tutorial_test: skip"
SUBSTITUTIONS = [
    ("batch_size: 64 epochs: 2 }",
     "batch_size: 64 epochs: 2 max_train_examples: 1024 }"),
    ("batch_size: 64 epochs: 1 }",
     "batch_size: 64 epochs: 1 max_train_examples: 512 }"),
]


def blocks(text):
    """The page's sh blocks, in order: (run?, commands)."""
    out = []
    for m in re.finditer(r"((?:[^\n]*\n)?)```sh\n(.*?)```", text, re.S):
        out.append((not m.group(1).startswith(SKIP), m.group(2)))
    return out


@unittest.skipIf(torch is None, "python3-torch or python3-onnx is missing")
@unittest.skipIf(not os.path.isdir(DATA_DIR),
                 "Fashion-MNIST (dataset-fashion-mnist) is not installed")
class TutorialTest(unittest.TestCase):

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="tutorial-",
                                    dir=os.environ.get("TEST_TMPDIR"))
        self.addCleanup(shutil.rmtree, self.tmp, ignore_errors=True)
        self.cluster = LocalCluster(shards=2, workerds=2).start()
        self.addCleanup(self.cluster.stop)

    def test_tutorial_top_to_bottom(self):
        with open(TUTORIAL) as f:
            page = f.read()
        found = blocks(page)
        self.assertEqual([run for run, _ in found].count(False), 2)
        script = "\n".join(cmds for run, cmds in found if run)
        for old, new in SUBSTITUTIONS:
            self.assertIn(old, script, "the page changed: update the test")
            script = script.replace(old, new)
        bins = [os.path.dirname(find_binary(b)) for b in
                ("server/psd", "worker/workerd", "tools/psctl/psctl")]
        # The page's `python3` is this test's interpreter (Debian's).
        bins.append(os.path.dirname(sys.executable))
        env = dict(os.environ, PYTHONPATH=HERE, REPO=ROOT,
                   CLUSTER=self.cluster.cluster_file,
                   PATH=os.pathsep.join(bins + [os.environ["PATH"]]))
        p = subprocess.run(["bash", "-euo", "pipefail", "-c", script],
                           cwd=self.tmp, env=env, capture_output=True,
                           text=True, timeout=TIMEOUT_S)
        self.assertEqual(p.returncode, 0,
                         f"{p.stdout[-4000:]}\n{p.stderr[-4000:]}")
        for name in ("train.log", "curves.csv", "model.ts", "model.onnx",
                     "model.pt", "model.npz", "evaluate.log",
                     "finetune.log"):
            self.assertTrue(os.path.isfile(os.path.join(self.tmp, name)),
                            name)

        def read(name):
            with open(os.path.join(self.tmp, name)) as f:
                return f.read()
        reported = re.findall(r"state=SUCCEEDED test_accuracy=([0-9.]+)",
                              read("train.log"))
        evaluated = re.findall(r"test_accuracy=([0-9.]+) examples=10000",
                               read("evaluate.log"))
        self.assertEqual(len(reported), 1, read("train.log"))
        self.assertEqual(len(evaluated), 1, read("evaluate.log"))
        self.assertAlmostEqual(float(evaluated[0]), float(reported[0]),
                               places=4)
        self.assertIn("state=SUCCEEDED", read("finetune.log"))
        print(f"tutorial: reported {reported[0]}, plain PyTorch "
              f"{evaluated[0]}", file=sys.stderr)


if __name__ == "__main__":
    unittest.main()
