#!/usr/bin/python3
"""Gradient accumulation in psclient.torch against real psd processes: a
step of 4 micro-batches of 16 (the first 3 backward passes inside
ps.no_sync(), each loss scaled by 1/4) gives the parameters that one batch
of 64 gives, step after step (BSP, SGD with momentum, STEPS steps), and so
does a step whose 4 backward passes all run inside no_sync (step() sends
the sums). Misuse raises naming no_sync.

Tolerance. Both runs compute the same mean gradient, summed in another
order: the large batch sums 64 per-example terms inside one GEMM, the
micro-batches sum 4 partial GEMMs of 16 (each already divided by 4) in
float32. The two gradients differ by float32 rounding of sums of 64 terms
(a few ulp of the gradient's magnitude, ~1e-7 relative); the optimizer
turns that into parameter differences of lr * (steps with momentum) * that,
far below ATOL = 1e-6 for parameters of magnitude ~0.1 and gradients
~1e-2 (measured: 3e-8 at most, printed by the test). Bitwise equality is
not promised: GEMM blocking differs by size.
"""

import contextlib
import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)  # the package psclient (runfiles or a checkout)

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError:  # python3-torch is a test-path package
    torch = None

from psclient.testing import LocalCluster  # noqa: E402

if torch is not None:
    import psclient.torch as pst  # noqa: E402

STEPS = 5
BATCH = 64
MICRO = 4
ATOL = 1e-6
OPTIMIZER = {"kind": "SGD", "learning_rate": 0.05, "momentum": 0.9}


def model():
    return nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10))


@unittest.skipIf(torch is None, "python3-torch is not installed")
class AccumulationTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.cluster = LocalCluster(shards=2).start()

    @classmethod
    def tearDownClass(cls):
        cls.cluster.stop()

    def setUp(self):
        g = torch.Generator().manual_seed(7)
        self.x = torch.randn(STEPS, BATCH, 32, generator=g)
        self.y = torch.randint(0, 10, (STEPS, BATCH), generator=g)
        torch.set_num_threads(1)

    def train(self, job, micro_batches, last_outside):
        """STEPS steps of BATCH examples in `micro_batches` backward
        passes; the trained parameters by name."""
        net = model()
        ps = pst.join(net, job=job, workers=1, batch_size=BATCH,
                      optimizer=OPTIMIZER, mode="bsp",
                      cluster=self.cluster.cluster_file)
        self.addCleanup(ps.close)
        self.start = {n: p.detach().clone() for n, p in net.named_parameters()}
        for t in range(STEPS):
            xs = self.x[t].chunk(micro_batches)
            ys = self.y[t].chunk(micro_batches)
            for i, (x, y) in enumerate(zip(xs, ys)):
                last = i + 1 == micro_batches
                ctx = (contextlib.nullcontext() if last and last_outside
                       else ps.no_sync())
                with ctx:
                    loss = F.cross_entropy(net(x), y) / micro_batches
                    loss.backward()
            ps.step()
        params = {n: p.detach().clone() for n, p in net.named_parameters()}
        return ps, net, params

    def test_micro_batches_give_the_large_batch_parameters(self):
        _, _, large = self.train("large", 1, True)
        _, _, overlapped = self.train("micro", MICRO, True)
        ps, net, summed = self.train("micro-all-no-sync", MICRO, False)
        for name, p in large.items():
            # The same start (the job seed), and it trained.
            self.assertFalse(torch.equal(p, self.start[name]), name)
            for other in (overlapped, summed):
                torch.testing.assert_close(other[name], p, rtol=0,
                                           atol=ATOL, msg=name)
        worst = max((o[n] - p).abs().max().item() for n, p in large.items()
                    for o in (overlapped, summed))
        print(f"accumulation: largest |difference| {worst:.3g} (atol "
              f"{ATOL:g})", file=sys.stderr)

        # Misuse: a second backward outside no_sync, step() inside it.
        x, y = self.x[0], self.y[0]
        with self.assertRaisesRegex(RuntimeError, "no_sync"):
            with ps.no_sync():
                ps.step()
        F.cross_entropy(net(x), y).backward()
        with self.assertRaisesRegex(RuntimeError, "no_sync"):
            F.cross_entropy(net(x), y).backward()


if __name__ == "__main__":
    unittest.main()
