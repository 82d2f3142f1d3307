#!/usr/bin/python3
"""PyTorch's forward+backward time per sample for the MLP 784-256-128-10 or
the built-in CNN (the nets of torch_peer.py), for
worker/model:model_benchmark's same-run ratio. Runs on the cores it was
started on (the benchmark pins itself and this inherits it).

  /usr/bin/python3 tools/bench/torch_step.py --model cnn --batch 64 --threads 1

Prints one line: RESULT {"us_per_sample": median, "runs": [...], ...}.
One step is what the benchmark's ComputeGradient is: forward, mean softmax
cross-entropy, backward into the parameters' gradients (no optimizer).
"""

import argparse
import json
import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_peer  # noqa: E402  (the nets and the BLAS thread setting)
import torch  # noqa: E402


def step_seconds(model, x, y, loss_fn, steps: int) -> float:
    start = time.perf_counter()
    for _ in range(steps):
        model.zero_grad(set_to_none=False)
        loss_fn(model(x), y).backward()
    return (time.perf_counter() - start) / steps


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", choices=["mlp", "cnn"], required=True)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--windows", type=int, default=5,
                   help="timed windows; the median is reported")
    p.add_argument("--window-seconds", type=float, default=0.5)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    torch_peer.set_blas_threads(args.threads)
    torch.manual_seed(1)
    if args.model == "cnn":
        model = torch_peer.make_cnn(1)
        x = torch.rand(args.batch, 1, 28, 28)
    else:
        model = torch_peer.make_model(1)
        x = torch.rand(args.batch, 784)
    y = torch.arange(args.batch) % 10
    loss_fn = torch.nn.CrossEntropyLoss()
    first = step_seconds(model, x, y, loss_fn, 3)  # warm-up
    steps = max(3, math.ceil(args.window_seconds / first))
    runs = sorted(1e6 * step_seconds(model, x, y, loss_fn, steps) / args.batch
                  for _ in range(args.windows))
    print("RESULT " + json.dumps({
        "model": args.model, "batch": args.batch, "threads": args.threads,
        "us_per_sample": runs[len(runs) // 2], "runs": runs,
        "cores": sorted(os.sched_getaffinity(0)),
        "torch": torch.__version__}))


if __name__ == "__main__":
    main()
