#!/usr/bin/python3
"""The PyTorch CNN (or MLP) trained through the parameter servers against
the same net in PyTorch DDP (gloo, 2 processes), in the same run.

    python/build.sh
    /usr/bin/python3 tools/bench/bench_torch_ps.py --model=cnn --steps=100 --repeats=3

Each repeat runs, in turn:
  ps:  2 psd shards (psclient.testing.LocalCluster, unpinned) and
       examples/torch_fmnist_cnn.py (or torch_mlp.py) as 2 workers through
       `python3 -m psclient.run --cpus=0,1` (worker i pinned to CPU i);
  ddp: tools/bench/torch_peer.py --mode ddp --model cnn, rank i pinned to CPU i;
both for `--steps` steps of batch `--batch` per worker on Fashion-MNIST,
1 intra-op thread per process. samples/s = examples trained (both workers)
/ time in the training loop, evaluation excluded, as each script prints it.
Prints one line per run and the medians with min-max, and the ratio ps/ddp.

Both sides run PyTorch, whose Linear layers use Debian's OpenBLAS: unless
OPENBLAS_CORETYPE is set, it is set for both to the kernels that fit this
CPU (SkylakeX with AVX-512, Haswell with AVX2), as workerd does for itself
(worker/workerd_main.cc); the line "blas" says which.

Both sides need PyTorch in this interpreter (tools/setup.sh --torch); without
it the script says so in one line and exits 2.
"""

import argparse
import importlib.util
import json
import os
import re
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))  # tools/bench
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "python"))


def run_ps(args, repeat):
    # Imported here: psclient needs its native module (python/build.sh),
    # checked after torch.
    from psclient.testing import LocalCluster
    script = {"cnn": "examples/torch_fmnist_cnn.py",
              "mlp": "examples/torch_mlp.py"}[args.model]
    with LocalCluster(shards=2) as cluster:
        cmd = [sys.executable, "-m", "psclient.run",
               "--cluster=" + cluster.cluster_file, "--workers=2",
               "--cpus=0,1", "--timeout=%d" % args.timeout,
               os.path.join(ROOT, script), "--job=bench-%d" % repeat,
               "--epochs=1", "--batch-size=%d" % args.batch,
               "--max-train=%d" % (args.steps * args.batch * 2),
               "--lr=%g" % args.lr]
        if args.model == "cnn":
            cmd += ["--max-test=1000"]
        env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"))
        out = subprocess.run(cmd, env=env, capture_output=True, text=True,
                             timeout=args.timeout + 60)
    if out.returncode != 0:
        raise SystemExit("ps run failed:\n" + out.stdout + out.stderr)
    m = re.search(r"samples_per_s ([0-9.]+)", out.stdout)
    if not m:  # torch_mlp.py prints no rate: time the whole loop instead
        raise SystemExit("no samples_per_s in:\n" + out.stdout)
    acc = re.search(r"test_accuracy ([0-9.]+)", out.stdout)
    return float(m.group(1)), float(acc.group(1)) if acc else -1


def run_ddp(args, repeat):
    port = 29600 + repeat
    procs = []
    for rank in (0, 1):
        cmd = ["taskset", "-c", str(rank), sys.executable,
               os.path.join(HERE, "torch_peer.py"), "--mode", "ddp",
               "--model", args.model, "--rank", str(rank), "--world", "2",
               "--port", str(port), "--batch", str(args.batch),
               "--threads", "1", "--lr", str(args.lr), "--epochs", "1",
               "--steps-per-epoch", str(args.steps)]
        procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True))
    outs = [p.communicate(timeout=args.timeout)[0] for p in procs]
    if any(p.returncode for p in procs):
        raise SystemExit("ddp run failed:\n" + "\n".join(outs))
    m = re.search(r"RESULT (\{.*\})", outs[0])
    result = json.loads(m.group(1))
    return float(result["samples_per_s"]), float(
        result.get("test_accuracy", -1))


def fitting_blas_coretype():
    """What workerd would set: from /proc/cpuinfo's flags."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((l for l in f if l.startswith("flags")), "").split()
    except OSError:
        return ""
    if "avx512f" in flags:
        return "SkylakeX"
    return "Haswell" if "avx2" in flags else ""


def summary(xs):
    return "%.1f (%.1f-%.1f)" % (statistics.median(xs), min(xs), max(xs))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", choices=["cnn", "mlp"], default="cnn")
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.02)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--timeout", type=int, default=1800)
    args = p.parse_args()
    if importlib.util.find_spec("torch") is None:
        print("bench_torch_ps: %s cannot import torch (install it with "
              "tools/setup.sh --torch)" % sys.executable, file=sys.stderr)
        sys.exit(2)
    fitting = fitting_blas_coretype()
    if "OPENBLAS_CORETYPE" not in os.environ and fitting:
        os.environ["OPENBLAS_CORETYPE"] = fitting
    print("blas OPENBLAS_CORETYPE=%s" % os.environ.get("OPENBLAS_CORETYPE", ""),
          flush=True)
    ps, ddp = [], []
    for r in range(args.repeats):
        load = os.getloadavg()[0]
        t0 = time.monotonic()
        rate, acc = run_ps(args, r)
        ps.append(rate)
        print("repeat %d ps  samples_per_s %.1f test_accuracy %.4f "
              "(%.0f s, load %.2f)" % (r, rate, acc, time.monotonic() - t0,
                                       load), flush=True)
        load = os.getloadavg()[0]
        t0 = time.monotonic()
        rate, acc = run_ddp(args, r)
        ddp.append(rate)
        print("repeat %d ddp samples_per_s %.1f test_accuracy %.4f "
              "(%.0f s, load %.2f)" % (r, rate, acc, time.monotonic() - t0,
                                       load), flush=True)
    print("model=%s steps=%d batch=%d: ps %s, ddp %s, ps/ddp %.2f"
          % (args.model, args.steps, args.batch, summary(ps), summary(ddp),
             statistics.median(ps) / statistics.median(ddp)))


if __name__ == "__main__":
    main()
