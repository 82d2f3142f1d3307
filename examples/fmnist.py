"""Fashion-MNIST for the examples: Debian's dataset-fashion-mnist IDX files
as torch tensors, normalized as the built-in jobs do, and test accuracy."""

import gzip
import os

import numpy as np
import torch

# Debian's dataset-fashion-mnist; $FMNIST_DIR elsewhere (a GPU machine).
DATA_DIR = os.environ.get("FMNIST_DIR", "/usr/share/datasets/fashion-mnist")
MEAN, STD = 0.2860, 0.3530


def _idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load(split, data_dir=DATA_DIR, limit=0):
    """A TensorDataset of (N, 1, 28, 28) float images and int64 labels;
    split is "train" or "t10k"; limit > 0 keeps the first `limit`."""
    images = _idx(os.path.join(data_dir, "%s-images-idx3-ubyte.gz" % split))
    labels = _idx(os.path.join(data_dir, "%s-labels-idx1-ubyte.gz" % split))
    if limit:
        images, labels = images[:limit], labels[:limit]
    x = (torch.from_numpy(images.astype(np.float32)) / 255 - MEAN) / STD
    return torch.utils.data.TensorDataset(
        x.unsqueeze(1), torch.from_numpy(labels.astype(np.int64)))


@torch.no_grad()
def accuracy(model, dataset, batch_size=1000):
    model.eval()
    correct = 0
    device = next(model.parameters()).device
    for x, y in torch.utils.data.DataLoader(dataset, batch_size=batch_size):
        x, y = x.to(device), y.to(device)
        correct += (model(x).argmax(1) == y).sum().item()
    model.train()
    return correct / len(dataset)
