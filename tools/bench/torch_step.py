#!/usr/bin/python3
"""PyTorch's forward+backward time per sample for the MLP 784-256-128-10 or
the built-in CNN (the nets of torch_peer.py), for
worker/model:model_benchmark's same-run ratio. Runs on the cores it was
started on (the benchmark pins itself and this inherits it).

  /usr/bin/python3 tools/bench/torch_step.py --model cnn --batch 64 --threads 1

Prints one line: RESULT {"us_per_sample": median wall, "cpu_us_per_sample":
median CPU time, "runs": [...], ...}.
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


def step_seconds(model, x, y, loss_fn, steps: int) -> tuple:
    """(wall, CPU) seconds per step; CPU counts every thread of the process,
    which is what a shared machine's load leaves alone."""
    start, cpu = time.perf_counter(), time.process_time()
    for _ in range(steps):
        model.zero_grad(set_to_none=False)
        loss_fn(model(x), y).backward()
    return ((time.perf_counter() - start) / steps,
            (time.process_time() - cpu) / steps)


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
    first, _ = step_seconds(model, x, y, loss_fn, 3)  # warm-up
    steps = max(3, math.ceil(args.window_seconds / first))
    runs = [step_seconds(model, x, y, loss_fn, steps)
            for _ in range(args.windows)]
    wall = sorted(1e6 * w / args.batch for w, _ in runs)
    cpu = sorted(1e6 * c / args.batch for _, c in runs)
    print("RESULT " + json.dumps({
        "model": args.model, "batch": args.batch, "threads": args.threads,
        "us_per_sample": wall[len(wall) // 2],
        "cpu_us_per_sample": cpu[len(cpu) // 2], "runs": wall,
        "cores": sorted(os.sched_getaffinity(0)),
        "torch": torch.__version__}))


if __name__ == "__main__":
    main()
