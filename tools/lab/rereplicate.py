#!/usr/bin/env python3
"""Re-replication in the network lab (issue 28, docs/OPERATIONS.md
"Replication"): how long a psd restarted empty takes to copy its replicas
back while the job trains, against the time its link needs for their bytes.

S psd on hosts 1..S (shard 0 the coordinator), one workerd on host S + 1,
a BSP lab job of --params parameters with `replication: 2` and no
checkpoints. Once the job has run --steps-before steps, shard --victim is
SIGKILLed; once the coordinator failed it over it is started again with its
config (a new port) and rejoins empty. Reported: from that start to the
coordinator's "caught up" line, the bytes its host received meanwhile, the
replica bytes it holds (its share of the model: k / S of it), and the ratio
of the time to what its link needs for those bytes. Needs root and a lab
that is up:

  tools/lab/netlab up 4 --rate=1gbit
  tools/lab/rereplicate.py --bin=DIR --params=250M
  tools/lab/netlab down
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from typing import List

LAB = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, LAB)

from lab_cost import stop_and_clean  # noqa: E402
from scaling import Lab, job_spec, model_params, open_lab, parse_count  # noqa: E402
from scaling import start_ps  # noqa: E402


def host_rx_bytes(lab: Lab, host: int) -> int:
    """Bytes host `host` (1-based) received on its eth0 so far: what its
    veth's root end sent into the namespace."""
    with open(f"/sys/class/net/{lab.prefix}-v{host}/statistics/tx_bytes") as f:
        return int(f.read())


def wait_log(path: str, pattern: str, timeout: float, what: str,
             procs: List[subprocess.Popen]) -> re.Match:
    """The first match of `pattern` in the log at `path`, polled; fails after
    `timeout` s or when a process of `procs` exited."""
    deadline = time.monotonic() + timeout
    rx = re.compile(pattern, re.M)
    while time.monotonic() < deadline:
        with open(path) as f:
            m = rx.search(f.read())
        if m:
            return m
        for p in procs:
            if p.poll() is not None:
                raise RuntimeError(f"waiting for {what}: {p.args} exited "
                                   f"with {p.returncode}")
        time.sleep(0.05)
    raise RuntimeError(f"no {what} within {timeout:.0f} s (in {path})")


def job_step(lab: Lab, psctl: str, d: str, job: str) -> int:
    """The job's step from `psctl status JOB --json`; fails once the job
    ended."""
    out = lab.run(1, [psctl, "status", job, "--json", "--connect-timeout=60",
                      f"--cluster={d}/cluster.pbtxt"], 90)
    status = json.loads(out)
    if status.get("state") in ("FAILED", "CANCELLED", "SUCCEEDED"):
        raise RuntimeError(f"{job} ended {status['state']}: "
                           f"{status.get('reason', '')}")
    return int(status.get("progress", {}).get("step", 0))


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", required=True,
                    help="a folder with server/psd, worker/workerd and "
                    "tools/psctl/psctl")
    ap.add_argument("--params", default="250M",
                    help="model parameters (250M = 1 GB of fp32 values)")
    ap.add_argument("--shards", type=int, default=3)
    ap.add_argument("--victim", type=int, default=2,
                    help="the shard killed and restarted (not 0, the "
                    "coordinator)")
    ap.add_argument("--steps-before", type=int, default=2)
    ap.add_argument("--partition-bytes", type=int, default=2 << 20)
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--psd-config", default="shard_heartbeat_misses: 20",
                    help="extra PsdConfig text for every psd: by default 2 s "
                    "of missed heartbeats before a failover, as a link "
                    "saturated by a 1 GB step (and 2 shared cores) can hold "
                    "the 100 ms heartbeats past the default 3 misses")
    ap.add_argument("--prefix", default=os.environ.get("NETLAB_PREFIX", "pslab"))
    ap.add_argument("--out", default="", help="write the result as JSON here")
    ap.add_argument("--keep-logs", action="store_true")
    args = ap.parse_args()
    if not 0 < args.victim < args.shards:
        ap.error("--victim must be a shard other than 0 (the coordinator)")
    # What scaling.start_ps and scaling.job_spec read.
    args.model, args.layers, args.compute_ms, args.batch = "lab", 8, 0.0, 32
    args.steps, args.shard_budget, args.pacing = 100000, 16 << 30, False
    args.worker_config, args.straggler = "", None
    args.job_config = "replication: 2"
    return args


def main() -> int:
    args = parse_args()
    lab = open_lab(args)
    if lab is None:
        return 2
    if len(lab.hosts) < args.shards + 1:
        print(f"rereplicate: the lab has {len(lab.hosts)} hosts; "
              f"{args.shards + 1} needed", file=sys.stderr)
        return 2
    params = model_params(parse_count(args.params), args.layers)
    bindir = os.path.abspath(args.bin)
    psctl = f"{bindir}/tools/psctl/psctl"
    d = tempfile.mkdtemp(prefix="rereplicate-")
    procs: List[subprocess.Popen] = []
    result = {}
    try:
        start_ps(lab, args, bindir, args.shards, 1, d, procs)
        with open(f"{d}/job.pbtxt", "w") as f:
            f.write(job_spec(args, params, 1, "bsp"))
        out = lab.run(1, [psctl, "submit", f"{d}/job.pbtxt",
                          f"--cluster={d}/cluster.pbtxt",
                          "--connect-timeout=30"], 120)
        job = re.search(r"(job-\d+)", out).group(1)
        deadline = time.monotonic() + args.timeout
        while job_step(lab, psctl, d, job) < args.steps_before:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{job} did not reach step "
                                   f"{args.steps_before}")
            time.sleep(0.5)
        v = args.victim
        victim = procs[v]
        os.killpg(victim.pid, 9)
        victim.wait(30)
        print(f"rereplicate: shard {v} SIGKILLed at step "
              f"{job_step(lab, psctl, d, job)}", flush=True)
        coord = f"{d}/psd0.log"
        wait_log(coord, rf"coordinator: shard {v} failed over", 60,
                 f"the failover of shard {v}", procs[:v])
        os.remove(f"{d}/psd{v}.addr")
        rx0 = host_rx_bytes(lab, v + 1)
        t0 = time.monotonic()
        procs[v] = lab.popen(v + 1, [f"{bindir}/server/psd",
                                     f"--config={d}/psd{v}.pbtxt"],
                             f"{d}/psd{v}.restarted.log")
        wait_log(coord, rf"coordinator: shard {v} caught up", args.timeout,
                 f"shard {v} catching up", procs[:args.shards])
        elapsed = time.monotonic() - t0
        rx = host_rx_bytes(lab, v + 1) - rx0
        # Shard v holds its own chunks and the backups of shard v - 1's.
        replica_bytes = 4 * params * 2 / args.shards
        link_s = replica_bytes / lab.bytes_per_s
        result = {"params": params, "shards": args.shards, "rate": lab.rate,
                  "replica_bytes": replica_bytes, "rejoin_s": elapsed,
                  "rx_bytes": rx, "link_s": link_s,
                  "of_link": elapsed / link_s}
        print(f"rereplicate: shard {v} restarted, rejoined and caught up in "
              f"{elapsed:.2f} s: {replica_bytes / 1e9:.2f} GB of replicas "
              f"need {link_s:.2f} s at {lab.rate} ({elapsed / link_s:.2f}x); "
              f"its host received {rx / 1e9:.2f} GB meanwhile", flush=True)
        lab.run(1, [psctl, "cancel", job, f"--cluster={d}/cluster.pbtxt"], 60)
    finally:
        stop_and_clean(procs, d, args.keep_logs, "rereplicate")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
