#!/usr/bin/python3
"""Tests of tools/bench/ctr_torch_peer.py on small generated files (fixed seeds).

  /usr/bin/python3 -m pytest -q tools/bench/ctr_torch_peer_test.py
  /usr/bin/python3 tools/bench/ctr_torch_peer_test.py     # the same, via unittest

Every test is skipped, with the reason, where PyTorch is not installed.
"""

import importlib.util
import itertools
import json
import os
import subprocess
import sys
import tempfile
import unittest
from typing import Dict, List

import numpy as np

TOOLS = os.path.dirname(os.path.abspath(__file__))
PEER = os.path.join(TOOLS, "ctr_torch_peer.py")
HAVE_TORCH = importlib.util.find_spec("torch") is not None
NO_TORCH = "PyTorch is not installed (apt install python3-torch)"
TIMEOUT_S = 240
RESULT_FIELDS = (
    "mode", "procs", "grad_exchange", "global_batch", "steps",
    "samples_per_s", "samples_per_s_incl_warmup", "wall_s", "train_s",
    "steady_s", "steady_cpu_s",
    "test_auc", "test_logloss", "time_to_auc_s", "target_auc", "evals",
    "cardinalities", "table_rows", "teacher_auc", "torch")

if HAVE_TORCH:
    sys.path.insert(0, TOOLS)
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    import torch.nn as nn

    import ctr_torch_peer as peer
    import ctr_torch_peer_fixture as fixture


def cores(n: int) -> str:
    """n cores from this process's affinity set (repeating if too few)."""
    allowed = sorted(os.sched_getaffinity(0))
    return ",".join(str(c) for c in itertools.islice(
        itertools.cycle(allowed), n))


def run_peer(args: List[str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, PEER] + args, capture_output=True,
                          text=True, timeout=TIMEOUT_S)


def ddp_grads(rank: int, world: int, port: int, path: str, cards: List[int],
              out: str) -> None:
    """One DDP backward on half the batch per rank; rank 0 saves the grads."""
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}",
                            rank=rank, world_size=world)
    batcher = peer.Batcher(cards)
    model = peer.CtrModel(batcher.rows, 4, [8], "normal", 0.1, 7)
    net = nn.parallel.DistributedDataParallel(model)
    recs = peer.open_records(path)
    half = len(recs) // world
    rows, dense, y = batcher(recs[rank * half:(rank + 1) * half])
    nn.BCEWithLogitsLoss()(net(rows, dense), y).backward()
    if rank == 0:
        torch.save({n: (p.grad.to_dense() if p.grad.is_sparse else p.grad)
                    for n, p in model.named_parameters()}, out)
    dist.barrier()
    dist.destroy_process_group()


@unittest.skipUnless(HAVE_TORCH, NO_TORCH)
class CtrTorchPeerTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls) -> None:
        cls.tmp = tempfile.TemporaryDirectory()
        d = cls.tmp.name
        cls.cards = fixture.cardinalities(200, 5)
        cls.train = os.path.join(d, "train.bin")
        cls.test = os.path.join(d, "test.bin")
        cls.meta = fixture.generate(cls.train, 8192, 1, 1, cls.cards)
        fixture.generate(cls.test, 2048, 2, 1, cls.cards)

    @classmethod
    def tearDownClass(cls) -> None:
        cls.tmp.cleanup()

    def train_and_check(self, procs: int, batch: int) -> Dict:
        out = os.path.join(self.tmp.name, f"result{procs}.json")
        p = run_peer(["--train", self.train, "--test", self.test,
                      "--procs", str(procs), "--cores", cores(procs),
                      "--batch", str(batch), "--epochs", "2",
                      "--eval-every", "16", "--warmup-steps", "4",
                      "--target-auc", "0.7", "--out", out])
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("RESULT ", p.stdout)
        with open(out) as f:
            r = json.load(f)
        for k in RESULT_FIELDS:
            self.assertIn(k, r)
        self.assertEqual(r["procs"], procs)
        self.assertEqual(r["global_batch"], batch * procs)
        self.assertEqual(r["steps"], 2 * (8192 // batch // procs))
        self.assertEqual(r["cardinalities"], self.cards)
        self.assertEqual(r["table_rows"], sum(c + 1 for c in self.cards))
        self.assertGreater(r["samples_per_s"], 0)
        self.assertGreater(r["test_auc"], 0.7)
        self.assertLessEqual(r["test_auc"], self.meta["teacher_auc"] + 0.02)
        self.assertIsNotNone(r["time_to_auc_s"])
        self.assertLessEqual(r["time_to_auc_s"], r["wall_s"])
        self.assertEqual(r["evals"][-1]["step"], r["steps"])
        return r

    def test_single_process_learns(self) -> None:
        r = self.train_and_check(1, 128)
        self.assertEqual(r["mode"], "single")

    def test_ddp_two_processes_learn(self) -> None:
        r = self.train_and_check(2, 64)
        self.assertEqual(r["mode"], "ddp")
        self.assertIn("sparse all-reduce", r["grad_exchange"])

    def test_ddp_gradients_equal_single_process(self) -> None:
        path = os.path.join(self.tmp.name, "small.bin")
        with open(path, "wb") as f:
            f.write(peer.open_records(self.train)[:64].tobytes())
        out = os.path.join(self.tmp.name, "ddp_grads.pt")
        mp.spawn(ddp_grads, nprocs=2,
                 args=(2, peer.free_port(), path, self.cards, out))
        got = torch.load(out)
        batcher = peer.Batcher(self.cards)
        model = peer.CtrModel(batcher.rows, 4, [8], "normal", 0.1, 7)
        rows, dense, y = batcher(peer.open_records(path))
        nn.BCEWithLogitsLoss()(model(rows, dense), y).backward()
        for name, p in model.named_parameters():
            want = p.grad.to_dense() if p.grad.is_sparse else p.grad
            self.assertTrue(torch.allclose(got[name], want, atol=1e-6),
                            f"{name}: DDP gradient differs")

    def test_exact_auc_matches_pair_count(self) -> None:
        rng = np.random.default_rng(3)
        y = rng.random(300) < 0.4
        s = rng.integers(0, 20, 300).astype(np.float64)  # many ties
        pos, neg = s[y], s[~y]
        diff = pos[:, None] - neg[None, :]
        want = ((diff > 0).sum() + 0.5 * (diff == 0).sum()) / diff.size
        self.assertAlmostEqual(peer.exact_auc(y, s), want, places=12)

    def test_bad_files_are_named(self) -> None:
        d = self.tmp.name
        recs = np.array(peer.open_records(self.train)[:10])
        cases = []
        short = os.path.join(d, "short.bin")
        with open(short, "wb") as f:
            f.write(recs.tobytes()[:-1])
        cases.append((short, "not a positive multiple"))
        wrong_field = recs.copy()
        wrong_field["ids"][3, 5] = np.uint64(7 << peer.VALUE_BITS)
        cases.append((wrong_field, "record 3: ids[5] has field 7"))
        too_big = recs.copy()
        too_big["ids"][2, 0] = np.uint64(self.cards[0])
        cases.append((too_big, f"field 0: value {self.cards[0]}"))
        bad_label = recs.copy()
        bad_label["label"][4] = 0.5
        cases.append((bad_label, "record 4: label 0.5"))
        for i, (data, want) in enumerate(cases):
            path = data
            if not isinstance(data, str):
                path = os.path.join(d, f"bad{i}.bin")
                with open(path, "wb") as f:
                    f.write(data.tobytes())
                with open(self.train + ".json") as src, \
                        open(path + ".json", "w") as dst:
                    dst.write(src.read())
            p = run_peer(["--train", path, "--test", self.test,
                          "--cores", cores(1)])
            self.assertEqual(p.returncode, 1, want)
            self.assertIn(path, p.stderr)
            self.assertIn(want, p.stderr)


if __name__ == "__main__":
    unittest.main()
