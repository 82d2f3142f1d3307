#!/usr/bin/python3
"""A 2-conv CNN on Fashion-MNIST in PyTorch, trained through the parameter
servers (the net of configs/jobs/fashion_cnn.pbtxt, the built-in CNN).

    tools/demo.sh examples/torch_fmnist_cnn.py     # a local cluster, 2 workers
    python3 -m psclient.run --cluster=configs/local/cluster.pbtxt --workers=2 \
        examples/torch_fmnist_cnn.py --epochs=10

The lines marked "# ps" are what differs from a plain PyTorch loop.
--device=cuda trains the model on the GPU (psclient.torch exchanges its
parameters through pinned host buffers; docs/GPU.md).
"""

import argparse
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fmnist  # noqa: E402
import psclient.torch  # noqa: E402  # ps


def cnn(hidden):
    return nn.Sequential(
        nn.Conv2d(1, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * 7 * 7, hidden), nn.ReLU(),
        nn.Linear(hidden, 10))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--job", default="torch-cnn")
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--lr", type=float, default=0.02)
    p.add_argument("--max-train", type=int, default=0, help="0: all 60000")
    p.add_argument("--max-test", type=int, default=0, help="0: all 10000")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    a = p.parse_args()
    torch.manual_seed(a.seed)
    torch.set_num_threads(a.threads)

    device = torch.device(a.device)
    model = cnn(a.hidden).to(device)
    ps = psclient.torch.join(  # ps
        model, job=a.job, batch_size=a.batch_size, seed=a.seed,
        optimizer={"kind": "SGD", "learning_rate": a.lr, "momentum": 0.9})
    train = fmnist.load("train", limit=a.max_train)
    test = fmnist.load("t10k", limit=a.max_test)
    sampler = torch.utils.data.DistributedSampler(  # ps
        train, num_replicas=ps.world_size, rank=ps.rank, seed=a.seed,
        drop_last=True)
    loader = torch.utils.data.DataLoader(train, batch_size=a.batch_size,
                                         sampler=sampler, drop_last=True)
    trained, train_s = 0, 0.0
    for epoch in range(a.epochs):
        sampler.set_epoch(epoch)
        t0 = time.monotonic()
        for x, y in ps.timed(loader):  # ps: timed() counts the data wait
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            ps.step(loss=loss.item())  # ps: was optimizer.step()
            trained += len(y)
        train_s += time.monotonic() - t0
        if ps.leads:  # one worker evaluates (rank 0); psctl status shows it
            acc = fmnist.accuracy(model, test)
            ps.report(epoch=epoch + 1, test_accuracy=acc)
            print("rank %d epoch %d step %d loss %.4f test_accuracy %.4f "
                  "samples_per_s %.1f"
                  % (ps.rank, epoch + 1, ps.step_count, loss.item(), acc,
                     trained * ps.world_size / train_s), flush=True)
    ps.finish()  # ps


if __name__ == "__main__":
    main()
