#!/usr/bin/python3
"""psclient.torch with a model on a CUDA device (psclient/torch_cuda.py).

Everywhere: the device checks (CPU models keep the CPU path, a parameter on
a device the client does not exchange is refused naming it, parameters
spread over devices are refused) and the module imports without CUDA.

With a GPU (torch.cuda.is_available()): the same model trained on the GPU
and on the CPU from the same shards' initial values, BSP, SGD with momentum,
STEPS steps, with gradient accumulation in one of the runs' steps, ends at
the same parameters to ATOL, and the GPU model's parameters stay on the
device. Tolerance: cuBLAS and the CPU's GEMMs sum in other orders (float32
rounding of the gradient, ~1e-7 relative), which SGD turns into parameter
differences of lr * steps * that; ATOL = 1e-5 is far above that and far
below any real error (a missed or doubled gradient moves parameters by
lr * |grad| ~ 1e-3). Without a GPU that test skips, saying so.
"""

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

if torch is not None:
    import psclient
    import psclient.torch as pst  # noqa: E402
    from psclient import torch_cuda  # noqa: E402

STEPS = 4
BATCH = 32
ATOL = 1e-5
OPTIMIZER = {"kind": "SGD", "learning_rate": 0.05, "momentum": 0.9}


def model():
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))


def no_cuda_reason():
    if torch is None:
        return "python3-torch is not installed"
    if not torch.cuda.is_available():
        return ("torch.cuda.is_available() is false: no CUDA device (or "
                "torch built without CUDA), so the GPU path cannot run here")
    return None


@unittest.skipIf(torch is None, "python3-torch is not installed")
class DeviceChecksTest(unittest.TestCase):

    def test_cpu_model_keeps_the_cpu_path(self):
        params = list(model().named_parameters())
        self.assertIsNone(torch_cuda.cuda_device(params))

    def test_other_device_refused_naming_the_parameter(self):
        net = model()
        net[2].bias = nn.Parameter(torch.empty(4, device="meta"))
        with self.assertRaisesRegex(ValueError, r"'2\.bias'.*meta"):
            torch_cuda.cuda_device(list(net.named_parameters()))
        with self.assertRaisesRegex(psclient.ShapeError, r"'2\.bias'.*meta"):
            pst.job_spec(net, "j", 1, OPTIMIZER)


@unittest.skipIf(no_cuda_reason() is not None, no_cuda_reason() or "")
class CudaTrainingTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        from psclient.testing import LocalCluster
        cls.cluster = LocalCluster(shards=2).start()

    @classmethod
    def tearDownClass(cls):
        cls.cluster.stop()

    def train(self, job, device):
        torch.manual_seed(0)
        net = model().to(device)
        ps = pst.join(net, job=job, workers=1, batch_size=BATCH,
                      optimizer=OPTIMIZER, mode="bsp",
                      cluster=self.cluster.cluster_file)
        g = torch.Generator().manual_seed(3)
        for t in range(STEPS):
            x = torch.randn(BATCH, 16, generator=g).to(device)
            y = torch.randint(0, 4, (BATCH,), generator=g).to(device)
            if t == 1:  # two micro-batches, the first inside no_sync
                with ps.no_sync():
                    (F.cross_entropy(net(x[:16]), y[:16]) / 2).backward()
                (F.cross_entropy(net(x[16:]), y[16:]) / 2).backward()
            else:
                F.cross_entropy(net(x), y).backward()
            ps.step()
        for _, p in net.named_parameters():
            self.assertEqual(p.device.type, torch.device(device).type)
        out = {n: p.detach().cpu().clone() for n, p in net.named_parameters()}
        ps.finish()
        return out

    def test_gpu_model_trains_as_the_cpu_model(self):
        cpu = self.train("cuda-test-cpu", "cpu")
        gpu = self.train("cuda-test-gpu", "cuda")
        worst = max((cpu[n] - gpu[n]).abs().max().item() for n in cpu)
        print("largest |cpu - gpu| parameter difference: %.3g" % worst,
              file=sys.stderr)
        self.assertLess(worst, ATOL)


if __name__ == "__main__":
    unittest.main(verbosity=2)
