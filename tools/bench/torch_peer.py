#!/usr/bin/python3
"""PyTorch reference rows for tools/bench/bench_e2e.sh: the same MLP (or, with
--model cnn, the built-in CNN of configs/jobs/fashion_cnn.pbtxt), data, init,
optimizer and schedule as the parameter-server job, in plain PyTorch.

  # (d) one process, 2 intra-op threads, global batch 2*B:
  /usr/bin/python3 tools/bench/torch_peer.py --mode single --batch 128 --threads 2 \
      --lr 0.025 --epochs 5
  # (e) DistributedDataParallel over gloo: run once per rank, batch B each:
  /usr/bin/python3 tools/bench/torch_peer.py --mode ddp --rank 0 --world 2 \
      --port 29517 --batch 64 --threads 1 --lr 0.025 --epochs 5 &
  /usr/bin/python3 tools/bench/torch_peer.py --mode ddp --rank 1 --world 2 \
      --port 29517 --batch 64 --threads 1 --lr 0.025 --epochs 5

Rank 0 (or the single process) prints one line
  RESULT {"samples_per_s": ..., "time_to_target_s": ..., ...}
and one "eval epoch=E test_accuracy=A elapsed_s=T" line per epoch.

What matches the parameter-server job (see worker/data, core/init.cc):
  - Fashion-MNIST IDX files, pixels mapped to (p / 255 - 0.2860) / 0.3530;
  - 784-256-128-10, ReLU, Glorot-uniform weights, zero biases;
  - --model cnn: conv5x5-32 (padding 2), ReLU, 2x2 max pool, conv5x5-64,
    ReLU, 2x2 max pool, fc 3136-1024, ReLU, fc 1024-10 (ModelSpec.cnn):
    He-normal conv weights (fan_in k*k*c_in), Glorot-uniform fc weights, zero
    biases; --steps-per-epoch caps the steps for a fixed-step timing run;
  - mean softmax cross-entropy over the GLOBAL batch, SGD with momentum 0.9
    (PyTorch's momentum form v = m v + g; p -= lr v, the same as the shard's);
  - steps per epoch floor(floor(60000 / world) / batch) (single: world is 1
    and --batch is the global batch), a fresh shuffle each epoch, each rank
    taking every world-th example of it, the remainder dropped;
  - test accuracy over the 10000 test images after every epoch.
OpenBLAS threads follow --threads (--blas-threads overrides; see
set_blas_threads). Timing: samples_per_s = examples trained / time in the
step loops (evaluation excluded); time_to_target_s = wall time from the first
step to the end of the first evaluation that reaches --target (evaluation
included), the same definitions as the trainer's.
"""

import argparse
import ctypes
import gzip
import json
import os
import sys
import time

try:
    import numpy as np
    import torch
    import torch.distributed as dist
    import torch.nn as nn
except ImportError as e:  # one line instead of a traceback
    sys.exit(f"torch_peer: this python cannot import {e.name} (install it "
             "with tools/setup.sh --torch)")

MEAN, STD = 0.2860, 0.3530


def load_idx(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    magic = int.from_bytes(data[0:4], "big")
    ndim = magic & 0xFF
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    arr = np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim)
    return arr.reshape(dims)


def find(data_dir, name):
    for p in (os.path.join(data_dir, name), os.path.join(data_dir, name + ".gz")):
        if os.path.exists(p):
            return p
    sys.exit(f"torch_peer: {name}(.gz) not found in {data_dir}")


def load_split(data_dir, images, labels, image_shape=False):
    shape = (-1, 1, 28, 28) if image_shape else (-1, 784)
    x = load_idx(find(data_dir, images)).reshape(shape).astype(np.float32)
    x = (x / 255.0 - MEAN) / STD
    y = load_idx(find(data_dir, labels)).astype(np.int64)
    return torch.from_numpy(x), torch.from_numpy(y)


def make_cnn(seed):
    torch.manual_seed(seed)
    model = nn.Sequential(
        nn.Conv2d(1, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(3136, 1024), nn.ReLU(), nn.Linear(1024, 10))
    for m in model:
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, nonlinearity="relu")
            nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Linear):
            nn.init.xavier_uniform_(m.weight)
            nn.init.zeros_(m.bias)
    return model


def make_model(seed):
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128),
                          nn.ReLU(), nn.Linear(128, 10))
    for m in model:
        if isinstance(m, nn.Linear):
            nn.init.xavier_uniform_(m.weight)
            nn.init.zeros_(m.bias)
    return model


def set_blas_threads(n):
    """Debian's torch runs Linear layers on OpenBLAS (BLAS_INFO=generic), whose
    thread count torch.set_num_threads does not touch: left alone, each
    process runs one busy-waiting BLAS thread per core. Returns the count in
    effect, or None when no OpenBLAS is loaded."""
    try:
        lib = ctypes.CDLL("libopenblas.so.0")
    except OSError:
        return None
    if n > 0:
        lib.openblas_set_num_threads(n)
    return lib.openblas_get_num_threads()


def accuracy(model, x, y, chunk=1000):
    model.eval()
    correct = 0
    with torch.no_grad():
        for i in range(0, x.shape[0], chunk):
            out = model(x[i:i + chunk])
            correct += (out.argmax(dim=1) == y[i:i + chunk]).sum().item()
    model.train()
    return correct / x.shape[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mode", choices=["single", "ddp"], required=True)
    ap.add_argument("--model", choices=["mlp", "cnn"], default="mlp")
    ap.add_argument("--steps-per-epoch", type=int, default=0,
                    help="at most this many steps per epoch (0 = all)")
    ap.add_argument("--batch", type=int, required=True,
                    help="examples per step in this process")
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--lr", type=float, required=True)
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--blas-threads", type=int, default=None,
                    help="OpenBLAS threads (default: --threads; 0 = leave "
                    "OpenBLAS's own default, one per core)")
    ap.add_argument("--rank", type=int, default=0)
    ap.add_argument("--world", type=int, default=1)
    ap.add_argument("--port", type=int, default=29500)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--target", type=float, default=0.85)
    ap.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--device", default="cpu",
                    help="cpu, or cuda[:N] (--mode single only): the model "
                    "and the whole data set live there")
    args = ap.parse_args()
    device = torch.device(args.device)
    if device.type == "cuda" and (args.mode != "single" or
                                  not torch.cuda.is_available()):
        sys.exit("torch_peer: --device cuda needs --mode single and a GPU "
                 "torch can see")

    torch.set_num_threads(args.threads)
    torch.set_num_interop_threads(1)
    blas = set_blas_threads(args.threads if args.blas_threads is None
                            else args.blas_threads)
    cnn = args.model == "cnn"
    x_train, y_train = load_split(args.data_dir, "train-images-idx3-ubyte",
                                  "train-labels-idx1-ubyte", cnn)
    x_test, y_test = load_split(args.data_dir, "t10k-images-idx3-ubyte",
                                "t10k-labels-idx1-ubyte", cnn)

    model = make_cnn(args.seed) if cnn else make_model(args.seed)
    model.to(device)
    x_train, y_train, x_test, y_test = (
        t.to(device) for t in (x_train, y_train, x_test, y_test))
    net = model
    world = 1
    if args.mode == "ddp":
        world = args.world
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
        dist.init_process_group("gloo",
                                init_method=f"tcp://127.0.0.1:{args.port}",
                                rank=args.rank, world_size=world)
        net = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(net.parameters(), lr=args.lr, momentum=args.momentum)
    loss_fn = nn.CrossEntropyLoss()
    n = x_train.shape[0]
    # single: --batch is already the global batch (2 * B for bench_e2e.sh).
    steps = (n // world) // args.batch
    if args.steps_per_epoch > 0:
        steps = min(steps, args.steps_per_epoch)
    evaluates = args.rank == 0

    gen = torch.Generator()
    train_s = 0.0
    samples = 0
    time_to_target = None
    acc = -1.0
    start = time.perf_counter()
    for epoch in range(args.epochs):
        gen.manual_seed(args.seed * 1000003 + epoch)  # same order on every rank
        perm = torch.randperm(n, generator=gen)
        if args.mode == "ddp":
            perm = perm[args.rank::world]
        perm = perm.to(device)
        t0 = time.perf_counter()
        for s in range(steps):
            idx = perm[s * args.batch:(s + 1) * args.batch]
            xb = x_train.index_select(0, idx)
            yb = y_train.index_select(0, idx)
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(net(xb), yb)
            loss.backward()
            opt.step()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        train_s += time.perf_counter() - t0
        samples += steps * args.batch * world
        if evaluates:
            acc = accuracy(model, x_test, y_test)
            elapsed = time.perf_counter() - start
            print(f"eval epoch={epoch + 1} test_accuracy={acc:.4f} "
                  f"elapsed_s={elapsed:.3f}", flush=True)
            if time_to_target is None and acc >= args.target:
                time_to_target = elapsed
    wall = time.perf_counter() - start
    if args.mode == "ddp":
        dist.barrier()
        dist.destroy_process_group()
    if evaluates:
        print("RESULT " + json.dumps({
            "mode": args.mode, "model": args.model, "batch": args.batch, "world": world,
            "threads": args.threads, "blas_threads": blas,
            "epochs": args.epochs, "lr": args.lr,
            "steps_per_epoch": steps, "samples_per_s": samples / train_s,
            "time_to_target_s": time_to_target, "test_accuracy": acc,
            "train_s": train_s, "wall_s": wall, "torch": torch.__version__,
            "device": (torch.cuda.get_device_name(device)
                       if device.type == "cuda" else "cpu"),
        }), flush=True)


if __name__ == "__main__":
    main()
