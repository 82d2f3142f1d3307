#!/usr/bin/env python3
"""CTR in the network lab (issue 30, docs/SPARSE.md "CTR in the lab"): this
parameter server's CTR job against PyTorch DDP on the same data, each
process on its own emulated host, at equal AUC.

Parameter server: S psd on hosts 1..S, W workerd on the next W hosts, the
job of configs/jobs/ctr_synthetic.pbtxt with --train / --test examples and W
workers (BSP), submitted with psctl --wait. Peer: tools/bench/ctr_torch_peer.py
(the same model, optimizers and batch per worker; DistributedDataParallel
over gloo), one process on each of hosts 1..W, rank 0 the rendezvous, on
files that tools/datagen/ctr_datagen writes from the job's seed (the
examples the job generates). Rows alternate (--repeat pairs); each reports
samples/s (steady: DDP leaves out its first 20 steps and evaluations),
test AUC, the training time, the row's whole time (start-up included: the
daemons' start and the job's registration; DDP's broadcast of its whole
embedding table from rank 0, one row per value of every field), the CPU
seconds of the processes and the GB the lab's hosts sent. Needs root and a
lab that is up:

  tools/lab/netlab up 4 --rate=100mbit
  tools/lab/ctr_lab.py --bin=DIR --workers=2 --shards=2 --out=OUT
  tools/lab/netlab down

DIR holds server/psd, worker/workerd, tools/psctl/psctl and
tools/datagen/ctr_datagen (default: bazel info --config=opt bazel-bin).
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Dict, List

LAB = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(LAB))
sys.path.insert(0, LAB)

from lab_peers import run_peers  # noqa: E402
from scaling import Lab, open_lab, run_job  # noqa: E402

PEER = os.path.join(ROOT, "tools", "bench", "ctr_torch_peer.py")
PEER_PYTHON = os.environ.get("PYTHON", "/usr/bin/python3")  # needs torch
JOB = os.path.join(ROOT, "configs", "jobs", "ctr_synthetic.pbtxt")
SEED = 42  # the job's seed: the generated examples are the peer's files


def job_spec(args) -> str:
    """configs/jobs/ctr_synthetic.pbtxt at the sweep's sizes and workers."""
    with open(JOB) as f:
        text = f.read()
    text = re.sub(r"synthetic_train: \d+", f"synthetic_train: {args.train}", text)
    text = re.sub(r"synthetic_test: \d+", f"synthetic_test: {args.test}", text)
    text = re.sub(r"batch_size: \d+", f"batch_size: {args.batch}", text)
    text = re.sub(r"num_workers: \d+", f"num_workers: {args.workers}", text)
    if f"seed: {SEED}" not in text:
        raise RuntimeError(f"{JOB}: expected seed: {SEED}")
    return text


def make_data(args, work: str) -> Dict[str, str]:
    """The job's examples as ctr_datagen files (train, test) for the peer."""
    files = {}
    for split, count in (("train", args.train), ("test", args.test)):
        path = os.path.join(work, f"{split}.bin")
        subprocess.run([f"{args.bin}/tools/datagen/ctr_datagen", f"--out={path}",
                        f"--split={split}", f"--count={count}",
                        f"--seed={SEED}", "--progress=false"],
                       check=True, stdout=subprocess.DEVNULL, timeout=600)
        files[split] = path
    return files


def run_ps(lab: Lab, args, work: str) -> Dict:
    job = run_job(lab, args, args.bin, args.shards, args.workers,
                  job_spec(args), work)  # its folder: ps-s{S}w{W}-*
    summary = job["summary"]
    return {"system": "ps", "samples_per_s": float(summary["samples_per_s"]),
            "test_auc": float(summary["test_auc"]),
            "train_s": float(summary["train_s"]), **job["cost"]}


def run_ddp(lab: Lab, args, files: Dict[str, str], work: str) -> Dict:
    cores = os.cpu_count() or 1
    argvs = [["env", "GLOO_SOCKET_IFNAME=eth0", PEER_PYTHON, PEER,
              "--train", files["train"], "--test", files["test"],
              "--batch", str(args.batch), "--world", str(args.workers),
              "--rank", str(r), "--master", f"{lab.hosts[0]}:29700",
              "--cores", str(r % cores)] for r in range(args.workers)]
    res, cost, _ = run_peers(lab, args, argvs, f"DDP W={args.workers}", work,
                             "ctr-ddp-", others_s=60)
    return {"system": "ddp", "samples_per_s": res["samples_per_s"],
            "test_auc": res["test_auc"], "train_s": res["wall_s"], **cost}


def summarize(rows: List[Dict]) -> str:
    out = ["| system | samples/s | test AUC | train s | row s | CPU s "
           "| GB tx |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r['system']} | {r['samples_per_s']:.0f} "
                   f"| {r['test_auc']:.4f} | {r['train_s']:.1f} "
                   f"| {r['row_s']:.1f} | {r['cpu_s']:.1f} "
                   f"| {r['tx_bytes'] / 1e9:.2f} |")
    ps = [r["samples_per_s"] for r in rows if r["system"] == "ps"]
    ddp = [r["samples_per_s"] for r in rows if r["system"] == "ddp"]
    if ps and ddp:
        ratios = [p / q for p, q in zip(ps, ddp)]
        median = statistics.median(ps) / statistics.median(ddp)
        out.append(f"\nps / ddp samples/s: median {median:.2f}x (pairs "
                   f"{', '.join(f'{x:.2f}' for x in ratios)})")
    return "\n".join(out)


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--shards", type=int, default=2)
    ap.add_argument("--train", type=int, default=1000000)
    ap.add_argument("--test", type=int, default=200000)
    ap.add_argument("--batch", type=int, default=512,
                    help="examples per worker per step, both systems")
    ap.add_argument("--repeat", type=int, default=1, help="pairs of rows")
    ap.add_argument("--row-timeout", type=float, default=1800)
    ap.add_argument("--prefix", default=os.environ.get("NETLAB_PREFIX", "pslab"))
    ap.add_argument("--bin", default="")
    ap.add_argument("--out", default="ctr-lab-out")
    ap.add_argument("--keep-logs", action="store_true")
    args = ap.parse_args()
    for name in ("workers", "shards", "train", "test", "batch", "repeat"):
        if getattr(args, name) < 1:
            ap.error(f"--{name}: must be >= 1")
    if args.workers < 2:
        ap.error("--workers: DDP needs at least 2")
    # What scaling.start_ps and open_lab read.
    args.straggler, args.pacing, args.psd_config = None, False, ""
    args.worker_config, args.shard_budget = "", 8 << 30
    if not args.bin:
        args.bin = subprocess.run(
            ["bazel", "info", "--config=opt", "bazel-bin"], cwd=ROOT,
            capture_output=True, text=True, check=True).stdout.strip()
    return args


def main() -> int:
    args = parse_args()
    lab = open_lab(args)
    if lab is None:
        return 2
    if args.shards + args.workers > len(lab.hosts):
        print(f"ctr_lab: {args.shards} shards + {args.workers} workers need "
              f"{args.shards + args.workers} hosts; the lab has "
              f"{len(lab.hosts)}", file=sys.stderr)
        return 2
    os.makedirs(args.out, exist_ok=True)
    work = tempfile.mkdtemp(prefix="ctr-lab-")
    rows: List[Dict] = []
    try:
        files = make_data(args, work)
        for i in range(args.repeat):
            for system in ("ps", "ddp"):
                print(f"ctr_lab: {system} W={args.workers} S={args.shards} "
                      f"rate={lab.rate} (pair {i + 1} of {args.repeat})",
                      flush=True)
                t0 = time.monotonic()
                r = (run_ps(lab, args, work) if system == "ps"
                     else run_ddp(lab, args, files, work))
                r.update(row_s=time.monotonic() - t0,
                         workers=args.workers, shards=args.shards,
                         rate=lab.rate, train=args.train, test=args.test,
                         batch=args.batch)
                rows.append(r)
                with open(os.path.join(args.out, "results.json"), "w") as f:
                    json.dump(rows, f, indent=1)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(summarize(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
