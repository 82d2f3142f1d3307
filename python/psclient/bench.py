#!/usr/bin/python3
"""Push+pull goodput of the Python client next to the C++ client's, in the
same run against the same local cluster (docs/PYTHON.md, "Python client").

For each size: psbench --mode=transport (the C++ PsClient, one client, ASP)
moves one tensor of SIZE bytes, then this process joins a job of the same
bytes (a custom model of one tensor, ASP, SGD) through psclient and runs the
same loop: push the gradient, pull the parameters, one request in flight.
Goodput = bytes pushed + pulled per second, as psbench counts it. The two
alternate `--repeats` times (in turn going first); the table shows the
medians.

    python/build.sh && bazel build //tools/psbench:psbench
    PYTHONPATH=python /usr/bin/python3 python/psclient/bench.py \\
        --sizes=1M,4M,16M --seconds=3 --repeats=3
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Dict, List

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                ".."))

import psclient  # noqa: E402
from psclient.testing import LocalCluster, find_binary  # noqa: E402

UNITS = {"K": 1 << 10, "M": 1 << 20}


def parse_size(s: str) -> int:
    s = s.strip().upper()
    mult = UNITS.get(s[-1:], 1)
    value = int(s[:-1] if s[-1:] in UNITS else s)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"--sizes: {s} is not positive")
    return value * mult


def cpp_goodput(cluster: LocalCluster, size: int, seconds: float,
                cores: str) -> float:
    """psbench's goodput (bytes/s) for one client pushing+pulling `size`."""
    argv = [find_binary("tools/psbench/psbench"), "--mode=transport",
            f"--cluster={cluster.cluster_file}", "--modes=asp", "--clients=1",
            f"--sizes={size}", f"--seconds={seconds}", "--tcp=false",
            "--json"]
    if cores:
        argv = ["taskset", "-c", cores] + argv
    r = subprocess.run(argv, capture_output=True, text=True,
                       timeout=seconds * 4 + 60)
    if r.returncode != 0:
        raise RuntimeError(f"psbench failed ({r.returncode}): {r.stderr}")
    point = json.loads(r.stdout)["points"][0]
    if point["errors"]:
        raise RuntimeError(f"psbench: {point['first_error']}")
    return point["goodput_bytes_per_s"]


def custom_spec(name: str, size: int) -> str:
    """A custom model of one tensor of `size` bytes, as psbench's job."""
    return (f'name: "{name}"\n'
            f'model {{ custom {{ tensors {{ name: "w" shape: [{size // 4}] '
            "init { kind: ZEROS } } } }\n"
            "data { batch_size: 1 }\n"
            "optimizer { kind: SGD learning_rate: 0.01 }\n"
            "consistency { mode: ASP }\n"
            "num_workers: 1\npartition_bytes: 1048576\nseed: 1\n")


def py_goodput(client: psclient.Client, size: int, seconds: float,
               run: int) -> float:
    """The same loop through psclient: start("pushpull") + wait."""
    job_id, _ = client.submit(custom_spec(f"pybench-{size}-{run}", size))
    with client.join(job_id, timeout_s=60) as w:
        w.grads[:] = 1e-3
        w.push_pull(0)  # warm-up: connections, first chunk versions
        steps = 0
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            steps += 1
            w.wait(w.start("pushpull", steps))
        elapsed = time.perf_counter() - t0
        w.report(step=steps, finished=True)
    return 2 * size * steps / elapsed


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="1M,4M,16M",
                    help="tensor sizes in bytes, K/M suffixes")
    ap.add_argument("--seconds", type=float, default=3.0,
                    help="measured seconds per point and client")
    ap.add_argument("--repeats", type=int, default=3,
                    help="C++/Python alternations per size (medians shown)")
    ap.add_argument("--shards", type=int, default=2)
    ap.add_argument("--shard-cores", default="",
                    help="taskset -c list for the psd processes")
    ap.add_argument("--client-cores", default="",
                    help="taskset -c list for both clients")
    ap.add_argument("--json", action="store_true", help="print JSON only")
    args = ap.parse_args()
    sizes = [parse_size(s) for s in args.sizes.split(",")]
    if args.client_cores:
        os.sched_setaffinity(0, {int(c) for c in args.client_cores.split(",")})
    rows: List[Dict] = []
    with LocalCluster(shards=args.shards,
                      taskset=args.shard_cores or None) as cluster:
        client = psclient.connect(cluster=cluster.cluster_file)
        for size in sizes:
            cpp, py = [], []
            for run in range(args.repeats):
                # Alternate which goes first, so drift hits both alike.
                order = [0, 1] if run % 2 == 0 else [1, 0]
                for which in order:
                    if which == 0:
                        cpp.append(cpp_goodput(cluster, size, args.seconds,
                                               args.client_cores))
                    else:
                        py.append(py_goodput(client, size, args.seconds,
                                             run))
            c, p = statistics.median(cpp), statistics.median(py)
            rows.append({"bytes": size, "cpp_bytes_per_s": c,
                         "python_bytes_per_s": p, "ratio": p / c,
                         "cpp_runs": cpp, "python_runs": py})
    if args.json:
        print(json.dumps({"shards": args.shards, "points": rows}))
        return 0
    print(f"push+pull goodput, 1 client, ASP, {args.shards} psd shards, "
          f"median of {args.repeats}")
    print(f"{'size':>8} {'C++ MB/s':>10} {'Python MB/s':>12} {'ratio':>6}")
    for r in rows:
        print(f"{r['bytes'] >> 20:>5} MiB {r['cpp_bytes_per_s'] / 1e6:>10.1f} "
              f"{r['python_bytes_per_s'] / 1e6:>12.1f} {r['ratio']:>6.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
