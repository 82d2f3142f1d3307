"""Peer processes of a lab row (tools/lab/scaling.py's all-reduce rows,
tools/lab/ctr_lab.py's DDP rows): one process per emulated host, waited
for, costed, and read back: rank 0's RESULT line and every rank's log.

  res, cost, logs = run_peers(lab, args, argvs, "all-reduce W=4", work,
                              "ar-w4-", others_s=30)
"""
import json
import re
import subprocess
import tempfile
from typing import Dict, List, Tuple

from lab_cost import CostWindow, stop_and_clean


def peer_cpu(logs: List[str]) -> float:
    """The peers' own CPU seconds over their steps (warm-up included; start,
    torch import and rendezvous not): the sum of their logs' COST lines."""
    total = 0.0
    for r, text in enumerate(logs):
        m = re.search(r"^COST (.*)$", text, re.M)
        if not m:
            raise RuntimeError(f"all-reduce rank {r} printed no COST line")
        total += json.loads(m.group(1))["cpu_s"]
    return total


def run_peers(lab, args, argvs: List[List[str]], what: str, work: str,
              prefix: str, others_s: float) -> Tuple[Dict, Dict, List[str]]:
    """Rank r's argv on host r + 1 for each of `argvs`, logs in a folder
    `prefix`* of `work`; waits for rank 0 (--row-timeout), then up to
    `others_s` for the others. Returns rank 0's RESULT line as JSON, what
    they cost (CostWindow: they are children) and every rank's log;
    RuntimeError naming `what` when rank 0 failed."""
    procs: List[subprocess.Popen] = []
    d = tempfile.mkdtemp(prefix=prefix, dir=work)
    try:
        window = CostWindow(lab, [])  # the peers are children: reaped in it
        for r, argv in enumerate(argvs):
            procs.append(lab.popen(r + 1, argv, f"{d}/rank{r}.log"))
        procs[0].wait(timeout=args.row_timeout)
        for p in procs[1:]:
            p.wait(timeout=others_s)
        cost = window.close()
        logs = []
        for r in range(len(argvs)):
            with open(f"{d}/rank{r}.log") as f:
                logs.append(f.read())
        m = re.search(r"^RESULT (.*)$", logs[0], re.M)
        if procs[0].returncode != 0 or not m:
            raise RuntimeError(f"{what} failed:\n{logs[0][-2000:]}")
        return json.loads(m.group(1)), cost, logs
    finally:
        stop_and_clean(procs, d, args.keep_logs)
