#!/usr/bin/env python3
"""A live re-placement in the network lab (issue 29, docs/OPERATIONS.md
"Moving a job between shards"): a BSP lab job of --params parameters on
--from of --to psd (hosts 1..TO; shard 0 the coordinator), --workers workerd
on the next hosts, no checkpoints. Once the job has run --steps-before steps,
`psctl scale JOB --shards=TO`; the job then runs --steps-after more steps and
is cancelled. Reported: the move's status (chunks and bytes moved, the pause
step, the pause: from the last shard reaching it to the last commit), the
time the link needs for the moved bytes, and the step times around the move
from the job's curve against the median step. Needs root and a lab that is
up:

  tools/lab/netlab up 6 --rate=1gbit
  tools/lab/reshard_lab.py --bin=DIR --params=100M --from=3 --to=4
  tools/lab/netlab down
"""
import argparse
import csv
import json
import os
import re
import statistics
import sys
import tempfile
import time
from typing import List

LAB = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, LAB)

from lab_cost import stop_and_clean  # noqa: E402
from rereplicate import job_step  # noqa: E402
from scaling import job_spec, model_params, open_lab, parse_count  # noqa: E402
from scaling import start_ps  # noqa: E402


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", required=True,
                    help="a folder with server/psd, worker/workerd and "
                    "tools/psctl/psctl")
    ap.add_argument("--params", default="100M")
    ap.add_argument("--from", dest="from_shards", type=int, default=3)
    ap.add_argument("--to", dest="to_shards", type=int, default=4)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--steps-before", type=int, default=8)
    ap.add_argument("--steps-after", type=int, default=8)
    ap.add_argument("--partition-bytes", type=int, default=2 << 20)
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--prefix", default=os.environ.get("NETLAB_PREFIX", "pslab"))
    ap.add_argument("--out", default="", help="write the result as JSON here")
    ap.add_argument("--keep-logs", action="store_true")
    args = ap.parse_args()
    # What scaling.start_ps and scaling.job_spec read.
    args.model, args.layers, args.compute_ms, args.batch = "lab", 8, 0.0, 32
    args.steps, args.shard_budget, args.pacing = 100000, 16 << 30, False
    args.worker_config, args.straggler, args.psd_config = "", None, ""
    args.job_config = f"shards: {args.from_shards}"
    return args


def step_times(curve: str, job: str) -> List[tuple]:
    """(step, seconds per step since the previous point) from psctl curves'
    CSV, for `job`."""
    out, prev = [], None
    with open(curve) as f:
        for r in csv.DictReader(f):
            if r.get("job", job) != job:
                continue
            step, t = int(r["step"]), float(r["elapsed_s"])
            if prev is not None and step > prev[0]:
                out.append((step, (t - prev[1]) / (step - prev[0])))
            prev = (step, t)
    return out


def main() -> int:
    args = parse_args()
    lab = open_lab(args)
    if lab is None:
        return 2
    shards = max(args.from_shards, args.to_shards)
    if len(lab.hosts) < shards + args.workers:
        print(f"reshard_lab: the lab has {len(lab.hosts)} hosts; "
              f"{shards + args.workers} needed", file=sys.stderr)
        return 2
    params = model_params(parse_count(args.params), args.layers)
    bindir = os.path.abspath(args.bin)
    psctl = f"{bindir}/tools/psctl/psctl"
    d = tempfile.mkdtemp(prefix="reshard-lab-")
    cluster = f"--cluster={d}/cluster.pbtxt"
    procs: List = []
    result = {}
    try:
        start_ps(lab, args, bindir, shards, args.workers, d, procs)
        with open(f"{d}/job.pbtxt", "w") as f:
            f.write(job_spec(args, params, args.workers, "bsp"))
        out = lab.run(1, [psctl, "submit", f"{d}/job.pbtxt", cluster,
                          "--connect-timeout=30"], 120)
        job = re.search(r"(job-\d+)", out).group(1)
        deadline = time.monotonic() + args.timeout

        def until(step: int) -> None:
            while job_step(lab, psctl, d, job) < step:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{job} did not reach step {step}")
                time.sleep(0.5)

        until(args.steps_before)
        print(lab.run(1, [psctl, "scale", job, f"--shards={args.to_shards}",
                          cluster], 60).strip(), flush=True)
        while True:
            status = json.loads(lab.run(1, [psctl, "status", job, "--json",
                                            cluster], 60))
            moved = status.get("reshard", {})
            phase = moved.get("phase", "")
            if phase == "done" or phase.startswith(("aborted", "failed")):
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"the move did not end: {moved}")
            time.sleep(0.2)
        until(int(moved.get("pause_step", 0)) + args.steps_after)
        lab.run(1, [psctl, "curves", job, "-o", f"{d}/curve.csv", cluster], 60)
        lab.run(1, [psctl, "cancel", job, cluster], 60)
        times = step_times(f"{d}/curve.csv", job)
        pause_step = int(moved.get("pause_step", 0))
        median = statistics.median(t for _, t in times)
        around = [(s, t) for s, t in times
                  if pause_step - 2 <= s <= pause_step + 3]
        longest = max(t for _, t in around) if around else 0.0
        moved_bytes = int(moved.get("moved_bytes", 0))
        link_s = moved_bytes / lab.bytes_per_s
        result = {"params": params, "rate": lab.rate, "reshard": moved,
                  "link_s": link_s, "median_step_s": median,
                  "longest_step_near_move_s": longest,
                  "steps": times}
        print(f"reshard_lab: {args.from_shards} -> {args.to_shards} shards: "
              f"{moved.get('moved_chunks')} chunks, {moved_bytes / 1e6:.1f} "
              f"MB at step {pause_step}, {phase}; pause "
              f"{float(moved.get('pause_ms', 0)):.0f} ms (the link needs "
              f"{link_s * 1e3:.0f} ms for those bytes at {lab.rate}); "
              f"median step {median:.2f} s, longest near the move "
              f"{longest:.2f} s ({longest / median:.2f}x)", flush=True)
        for s, t in times:
            print(f"  step {s:>5}  {t:6.2f} s/step"
                  f"{'  <- paused here' if s - 1 <= pause_step <= s else ''}")
    finally:
        stop_and_clean(procs, d, args.keep_logs, "reshard_lab")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
