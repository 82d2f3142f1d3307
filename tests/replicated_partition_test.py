#!/usr/bin/python3
"""A primary cut off inside the network lab, alive (issue 28; docs/OPERATIONS.md
"Replication"). 3 psd on lab hosts 1..3 (shard 0 the coordinator), one
workerd on host 4, a BSP lab job with `replication: 2` and no checkpoints:

- undisturbed: the reference parameters (psctl export);
- partial: host 2 (shard 1, a primary) loses its route to host 1 (the
  coordinator) and only that; the workers and the other shards still reach
  it. The coordinator fails it over; its backup, told so, refuses its next
  forward as fenced, and it stops serving at once (its log says so), so the
  worker moves to the successor instead of waiting on a primary that can
  acknowledge nothing (its heartbeats, which would also tell it, come only
  every 20 s in this case). Once healed it rejoins and catches up, and its stale
  forward failures fail no live backup over ("fell behind" never logged);
- full: host 2's link goes down (the process stays alive, nothing answers,
  no error comes back). The worker's heartbeat names the new replica epoch
  and its calls on the wire follow the successor within a few seconds of
  the failover, not at their deadline.

In both disturbed runs the job trains on during the cut (20 more steps),
ends SUCCEEDED, and its parameters are bitwise those of the undisturbed run
(no acknowledged step lost, none applied twice). Every namespace, process
and file it makes is removed. Skips (exit 0, "SKIPPED: ...") without root
or network namespaces.
"""
import datetime
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import types
import zipfile

if os.environ.get("TEST_SRCDIR"):
    ROOT = os.path.join(os.environ["TEST_SRCDIR"], os.environ["TEST_WORKSPACE"])
    BIN = ROOT
else:  # outside Bazel: BIN=$(bazel info --config=opt bazel-bin)
    ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    BIN = os.environ.get("BIN", "")
sys.path.insert(0, os.path.join(ROOT, "tools", "lab"))

from lab_cost import stop  # noqa: E402
from scaling import NETLAB, Lab, job_spec, start_ps  # noqa: E402

STEPS = 400
CUT_AT = 40         # the step the cut starts after
STEPS_DURING = 20   # steps the job must run while the cut lasts
WAIT = 30.0         # seconds any one event may take
# From the coordinator's failover to the worker's move: a heartbeat (1 s by
# default) and a lookup; before, a silent primary held its calls until
# their deadline.
MOVE_BOUND = 3.0


def skip(why: str) -> None:
    print(f"SKIPPED: {why}")
    sys.exit(0)


def sh(*argv: str) -> None:
    subprocess.run(argv, check=True, timeout=60)


def log_time(line: str) -> float:
    """Seconds since the epoch of a daemon log line's timestamp."""
    stamp = datetime.datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S.%f")
    return stamp.timestamp()


class Run:
    """3 psd and 1 workerd in the lab, one job."""

    def __init__(self, lab: Lab, work: str, name: str, psd_config: str = "",
                 worker_config: str = ""):
        self.lab, self.d, self.procs = lab, os.path.join(work, name), []
        os.mkdir(self.d)
        self.psctl = os.path.join(BIN, "tools/psctl/psctl")
        args = types.SimpleNamespace(
            model="lab", layers=4, compute_ms=20.0, batch=8, steps=STEPS,
            shard_budget=1 << 30, pacing=False, worker_config=worker_config,
            straggler=None, job_config="replication: 2", psd_config=psd_config,
            partition_bytes=65536)
        start_ps(lab, args, BIN, 3, 1, self.d, self.procs)
        with open(f"{self.d}/job.pbtxt", "w") as f:
            f.write(job_spec(args, 400000, 1, "bsp"))
        out = self.ctl("submit", f"{self.d}/job.pbtxt", "--connect-timeout=30")
        self.job = re.search(r"(job-\d+)", out).group(1)

    def ctl(self, *argv: str) -> str:
        return self.lab.run(1, [self.psctl, *argv,
                                f"--cluster={self.d}/cluster.pbtxt"], 120)

    def state(self):
        status = json.loads(self.ctl("status", self.job, "--json"))
        return (status.get("state", ""),
                int(status.get("progress", {}).get("step", 0)))

    def await_step(self, step: int) -> None:
        deadline = time.monotonic() + WAIT
        while True:
            state, now = self.state()
            if now >= step:
                return
            assert state in ("PENDING", "RUNNING"), \
                f"{self.job} {state} before step {step}"
            assert time.monotonic() < deadline, \
                f"{self.job} at step {now}, not {step}, after {WAIT:.0f} s"
            time.sleep(0.2)  # a poll of the job's progress

    def await_line(self, log: str, pattern: str) -> str:
        path = f"{self.d}/{log}.log"
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:
            with open(path) as f:
                for line in f:
                    if re.search(pattern, line):
                        return line
            time.sleep(0.1)  # a poll of the log
        raise AssertionError(f"no /{pattern}/ in {log}.log after {WAIT:.0f} s")

    def finish(self) -> dict:
        """Waits for SUCCEEDED; the exported parameters, member by member."""
        deadline = time.monotonic() + 120
        while True:
            state, step = self.state()
            if state not in ("PENDING", "RUNNING"):
                break
            assert time.monotonic() < deadline, f"{self.job} still running"
            time.sleep(0.3)  # a poll of the job's state
        assert state == "SUCCEEDED", f"{self.job} ended {state} at step {step}"
        self.ctl("export", self.job, "-o", f"{self.d}/params.npz")
        with zipfile.ZipFile(f"{self.d}/params.npz") as z:
            return {n: z.read(n) for n in z.namelist()}

    def dump(self) -> None:
        """Every log of the run, for a failure's message."""
        for name in ("psd0", "psd1", "psd2", "worker0"):
            print(f"===== {self.d}/{name}.log")
            print(self.log(name)[-6000:])

    def log(self, name: str) -> str:
        with open(f"{self.d}/{name}.log") as f:
            return f.read()


def cut_partial(lab: Lab, on: bool) -> None:
    """Host 2 and host 1 lose their routes to each other, and only those."""
    verb = "add" if on else "del"
    sh("ip", "netns", "exec", f"{lab.prefix}-h2", "ip", "route", verb,
       "blackhole", lab.hosts[0] + "/32")
    sh("ip", "netns", "exec", f"{lab.prefix}-h1", "ip", "route", verb,
       "blackhole", lab.hosts[1] + "/32")


def cut_full(lab: Lab, on: bool) -> None:
    """Host 2's link goes down (up again when `on` is False)."""
    sh("ip", "netns", "exec", f"{lab.prefix}-h2", "ip", "link", "set", "eth0",
       "down" if on else "up")


def disturbed(lab: Lab, work: str, name: str, cut) -> dict:
    # The partial cut tests the fencing alone: the worker's heartbeats
    # (which would also tell it of the failover) come every 20 s.
    quiet = cut is cut_partial
    run = Run(lab, work, name,
              psd_config="worker_timeout_ms: 60000" if quiet else "",
              worker_config="heartbeat_interval_ms: 20000" if quiet else "")
    try:
        run.await_step(CUT_AT)
        cut(lab, True)
        try:
            failover = run.await_line(
                "psd0", r"coordinator: shard 1 failed over at epoch")
            if cut is cut_partial:
                # Told by its backup, not by the coordinator it cannot reach.
                run.await_line("psd1", r"shard 2 refused a forward: .*fenced.*"
                               r"this shard stops serving the job")
            moved = run.await_line("worker0", r"shard 1 moved from")
            took = log_time(moved) - log_time(failover)
            print(f"{name}: the worker followed the failover in {took:.2f} s")
            assert took <= MOVE_BOUND, \
                f"{name}: the worker moved {took:.2f} s after the failover"
            _, step = run.state()
            run.await_step(step + STEPS_DURING)
        finally:
            cut(lab, False)
        if cut is cut_partial:
            run.await_line("psd0", r"coordinator: shard 1 caught up")
        params = run.finish()
        coordinator = run.log("psd0")
        assert "fell behind" not in coordinator, \
            f"{name}: a live shard was failed over as fallen behind"
        return params
    except BaseException:
        run.dump()
        raise
    finally:
        stop(run.procs)


def main() -> int:
    # ip and tc live in sbin, which a test's PATH may lack.
    os.environ["PATH"] = "/usr/sbin:/sbin:" + os.environ.get("PATH", "")
    if os.geteuid() != 0:
        skip(f"needs root (network namespaces); running as uid {os.geteuid()}")
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            skip(f"no '{tool}' command (iproute2)")
    if not BIN:
        skip("outside Bazel: set BIN to a folder with server/psd, "
             "worker/workerd and tools/psctl/psctl")
    prefix = f"rp{os.getpid() % 100000}"
    probe = f"{prefix}p"
    if subprocess.run(["ip", "netns", "add", probe],
                      capture_output=True).returncode != 0:
        skip("cannot create a network namespace here ('ip netns add' failed)")
    sh("ip", "netns", "del", probe)
    work = tempfile.mkdtemp(prefix="partition-",
                            dir=os.environ.get("TEST_TMPDIR"))
    up = subprocess.run([NETLAB, "up", "4", "--rate=1gbit",
                         f"--prefix={prefix}"], text=True, capture_output=True,
                        timeout=120)
    try:
        assert up.returncode == 0, f"netlab up: {up.stderr}"
        lab = Lab(prefix)
        reference = Run(lab, work, "undisturbed")
        try:
            expected = reference.finish()
        finally:
            stop(reference.procs)
        for name, cut in (("partial", cut_partial), ("full", cut_full)):
            got = disturbed(lab, work, name, cut)
            assert got == expected, \
                f"{name}: the parameters differ from the undisturbed run's"
            print(f"{name}: SUCCEEDED, parameters bitwise equal "
                  f"({len(got)} arrays)")
    finally:
        subprocess.run([NETLAB, "down", f"--prefix={prefix}"],
                       capture_output=True, timeout=120)
        shutil.rmtree(work, ignore_errors=True)
    left = subprocess.run(["ip", "netns", "list"], text=True,
                          capture_output=True).stdout
    assert prefix not in left, f"namespaces left behind:\n{left}"
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
