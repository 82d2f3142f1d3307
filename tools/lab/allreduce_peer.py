#!/usr/bin/python3
"""Ring all-reduce peer for the scaling lab (docs/SCALING.md): W processes,
one per lab host, all-reduce a model's gradient every step with PyTorch's
gloo backend, as DistributedDataParallel would, and report the step time.

  # in each of W lab hosts (tools/lab/netlab exec I ...), rank I:
  /usr/bin/python3 tools/lab/allreduce_peer.py --rank I --world W \
      --master 10.213.0.1:29600 --params 10M --layers 8 --steps 20

The gradient is the model's tensors (tools/lab/allreduce_peer.py layout(): L
layers of a weight and a 1024-float bias, P parameters in all, the layout
the parameter-server lab workload uses too), flattened into buckets of at
most --bucket-mb MiB in reverse layer order (DDP's default is 25 MiB). Each
step: --compute-ms of fixed "compute" (a sleep: the lab measures the
network, not the CPU), then every bucket is all-reduced (issued
asynchronously, all in flight, then waited for), then the mean is taken.
No overlap of communication with compute: the parameter-server rows do not
overlap either.

Rank 0 prints one line
  RESULT {"world": W, "params": P, "step_s_median": ..., ...}
with every step's time after --warmup steps, and every rank one line
  COST {"rank": R, "cpu_s": ...}
with its own CPU seconds (user + system, its threads and children) from a
barrier before the first warm-up step to one after the last step: what the
steps cost, without the interpreter's start, torch's import and gloo's
rendezvous (tools/lab/scaling.py's "CPU s"). The ring's lower bound per step
is 2 (W - 1) / W * 4P bytes over the link's bandwidth (each worker sends and
receives that much, full duplex); --link-mbit, when given, adds the ratio of
the measured communication time to that bound.
"""

import argparse
import json
import resource
import statistics
import sys
import time
from datetime import timedelta
from typing import List

try:
    import torch
    import torch.distributed as dist
except ImportError as e:  # one line instead of a traceback
    sys.exit(f"allreduce_peer: this python cannot import {e.name} (install it "
             "with tools/setup.sh --torch)")

BIAS = 1024


def parse_count(text: str) -> int:
    """'10M' -> 10_000_000; '1.5k' -> 1500; '4096' -> 4096."""
    scale = {"k": 10**3, "m": 10**6, "g": 10**9}
    t = text.strip().lower()
    try:
        if t and t[-1] in scale:
            return int(float(t[:-1]) * scale[t[-1]])
        return int(t)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a count: {text!r}")


def layout(params: int, layers: int) -> List[int]:
    """Tensor sizes (floats) of the lab model: per layer a weight and a bias."""
    if layers < 1:
        raise ValueError(f"--layers: must be >= 1, got {layers}")
    per_layer = params // layers
    if per_layer <= BIAS:
        raise ValueError(
            f"--params: {params} is too small for {layers} layers "
            f"(each needs more than {BIAS} floats)")
    sizes = []
    for _ in range(layers):
        sizes += [per_layer - BIAS, BIAS]
    return sizes


def buckets(sizes: List[int], bucket_floats: int) -> List[int]:
    """Bucket sizes in reverse tensor order, as DDP fills them."""
    out, cur = [], 0
    for s in reversed(sizes):
        if cur and cur + s > bucket_floats:
            out.append(cur)
            cur = 0
        cur += s
    if cur:
        out.append(cur)
    return out


def cpu_seconds() -> float:
    """User + system CPU seconds of this process and its reaped children."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--world", type=int, required=True)
    ap.add_argument("--master", required=True, help="HOST:PORT of rank 0")
    ap.add_argument("--params", type=parse_count, default=parse_count("10M"))
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--bucket-mb", type=float, default=25.0)
    ap.add_argument("--compute-ms", type=float, default=0.0)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--timeout-s", type=float, default=120.0)
    ap.add_argument("--link-mbit", type=float, default=0.0,
                    help="link rate, for the ratio to the ring bound")
    args = ap.parse_args()
    if not 0 <= args.rank < args.world:
        ap.error(f"--rank: must be in [0, {args.world}), got {args.rank}")
    if args.steps < 1 or args.warmup < 0:
        ap.error("--steps must be >= 1 and --warmup >= 0")
    try:
        sizes = layout(args.params, args.layers)
    except ValueError as e:
        ap.error(str(e))
    params = sum(sizes)
    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", init_method=f"tcp://{args.master}", rank=args.rank,
        world_size=args.world, timeout=timedelta(seconds=args.timeout_s))
    sizes_b = buckets(sizes, int(args.bucket_mb * 2**20 / 4))
    grads = [torch.full((n,), float(args.rank + 1)) for n in sizes_b]
    step_s, comm_s = [], []
    dist.barrier()  # every rank's CPU window starts with the same step
    cpu0 = cpu_seconds()
    for step in range(args.warmup + args.steps):
        t0 = time.perf_counter()
        if args.compute_ms > 0:
            time.sleep(args.compute_ms / 1e3)
        t1 = time.perf_counter()
        works = [dist.all_reduce(g, async_op=True) for g in grads]
        for w in works:
            w.wait()
        for g in grads:
            g.div_(args.world)
        t2 = time.perf_counter()
        if step >= args.warmup:
            step_s.append(t2 - t0)
            comm_s.append(t2 - t1)
    # Rank r started from r + 1 everywhere: after the first mean every rank
    # holds (W + 1) / 2, and later means keep it.
    expect = (args.world + 1) / 2
    ok = all(abs(float(g[0]) - expect) < 1e-5 and
             abs(float(g[-1]) - expect) < 1e-5 for g in grads)
    dist.barrier()
    print("COST " + json.dumps({"rank": args.rank,
                                "cpu_s": cpu_seconds() - cpu0}), flush=True)
    dist.destroy_process_group()
    if args.rank == 0:
        result = {
            "world": args.world,
            "params": params,
            "tensors": len(sizes),
            "buckets": len(sizes_b),
            "compute_ms": args.compute_ms,
            "step_s_median": statistics.median(step_s),
            "step_s_min": min(step_s),
            "step_s_max": max(step_s),
            "comm_s_median": statistics.median(comm_s),
            "bytes_per_worker_per_step": 2 * (args.world - 1) / args.world
            * 4 * params,
            "steps": step_s,
            "sum_ok": ok,
        }
        if args.link_mbit > 0 and args.world > 1:
            bound = result["bytes_per_worker_per_step"] / (
                0.956 * args.link_mbit * 1e6 / 8)
            result["comm_bound_s"] = bound
            result["fraction_of_bound"] = bound / result["comm_s_median"]
        print("RESULT " + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
