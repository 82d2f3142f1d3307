#!/usr/bin/python3
"""Scaling sweep in the network lab (docs/SCALING.md): this parameter server
(BSP, ASP) against gloo ring all-reduce, W workers x S shards x model size,
each process on its own emulated host.

  tools/lab/netlab up 4 --rate=1gbit && tools/lab/scaling.sh --quick && tools/lab/netlab down
  tools/lab/netlab up 12 --rate=1gbit && tools/lab/scaling.sh --out=docs/scaling/1gbit

Runs in the lab that is up (tools/lab/netlab list; its rate from netlab status):
a configuration needs S + W hosts (shards on hosts 1..S, workers on the next
W), so only those that fit run; the all-reduce rows use hosts 1..W.

Per parameter-server row: S psd and W workerd start in their hosts from
generated config files (port 0 + address files), psctl submits a `lab` job
(proto/job.proto LabModel: the given parameter count in --layers layers,
--compute-ms of fixed compute per step, no data) and waits; the row's step
time is the job's train time over its steps (psctl's summary line), samples/s
its own figure, and the bytes moved the shards' bytes_in + bytes_out
(psctl stats) per step. The all-reduce rows run tools/lab/allreduce_peer.py, the
same tensors, bucketed as DDP does, with PyTorch in /usr/bin/python3 ($PYTHON
picks another interpreter); without it they are skipped, with one line.

The bound. Links are full duplex at B bytes/s of TCP payload (0.956 x the
rate: 1448 payload bytes per 1514-byte frame). In a BSP step each worker
pushes its M-byte gradient and pulls M bytes of parameters at once: M/B; each
shard receives W M / S and sends as much: W M / (S B). So a step takes at
least compute + max(M/B, W M/(S B)) (no overlap of compute and
communication yet). The step time measured is the job's train time over its
steps, and the train time also holds the first Pull of the parameters (the
same bound once more), so a row's bound is compute + (1 + 1/steps) x that.
Ring all-reduce moves 2 (W - 1)/W M each way per worker:
compute + 2 (W - 1) M / (W B). "of bound" = bound / measured (1.0 = at it).
With --straggler=f the last worker's host (S + W; W for all-reduce) runs at
f x the rate during each row (tools/lab/netlab shape, restored after the row,
on failure and on Ctrl-C/SIGTERM/SIGHUP), and the bounds use its link:
max(M/(f B), W M/(S B)) and 2 (W - 1) M / (W f B). (An ASP row's step time
is rank 0's, and rank 0 may or may not be the straggler: see docs/SCALING.md.)

What a row costs (tools/lab/lab_cost.py): CPU s of the processes it starts
(psd, workerd, psctl; the all-reduce peers over their steps), GB sent by all
hosts' eth0, cpu s/GB, and cpu vs tcp against iperf3 in a ring of hosts run
once before the rows (--tcp-seconds, --tcp-hosts).

Output: one table (Markdown) on stdout, results.json (and tcp_reference.json)
and the PNG charts (tools/lab/plot_scaling.py) in --out.
"""

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from typing import Dict, List, Optional

from lab_cost import (TCP_PAYLOAD, CostWindow, cpu_s_per_gb, host_tx_bytes,
                      mis_shaped, parse_rate_bits, peak_rss, ps_bound,
                      ring_bound, stop_and_clean,
                      straggler, straggler_rate, tcp_reference, wait_files)
from lab_peers import peer_cpu, run_peers

LAB = os.path.dirname(os.path.abspath(__file__))  # tools/lab
ROOT = os.path.dirname(os.path.dirname(LAB))
NETLAB = os.path.join(LAB, "netlab")
PEER = os.path.join(LAB, "allreduce_peer.py")
PLOT = os.path.join(LAB, "plot_scaling.py")
PEER_PYTHON = os.environ.get("PYTHON", "/usr/bin/python3")  # needs torch
BIAS = 1024          # floats per layer bias (tools/lab/allreduce_peer.py)


def parse_count(text: str) -> int:
    scale = {"k": 10**3, "m": 10**6, "g": 10**9}
    t = text.strip().lower()
    if t and t[-1] in scale:
        return int(float(t[:-1]) * scale[t[-1]])
    return int(t)


def model_params(params: int, layers: int) -> int:
    """The parameter count the lab layout really has (see allreduce_peer)."""
    return (params // layers) * layers


class Lab:
    """The lab that tools/lab/netlab has up: its hosts and link rate."""

    def __init__(self, prefix: str):
        self.prefix = prefix
        self.env = dict(os.environ, NETLAB_PREFIX=prefix)
        out = self._netlab("list")
        self.hosts = [line.split()[2] for line in out.splitlines()
                      if line.strip()]
        status = self.status()
        m = re.search(r"rate[ =:]+([0-9.]+[kmg]bit)", status)
        if not m:
            raise RuntimeError("netlab status shows no rate:\n" + status)
        self.rate = m.group(1)
        self.bytes_per_s = TCP_PAYLOAD * parse_rate_bits(self.rate) / 8

    def status(self) -> str:
        return self._netlab("status")

    def shape(self, host: int, rate: str = "") -> None:
        """Re-caps `host`'s link at `rate`; "" restores the lab's rate."""
        self._netlab("shape", str(host), *([f"--rate={rate}"] if rate else []))

    def tx_bytes(self) -> int:
        """Bytes sent so far by all hosts' eth0 (lab_cost.host_tx_bytes)."""
        return host_tx_bytes(self.prefix, len(self.hosts))

    def _netlab(self, *args: str) -> str:
        r = subprocess.run([NETLAB, *args], env=self.env, text=True,
                           capture_output=True, timeout=60)
        if r.returncode != 0:
            raise RuntimeError(f"netlab {' '.join(args)}: {r.stderr.strip()}")
        return r.stdout

    def popen(self, host: int, argv: List[str], log: str) -> subprocess.Popen:
        with open(log, "w") as f:  # the child keeps its own descriptor
            return subprocess.Popen([NETLAB, "exec", str(host), *argv],
                                    env=self.env, stdout=f,
                                    stderr=subprocess.STDOUT,
                                    start_new_session=True)

    def run(self, host: int, argv: List[str], timeout: float) -> str:
        r = subprocess.run([NETLAB, "exec", str(host), *argv], env=self.env,
                           text=True, capture_output=True, timeout=timeout)
        if r.returncode != 0:
            raise RuntimeError(f"host {host}: {' '.join(argv[:2])}: exit "
                               f"{r.returncode}\n{r.stdout}{r.stderr}")
        return r.stdout


# The demo's MLP (configs/jobs/fashion_mlp.pbtxt) for --model=mlp: 784-256-128-10.
MLP_PARAMS = 784 * 256 + 256 + 256 * 128 + 128 + 128 * 10 + 10


def job_spec(args, params: int, workers: int, mode: str) -> str:
    if args.model == "mlp":
        return f"""name: "mlp-{mode}-w{workers}"
model {{ mlp {{ input_dim: 784 hidden: 256 hidden: 128 num_classes: 10 }} }}
data {{ dataset: "fashion-mnist" batch_size: {args.batch} epochs: 1 }}
optimizer {{ kind: SGD learning_rate: 0.05 momentum: 0.9 }}
consistency {{ mode: {mode.upper()} step_deadline_ms: 600000 }}
num_workers: {workers}
partition_bytes: 262144
seed: 42
{args.job_config}
"""
    return f"""name: "lab-{mode}-w{workers}"
model {{ lab {{ parameters: {params} layers: {args.layers} compute_ms: {args.compute_ms} steps_per_epoch: {args.steps} }} }}
data {{ batch_size: {args.batch} epochs: 1 }}
optimizer {{ kind: SGD learning_rate: 0.001 }}
consistency {{ mode: {mode.upper()} step_deadline_ms: 600000 }}
num_workers: {workers}
partition_bytes: {args.partition_bytes}
seed: 1
{args.job_config}
"""


def pacing_config(lab: Lab, args, host: int, last_host: int) -> str:
    """With --pacing: `link_rate_mbit` for the daemon on `host` (1-based), its
    link's rate (with --straggler, the last worker's host `last_host` is
    slower), so it paces its connections at their share of it
    (docs/SCALING.md, "Paced flows")."""
    if not args.pacing:
        return ""
    bits = parse_rate_bits(lab.rate)
    if args.straggler and host == last_host:
        bits *= args.straggler
    return f"link_rate_mbit: {max(1, int(bits // 1e6))}\n"


def start_ps(lab: Lab, args, bindir: str, shards: int, workers: int, d: str,
             procs: List[subprocess.Popen]) -> None:
    """Shards on hosts 1..S, workers on the next W hosts, from configs in `d`;
    appends each process to `procs` as it starts (the caller stops them)."""
    with open(f"{d}/cluster.pbtxt", "w") as f:
        for i in range(shards):
            f.write(f'shards {{ address_file: "{d}/psd{i}.addr" }}\n')
        f.write("coordinator_shard: 0\n")
    for i in range(shards):
        with open(f"{d}/psd{i}.pbtxt", "w") as f:
            f.write(f'listen_address: "{lab.hosts[i]}:0"\nshard_id: {i}\n'
                    f'cluster_file: "{d}/cluster.pbtxt"\n'
                    f'address_file: "{d}/psd{i}.addr"\n'
                    f"memory_budget_bytes: {args.shard_budget}\n"
                    f"{args.psd_config}\n"
                    f"{pacing_config(lab, args, i + 1, shards + workers)}")
        procs.append(lab.popen(i + 1, [f"{bindir}/server/psd",
                                       f"--config={d}/psd{i}.pbtxt"],
                               f"{d}/psd{i}.log"))
    wait_files([f"{d}/psd{i}.addr" for i in range(shards)], procs, 60)
    for j in range(workers):
        with open(f"{d}/worker{j}.pbtxt", "w") as f:
            f.write(f'cluster_file: "{d}/cluster.pbtxt"\nname: "w{j}"\n'
                    f'devices: "cpu:0"\n{args.worker_config}\n'
                    f"{pacing_config(lab, args, shards + j + 1, shards + workers)}")
        procs.append(lab.popen(shards + j + 1,
                               [f"{bindir}/worker/workerd",
                                f"--config={d}/worker{j}.pbtxt"],
                               f"{d}/worker{j}.log"))


def shard_stats(lab: Lab, psctl: str, d: str) -> Dict:
    """The shards' bytes in + out and delta pulls (psctl stats --json: a list
    of ShardStats, proto field names, uint64 as strings)."""
    stats = json.loads(lab.run(1, [psctl, "stats", "--json",
                                   f"--cluster={d}/cluster.pbtxt"], 60))
    out = {"moved": 0, "deltas": 0, "refused": 0}
    for shard in stats:
        for job in (shard or {}).get("job_stats", []):
            out["moved"] += int(job.get("bytes_in", 0)) + int(job.get("bytes_out", 0))
            out["deltas"] += int(job.get("delta_pulls", 0))  # answered as deltas
            out["refused"] += int(job.get("delta_refused", 0))  # in full
    return out


def run_job(lab: Lab, args, bindir: str, shards: int, workers: int,
            spec: str, work: str) -> Dict:
    """S psd and W workerd (start_ps) train the job `spec` (psctl submit
    --wait): its summary line (key=value), what the row cost (CostWindow),
    the bytes the shards' hosts sent, the largest psd's peak RSS and the
    shards' own counts (shard_stats). RuntimeError unless it SUCCEEDED."""
    d = tempfile.mkdtemp(prefix=f"ps-s{shards}w{workers}-", dir=work)
    procs: List[subprocess.Popen] = []
    try:
        start_ps(lab, args, bindir, shards, workers, d, procs)
        with open(f"{d}/job.pbtxt", "w") as f:
            f.write(spec)
        psctl = f"{bindir}/tools/psctl/psctl"
        window = CostWindow(lab, procs)  # psd, workerd; psctl is a child
        shard_tx0 = host_tx_bytes(lab.prefix, shards)  # hosts 1..S
        out = lab.run(1, [psctl, "submit", f"{d}/job.pbtxt", "--wait",
                          f"--cluster={d}/cluster.pbtxt", "--connect-timeout=30"],
                      timeout=args.row_timeout)
        cost = window.close()
        shard_tx = host_tx_bytes(lab.prefix, shards) - shard_tx0
        shard_rss = max(peak_rss(p.pid) for p in procs[:shards])
        summary = dict(re.findall(r"(\w+)=(\S+)", out.strip().splitlines()[-1]))
        if summary.get("state") != "SUCCEEDED":
            raise RuntimeError(f"job did not succeed: {out}")
        return {"summary": summary, "cost": cost, "shard_tx": shard_tx,
                "shard_rss": shard_rss, "stats": shard_stats(lab, psctl, d)}
    finally:
        stop_and_clean(procs, d, args.keep_logs)


def run_ps(lab: Lab, args, bindir: str, shards: int, workers: int,
           params: int, mode: str, work: str) -> Dict:
    job = run_job(lab, args, bindir, shards, workers,
                  job_spec(args, params, workers, mode), work)
    summary, cost, stats = job["summary"], job["cost"], job["stats"]
    steps = int(summary["steps"])
    step_s = float(summary["train_s"]) / max(1, steps)
    real_params = (MLP_PARAMS if args.model == "mlp" else
                   model_params(params, args.layers))
    bound = ps_bound(4 * real_params, workers, shards, lab.bytes_per_s,
                     steps, args.compute_ms / 1e3, args.straggler or 1.0)
    return {"system": "ps", "mode": mode, "workers": workers,
            "shards": shards, "params": real_params,
            "rate": lab.rate, "steps": steps, "step_s": step_s,
            "samples_per_s": float(summary["samples_per_s"]),
            "model": args.model,
            "test_accuracy": float(summary.get("test_accuracy", -1)),
            "bytes_per_step": stats["moved"] / max(1, steps),
            "bound_s": bound, "of_bound": bound / step_s, **cost,
            "delta_pulls": stats["deltas"],
            "delta_refused": stats["refused"],
            # Per shard: bytes its host sent per step, and the largest
            # psd's peak resident memory.
            "shard_tx_per_step": job["shard_tx"] / max(1, steps) / shards,
            "shard_peak_rss": job["shard_rss"]}


def has_torch(python: str) -> bool:
    """Whether `python` can import torch (the all-reduce peer needs it)."""
    try:
        return subprocess.run([python, "-c", "import torch"],
                              stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL).returncode == 0
    except OSError:  # no such interpreter
        return False


def peer_argv(lab: Lab, args, workers: int, rank: int, params: int) -> List[str]:
    # gloo binds to the address the hostname resolves to unless told which
    # interface: the lab host's one is eth0.
    slowest = parse_rate_bits(lab.rate) * (args.straggler or 1.0)
    return ["env", "GLOO_SOCKET_IFNAME=eth0",
            PEER_PYTHON, PEER, "--rank", str(rank), "--world",
            str(workers), "--master", f"{lab.hosts[0]}:{29600 + workers}",
            "--params", str(params), "--layers", str(args.layers),
            "--compute-ms", str(args.compute_ms), "--steps",
            str(args.steps), "--warmup", "2", "--link-mbit",
            str(slowest / 1e6), "--timeout-s", str(args.row_timeout)]


def run_allreduce(lab: Lab, args, workers: int, params: int, work: str) -> Dict:
    res, cost, logs = run_peers(
        lab, args, [peer_argv(lab, args, workers, r, params)
                    for r in range(workers)],
        f"all-reduce W={workers}", work, f"ar-w{workers}-", others_s=30)
    # Whole processes (interpreter start, torch import) vs their steps.
    cost["cpu_s_process"] = cost["cpu_s"]
    cost["cpu_s"] = peer_cpu(logs)
    cost["cpu_s_per_gb"] = cpu_s_per_gb(cost["cpu_s"], cost["tx_bytes"])
    step_s = res["step_s_median"]
    bound = ring_bound(4 * res["params"], workers, lab.bytes_per_s,
                       args.compute_ms / 1e3, args.straggler or 1.0)
    return {"system": "allreduce", "mode": "bsp", "workers": workers,
            "shards": 0, "params": res["params"], "rate": lab.rate,
            "steps": args.steps, "step_s": step_s,
            "samples_per_s": workers * args.batch / step_s,
            "bytes_per_step": res["bytes_per_worker_per_step"] * workers,
            "bound_s": bound, "of_bound": bound / step_s, **cost}


def fmt(v: Optional[float], spec: str) -> str:
    return "-" if v is None else format(v, spec)


def table(rows: List[Dict]) -> str:
    out = ["| system | mode | W | S | params | rate | straggler | step ms "
           "| samples/s | MB moved/step | bound ms | of bound | CPU busy "
           "| CPU s | GB tx | cpu s/GB | cpu vs tcp | shard MB tx/step "
           "| shard peak MB |",
           "|---" * 19 + "|"]
    for r in rows:
        out.append(
            f"| {r['system']} | {r['mode']} | {r['workers']} | {r['shards'] or '-'} "
            f"| {r['params'] / 1e6:.1f}M | {r['rate']} "
            f"| {fmt(r.get('straggler'), 'g')} | {r['step_s'] * 1e3:.1f} "
            f"| {r['samples_per_s']:.0f} | {r['bytes_per_step'] / 1e6:.1f} "
            f"| {r['bound_s'] * 1e3:.1f} | {r['of_bound']:.2f} "
            f"| {r.get('cpu_busy', float('nan')):.0%} "
            f"| {fmt(r.get('cpu_s'), '.1f')} | {r.get('tx_bytes', 0) / 1e9:.2f} "
            f"| {fmt(r.get('cpu_s_per_gb'), '.2f')} "
            f"| {fmt(r.get('cpu_vs_tcp'), '.2f')} "
            f"| {fmt(mb(r.get('shard_tx_per_step')), '.1f')} "
            f"| {fmt(mb(r.get('shard_peak_rss')), '.0f')} |")
    return "\n".join(out)


def mb(n: Optional[float]) -> Optional[float]:
    return None if n is None else n / 1e6


def fraction(text: str) -> float:
    """--straggler's value: a number in (0, 1]."""
    try:
        f = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}")
    if not 0 < f <= 1:
        raise argparse.ArgumentTypeError(f"{text} is not in (0, 1]")
    return f


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true",
                    help="W 1,2 x S 1,2 x 1M params, BSP, 10 steps (a 4-host lab)")
    ap.add_argument("--workers", default="1 2 4 8")
    ap.add_argument("--shards", default="1 2 4")
    ap.add_argument("--params", default="1M 10M 100M")
    ap.add_argument("--modes", default="bsp asp")
    ap.add_argument("--model", choices=["lab", "mlp"], default="lab",
                    help="lab: the communication-bound workload; mlp: the "
                    "demo's MLP on Fashion-MNIST, 1 epoch (--batch 64)")
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--compute-ms", type=float, default=0.0)
    ap.add_argument("--batch", type=int, default=32,
                    help="examples per worker per step (for samples/s)")
    ap.add_argument("--steps", type=int, default=20)
    # Small partitions and requests let a shard answer the first of a BSP
    # step's requests while the rest are on the wire (docs/SCALING.md).
    ap.add_argument("--partition-bytes", type=int, default=256 << 10)
    ap.add_argument("--shard-budget", type=int, default=8 << 30)
    ap.add_argument("--worker-config", default="max_request_bytes: 262144",
                    help="extra WorkerdConfig text for every workerd, e.g. "
                    "'max_request_bytes: 524288 max_inflight_per_shard: 2'")
    ap.add_argument("--psd-config", default="",
                    help="extra PsdConfig text for every psd, e.g. "
                    "'shard_heartbeat_misses: 20'")
    ap.add_argument("--job-config", default="",
                    help="extra JobSpec text for every parameter-server job")
    ap.add_argument("--systems", default="ps allreduce",
                    help="which rows: ps, allreduce or both")
    ap.add_argument("--straggler", type=fraction, default=None,
                    metavar="FRACTION",
                    help="the last worker's host gets FRACTION x the lab's "
                    "rate (both directions) for every row, restored after it")
    ap.add_argument("--pacing", action="store_true",
                    help="set link_rate_mbit (the lab's rate) in every psd "
                    "and workerd config: each connection paced at its share")
    ap.add_argument("--tcp-seconds", type=float, default=5.0,
                    help="the raw-TCP reference (iperf3 in a ring of hosts "
                    "before the rows): seconds of the lab rate per stream; 0: none")
    ap.add_argument("--tcp-hosts", type=int, default=0,
                    help="hosts in the reference's ring (default: the "
                    "largest W, at most the lab's hosts)")
    ap.add_argument("--row-timeout", type=float, default=900)
    ap.add_argument("--prefix", default=os.environ.get("NETLAB_PREFIX", "pslab"))
    ap.add_argument("--bin", default="", help="bazel-bin (default: bazel info)")
    ap.add_argument("--out", default="scaling-out")
    ap.add_argument("--keep-logs", action="store_true")
    args = ap.parse_args()
    if args.quick:
        args.workers, args.shards, args.params = "1 2", "1 2", "1M"
        args.modes, args.steps = "bsp", 10
    if args.model == "mlp":
        args.params, args.systems = str(MLP_PARAMS), "ps"
    return args


def reference(lab: Lab, args, work: str) -> Optional[Dict]:
    """The raw-TCP reference of the sweep (lab_cost.tcp_reference), or None."""
    k = args.tcp_hosts or max(int(x) for x in args.workers.split())
    k = min(k, len(lab.hosts))
    if args.tcp_seconds <= 0 or k < 2:
        return None
    print(f"scaling: raw TCP reference: iperf3 in a ring of {k} hosts, "
          f"{args.tcp_seconds:g} s of the rate per stream", flush=True)
    try:
        ref = tcp_reference(lab, k, args.tcp_seconds, work,
                            timeout=10 * args.tcp_seconds + 60)
    except (RuntimeError, OSError, subprocess.SubprocessError) as e:
        print(f"scaling: no raw TCP reference: {e}", file=sys.stderr, flush=True)
        return None
    print(f"scaling: raw TCP: {ref['goodput_bytes_per_s'] / 1e6:.1f} MB/s in all, "
          f"{ref['cpu_s']:.2f} CPU s for {ref['tx_bytes'] / 1e9:.2f} GB tx: "
          f"{fmt(ref['cpu_s_per_gb'], '.2f')} cpu s/GB", flush=True)
    return ref


def sweep(lab: Lab, args, bindir: str, work: str, ref: Optional[Dict]):
    """Every row that fits the lab; the rows and the number that failed."""
    rows: List[Dict] = []
    failed = 0
    systems = args.systems.split()

    def row(what: str, host: int, run) -> None:
        nonlocal failed
        print(f"scaling: {what}", flush=True)
        try:
            with straggler(lab, host, args.straggler):
                r = run()
        except (RuntimeError, subprocess.SubprocessError) as e:
            print(f"scaling: row failed: {e}", file=sys.stderr, flush=True)
            failed += 1
            return
        tcp = ref and ref["cpu_s_per_gb"]
        mine = r.get("cpu_s_per_gb")
        r.update(straggler=args.straggler, pacing=args.pacing,
                 straggler_host=host if args.straggler else None,
                 tcp_cpu_s_per_gb=tcp,
                 cpu_vs_tcp=mine / tcp if tcp and mine is not None else None)
        rows.append(r)

    for p in [parse_count(x) for x in args.params.split()]:
        for w in [int(x) for x in args.workers.split()]:
            for s in [int(x) for x in args.shards.split()]:
                if "ps" not in systems or s + w > len(lab.hosts):
                    continue
                for mode in args.modes.split():
                    row(f"ps {mode} W={w} S={s} params={p}", s + w,
                        lambda: run_ps(lab, args, bindir, s, w, p, mode, work))
            if "allreduce" in systems and 2 <= w <= len(lab.hosts):
                row(f"allreduce W={w} params={p}", w,
                    lambda: run_allreduce(lab, args, w, p, work))
            with open(os.path.join(args.out, "results.json"), "w") as f:
                json.dump(rows, f, indent=1)
    return rows, failed


def open_lab(args) -> Optional[Lab]:
    """The lab that is up, checked; None (after a message) when unusable."""
    try:
        lab = Lab(args.prefix)
    except (RuntimeError, subprocess.SubprocessError) as e:
        print(f"scaling: no lab '{args.prefix}' is up ({e}); start one with "
              "tools/lab/netlab up N --rate=RATE", file=sys.stderr)
        return None
    bad = mis_shaped(lab.status(), lab.rate)
    if bad:
        print(f"scaling: lab '{lab.prefix}' has links not at its rate "
              f"{lab.rate} (a straggler left by a killed run?):\n  "
              + "\n  ".join(bad) + f"\nrestore them with {NETLAB} "
              f"--prefix={lab.prefix} shape HOST", file=sys.stderr)
        return None
    if args.straggler and parse_rate_bits(
            straggler_rate(lab.rate, args.straggler)) < 1e6:
        print(f"scaling: --straggler={args.straggler} x {lab.rate} is under "
              "netlab's 1mbit", file=sys.stderr)
        return None
    return lab


def main() -> int:
    args = parse_args()
    # SIGTERM and SIGHUP unwind like Ctrl-C: processes stopped, straggler
    # restored, temporary files removed.
    def on_signal(n: int, _) -> None:
        print(f"scaling: stopped by {signal.Signals(n).name}", file=sys.stderr)
        sys.exit(128 + n)

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, on_signal)
    if "allreduce" in args.systems.split() and not has_torch(PEER_PYTHON):
        print(f"scaling: skipping the all-reduce rows: {PEER_PYTHON} cannot "
              "import torch (install it with tools/setup.sh --torch)",
              file=sys.stderr)
        args.systems = " ".join(x for x in args.systems.split()
                                if x != "allreduce")
        if not args.systems:
            print("scaling: no row left to run (--systems)", file=sys.stderr)
            return 2
    if os.geteuid() != 0:
        print("scaling: needs root (the lab's namespaces)", file=sys.stderr)
        return 2
    lab = open_lab(args)
    if lab is None:
        return 2
    bindir = args.bin or subprocess.check_output(
        ["bazel", "info", "--config=opt", "bazel-bin"], cwd=ROOT, text=True,
        stderr=subprocess.DEVNULL).strip()
    if not args.bin:
        subprocess.run(["bazel", "build", "--config=opt", "//server:psd",
                        "//worker:workerd", "//tools/psctl:psctl"], cwd=ROOT, check=True)
    os.makedirs(args.out, exist_ok=True)
    work = tempfile.mkdtemp(prefix="scaling-")
    print(f"scaling: lab '{lab.prefix}' with {len(lab.hosts)} hosts at {lab.rate} "
          f"(B = {lab.bytes_per_s / 1e6:.1f} MB/s of TCP payload per direction)"
          + (f", straggler at {args.straggler:g} x" if args.straggler else ""),
          flush=True)
    try:
        ref = reference(lab, args, work)
        if ref:
            with open(os.path.join(args.out, "tcp_reference.json"), "w") as f:
                json.dump(ref, f, indent=1)
        rows, failed = sweep(lab, args, bindir, work, ref)
    except KeyboardInterrupt:
        print("scaling: interrupted", file=sys.stderr)
        return 130
    finally:
        if args.keep_logs:
            print(f"scaling: logs kept in {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)
    print(table(rows))
    # The charts need matplotlib in /usr/bin/python3 (python3-matplotlib); a
    # machine without it (tools/lab/device_lab.sh's) still gets its rows.
    plot = subprocess.run(["/usr/bin/python3", PLOT, os.path.join(args.out, "results.json"),
                           "--out", args.out], capture_output=True, text=True)
    if plot.returncode != 0:
        print(f"scaling: no charts: {plot.stderr.strip().splitlines()[-1:] or plot.returncode}"
              f" (run {PLOT} on {args.out}/results.json elsewhere)", file=sys.stderr)
    if failed:
        print(f"scaling: {failed} rows failed (above)", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
