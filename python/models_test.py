#!/usr/bin/python3
"""psclient.models against a numpy reference of what the workers compute
(core/model_spec.h, worker/backend/backend.h): the flat tensors "conv<i>/w"
[k * k * c_in, filters] with row (c * k + i) * k + j (im2col), images and
the last conv output NHWC, "fc<i>/w" [in, out]; in float64, on random
parameters (seed 0). The modules take NCHW images and agree to float32
rounding (relative 1e-5 of the largest logit). Bad files are refused
naming the tensor or field.
"""

import json
import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)  # the package psclient (runfiles or a checkout)

import numpy as np  # noqa: E402

try:
    import torch
except ImportError:  # python3-torch is a test-path package
    torch = None

if torch is not None:
    from psclient import models  # noqa: E402


def im2col(x, k):
    """x (N, H, W, C) -> (N * H * W, C * k * k), column (c * k + i) * k + j,
    "same" zero padding."""
    n, h, w, c = x.shape
    p = (k - 1) // 2
    xp = np.pad(x, ((0, 0), (p, p), (p, p), (0, 0)))
    cols = np.zeros((n, h, w, c * k * k))
    for ch in range(c):
        for i in range(k):
            for j in range(k):
                cols[..., (ch * k + i) * k + j] = xp[:, i:i + h, j:j + w, ch]
    return cols.reshape(n * h * w, c * k * k)


def reference(arrays, model, x):
    """The workers' logits for x (N, H, W, C), float64."""
    n = x.shape[0]
    for i, layer in enumerate(model.get("cnn", {}).get("conv", [])):
        k, f, pool = layer["kernel"], layer["filters"], layer.get("pool", 2)
        h, w = x.shape[1:3]
        y = im2col(x, k) @ arrays[f"conv{i}/w"] + arrays[f"conv{i}/b"]
        y = np.maximum(y, 0).reshape(n, h, w, f)
        if pool > 1:
            ho, wo = h // pool, w // pool
            y = y[:, :ho * pool, :wo * pool].reshape(
                n, ho, pool, wo, pool, f).max(axis=(2, 4))
        x = y
    h = x.reshape(n, -1)
    spec = next(iter(model.values()))
    layers = len(spec.get("hidden", [])) + 1
    for i in range(layers):
        h = h @ arrays[f"fc{i}/w"] + arrays[f"fc{i}/b"]
        if i + 1 < layers:
            h = np.maximum(h, 0)
    return h


def exported(model, shapes, seed=0):
    rng = np.random.default_rng(seed)
    arrays = {k: rng.standard_normal(s).astype(np.float32)
              for k, s in shapes.items()}
    arrays["__job_spec__"] = np.array(json.dumps({"model": model}).encode())
    return arrays


CNN = {"cnn": {"height": 9, "width": 7, "channels": 2, "num_classes": 5,
               "conv": [{"filters": 3, "kernel": 3},
                        {"filters": 4, "kernel": 5, "pool": 1}],
               "hidden": [6]}}
CNN_SHAPES = {"conv0/w": (18, 3), "conv0/b": (3,), "conv1/w": (75, 4),
              "conv1/b": (4,), "fc0/w": (4 * 3 * 4, 6), "fc0/b": (6,),
              "fc1/w": (6, 5), "fc1/b": (5,)}
MLP = {"mlp": {"input_dim": 12, "hidden": [7, 6], "num_classes": 3}}
MLP_SHAPES = {"fc0/w": (12, 7), "fc0/b": (7,), "fc1/w": (7, 6),
              "fc1/b": (6,), "fc2/w": (6, 3), "fc2/b": (3,)}


@unittest.skipIf(torch is None, "python3-torch is not installed")
class ModelsTest(unittest.TestCase):

    def check(self, model, shapes, image):
        arrays = exported(model, shapes)
        module, state = models.from_npz(arrays)
        self.assertEqual(sorted(state), sorted(module.state_dict()))
        x = np.random.default_rng(1).standard_normal((4,) + image)
        ref = reference({k: v.astype(np.float64) for k, v in arrays.items()
                         if k != "__job_spec__"}, model, x)
        nchw = torch.from_numpy(x.transpose(0, 3, 1, 2).astype(np.float32))
        with torch.no_grad():
            out = module(nchw.contiguous()).numpy()
        self.assertEqual(out.shape, ref.shape)
        np.testing.assert_allclose(out, ref, rtol=0,
                                   atol=1e-5 * np.abs(ref).max())
        return arrays

    def test_cnn_matches_the_workers_layers(self):
        self.check(CNN, CNN_SHAPES, (9, 7, 2))

    def test_mlp_and_softmax_match_the_workers_layers(self):
        self.check(MLP, MLP_SHAPES, (12, 1, 1))
        self.check({"softmax": {"input_dim": 12, "num_classes": 3}},
                   {"fc0/w": (12, 3), "fc0/b": (3,)}, (12, 1, 1))

    def test_bad_files_are_refused_naming_what(self):
        arrays = exported(CNN, CNN_SHAPES)
        cases = [
            (dict(arrays, **{"conv1/w": np.zeros((99, 4), np.float32)}),
             'tensor "conv1/w"'),
            ({k: v for k, v in arrays.items() if k != "fc1/b"},
             'tensor "fc1/b": not in'),
            (dict(arrays, extra=np.zeros(1, np.float32)), 'tensor "extra"'),
            (dict(arrays, **{"fc0/b": np.zeros(6, np.float64)}),
             'tensor "fc0/b": float64'),
            ({k: v for k, v in arrays.items() if k != "__job_spec__"},
             "__job_spec__"),
            (exported({"custom": {}}, {}), "model.custom"),
            (exported({"cnn": dict(CNN["cnn"], conv=[])}, {}),
             "model.cnn.conv"),
            (exported({"mlp": dict(MLP["mlp"], hidden=[0])}, {}),
             "model.mlp.hidden"),
        ]
        for bad, named in cases:
            with self.assertRaises(ValueError) as e:
                models.from_npz(bad)
            self.assertIn(named, str(e.exception))


if __name__ == "__main__":
    unittest.main()
