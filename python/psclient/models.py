"""The built-in models (workerd's softmax regression, MLP and CNN,
core/model_spec.h) as torch.nn modules, and an exported job's parameters
(psctl export's .npz) as their state_dict.

    import numpy as np, psclient.models
    with np.load("model.npz") as z:
        model, state = psclient.models.from_npz(z)
    model.load_state_dict(state)       # model(x): logits, x (N, 1, 28, 28)

The modules compute what the workers compute, layer for layer:
- Mlp (also softmax regression: no hidden layers): fc0, fc1, ... nn.Linear,
  ReLU after every layer but the last; the input is flattened (N, -1).
- Cnn: conv0, conv1, ... nn.Conv2d (k x k, "same" zero padding (k - 1) / 2,
  stride 1), ReLU, then pool x pool max pooling with stride pool (floor,
  as nn.MaxPool2d; none when pool is 1); then the fc layers as Mlp's on the
  flattened (N, C * H * W) output. Images are NCHW, as PyTorch's are.
Outputs are logits (the workers' softmax belongs to the loss).

The mapping, tensor by tensor (the workers' layouts, core/model_spec.h):
- "fc<i>/w" [in, out] (row-major) -> fc<i>.weight [out, in] = its transpose;
  "fc<i>/b" -> fc<i>.bias.
- "conv<i>/w" [k * k * c_in, filters], row (c * k + i) * k + j (the im2col
  order, worker/backend/backend.h) -> conv<i>.weight [filters, c_in, k, k];
  "conv<i>/b" -> conv<i>.bias.
- A CNN's fc0 reads the last conv layer's output flattened NHWC (row,
  column, channel) on the workers and NCHW here: fc0.weight's columns are
  permuted accordingly, so the module takes a standard flatten.

Needs PyTorch (python3-torch); numpy arrays in, torch tensors out.
"""

import json
from typing import Dict, List, Mapping, Sequence, Tuple

import numpy as np
import torch
from torch import nn

JOB_SPEC_KEY = "__job_spec__"


class Mlp(nn.Module):
    """The built-in MLP (softmax regression when `hidden` is empty)."""

    def __init__(self, input_dim: int, hidden: Sequence[int],
                 num_classes: int):
        super().__init__()
        widths = [int(input_dim)] + [int(h) for h in hidden]
        widths.append(int(num_classes))
        self.num_layers = len(widths) - 1
        for i in range(self.num_layers):
            setattr(self, f"fc{i}", nn.Linear(widths[i], widths[i + 1]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.flatten(x, 1)
        for i in range(self.num_layers):
            x = getattr(self, f"fc{i}")(x)
            if i + 1 < self.num_layers:
                x = torch.relu(x)
        return x


class Cnn(nn.Module):
    """The built-in CNN: conv layers (filters, kernel, pool) on
    height x width x channels images, then an Mlp-like stack."""

    def __init__(self, height: int, width: int, channels: int,
                 conv: Sequence[Tuple[int, int, int]], hidden: Sequence[int],
                 num_classes: int):
        super().__init__()
        self.num_conv = len(conv)
        self.pools: List[int] = []
        h, w, c = int(height), int(width), int(channels)
        self.image_shape = (c, h, w)  # one example, NCHW
        for i, (filters, kernel, pool) in enumerate(conv):
            setattr(self, f"conv{i}", nn.Conv2d(
                c, int(filters), int(kernel), padding=(int(kernel) - 1) // 2))
            self.pools.append(int(pool))
            c = int(filters)
            h, w = h // int(pool), w // int(pool)
        self.out_shape = (c, h, w)  # of the last conv layer, pooled
        widths = [c * h * w] + [int(x) for x in hidden] + [int(num_classes)]
        self.num_fc = len(widths) - 1
        for i in range(self.num_fc):
            setattr(self, f"fc{i}", nn.Linear(widths[i], widths[i + 1]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for i in range(self.num_conv):
            x = torch.relu(getattr(self, f"conv{i}")(x))
            if self.pools[i] > 1:
                x = nn.functional.max_pool2d(x, self.pools[i])
        x = torch.flatten(x, 1)
        for i in range(self.num_fc):
            x = getattr(self, f"fc{i}")(x)
            if i + 1 < self.num_fc:
                x = torch.relu(x)
        return x


def _uint(spec: Mapping, key: str, where: str) -> int:
    v = spec.get(key, 0)
    try:
        v = int(v)
    except (TypeError, ValueError):
        raise ValueError(f"{where}.{key}: expected a whole number, got {v!r}")
    if v <= 0:
        raise ValueError(f"{where}.{key}: must be > 0, got {v}")
    return v


def _hidden(spec: Mapping, where: str) -> List[int]:
    return [_uint({"hidden": h}, "hidden", f"{where}")
            for h in spec.get("hidden", [])]


def module_for(model_spec: Mapping) -> nn.Module:
    """The torch module of a JobSpec.model (as JSON: the "__job_spec__"
    entry's "model"). ValueError naming the field for a model that is not
    one of the built-in softmax, MLP or CNN (a custom model is the user's
    own module; CTR and lab models have no module here)."""
    if not isinstance(model_spec, Mapping):
        raise ValueError("model: expected an object")
    if "softmax" in model_spec:
        s = model_spec["softmax"]
        return Mlp(_uint(s, "input_dim", "model.softmax"), [],
                   _uint(s, "num_classes", "model.softmax"))
    if "mlp" in model_spec:
        s = model_spec["mlp"]
        return Mlp(_uint(s, "input_dim", "model.mlp"),
                   _hidden(s, "model.mlp.hidden"),
                   _uint(s, "num_classes", "model.mlp"))
    if "cnn" in model_spec:
        s = model_spec["cnn"]
        conv = []
        for i, layer in enumerate(s.get("conv", [])):
            where = f"model.cnn.conv[{i}]"
            pool = layer.get("pool", 2)  # ConvLayer.pool's default
            conv.append((_uint(layer, "filters", where),
                         _uint(layer, "kernel", where),
                         _uint({"pool": pool}, "pool", where)))
        if not conv:
            raise ValueError("model.cnn.conv: at least one layer")
        return Cnn(_uint(s, "height", "model.cnn"),
                   _uint(s, "width", "model.cnn"),
                   _uint(s, "channels", "model.cnn"), conv,
                   _hidden(s, "model.cnn.hidden"),
                   _uint(s, "num_classes", "model.cnn"))
    kind = next(iter(model_spec), "none")
    raise ValueError(
        f"model.{kind}: only the built-in softmax, mlp and cnn models have a "
        "torch module here (a custom model's .npz holds its own "
        "named_parameters: load it into the user's module)")


def _take(arrays: Mapping[str, np.ndarray], name: str,
          shape: Tuple[int, ...]) -> np.ndarray:
    if name not in arrays:
        raise ValueError(f'tensor "{name}": not in the exported file')
    a = np.asarray(arrays[name])
    if a.dtype != np.float32 or tuple(a.shape) != tuple(shape):
        raise ValueError(
            f'tensor "{name}": {a.dtype} {list(a.shape)} in the file, the '
            f"model has float32 {list(shape)}")
    return a


def state_dict(module: nn.Module,
               arrays: Mapping[str, np.ndarray]) -> Dict[str, torch.Tensor]:
    """`module`'s state_dict (a module_for one) from the workers' tensors
    by name (see the file comment). ValueError naming the tensor when one
    is missing or has another shape or dtype."""
    out: Dict[str, torch.Tensor] = {}
    num_conv = module.num_conv if isinstance(module, Cnn) else 0
    for i in range(num_conv):
        conv = getattr(module, f"conv{i}")
        f, c, k, _ = conv.weight.shape
        w = _take(arrays, f"conv{i}/w", (k * k * c, f))
        out[f"conv{i}.weight"] = torch.from_numpy(
            np.ascontiguousarray(w.T.reshape(f, c, k, k)))
        out[f"conv{i}.bias"] = torch.from_numpy(
            _take(arrays, f"conv{i}/b", (f,)).copy())
    num_fc = module.num_fc if isinstance(module, Cnn) else module.num_layers
    for i in range(num_fc):
        fc = getattr(module, f"fc{i}")
        n_out, n_in = fc.weight.shape
        w = _take(arrays, f"fc{i}/w", (n_in, n_out)).T  # [out, in]
        if i == 0 and num_conv:
            # Columns NHWC (the workers' flatten) -> NCHW (torch.flatten).
            c, h, wd = module.out_shape
            w = w.reshape(n_out, h, wd, c).transpose(0, 3, 1, 2)
            w = w.reshape(n_out, n_in)
        out[f"fc{i}.weight"] = torch.from_numpy(np.ascontiguousarray(w))
        out[f"fc{i}.bias"] = torch.from_numpy(
            _take(arrays, f"fc{i}/b", (n_out,)).copy())
    names = set(arrays) - {JOB_SPEC_KEY}
    expected = {k.replace(".weight", "/w").replace(".bias", "/b")
                for k in out}
    extra = sorted(names - expected)
    if extra:
        raise ValueError(f'tensor "{extra[0]}": the model has no such tensor')
    return out


def job_spec(arrays: Mapping[str, np.ndarray]) -> dict:
    """The JobSpec (JSON, proto field names) an exported file carries."""
    if JOB_SPEC_KEY not in arrays:
        raise ValueError(f"{JOB_SPEC_KEY}: not in the file (not written by "
                         "psctl export?)")
    try:
        spec = json.loads(np.asarray(arrays[JOB_SPEC_KEY]).item())
    except (ValueError, TypeError) as e:
        raise ValueError(f"{JOB_SPEC_KEY}: not a JSON JobSpec: {e}")
    if not isinstance(spec, dict):
        raise ValueError(f"{JOB_SPEC_KEY}: not a JSON JobSpec")
    return spec


def from_npz(arrays: Mapping[str, np.ndarray]
             ) -> Tuple[nn.Module, Dict[str, torch.Tensor]]:
    """(module, state_dict) of an exported built-in model: np.load(path)
    or any mapping of its arrays. The module is in eval mode with the
    state loaded. ValueError naming the field or tensor."""
    spec = job_spec(arrays)
    module = module_for(spec.get("model", {}))
    state = state_dict(module, arrays)
    module.load_state_dict(state)
    module.eval()
    return module, state


def input_shape(module: nn.Module) -> Tuple[int, ...]:
    """One example's input shape: (C, H, W) for a Cnn, (input_dim,) for an
    Mlp."""
    if isinstance(module, Cnn):
        return module.image_shape
    return (module.fc0.weight.shape[1],)
