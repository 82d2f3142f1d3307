"""What a scaling row costs and what bounds it (tools/lab/scaling.py): the CPU
seconds of the processes a row starts, the bytes the lab's hosts send, the
bandwidth bounds (with a straggler), and a raw-TCP reference run with iperf3
in the same lab.

  tx0 = host_tx_bytes("pslab", 8)
  ...                                  # the row
  cpu_s_per_gb(cpu_s, host_tx_bytes("pslab", 8) - tx0)

Definitions (docs/SCALING.md):
  CPU s      user + system CPU seconds of the row's processes and their
             children (/proc/PID/stat utime + stime + cutime + cstime, or
             getrusage); the machine's other processes are not counted.
  GB tx      bytes sent by the lab hosts' eth0 (Ethernet frames: payload,
             TCP/IP/Ethernet headers and retransmits), summed over every
             host, / 1e9. Read from the bridge-side veth's rx counter in the
             root namespace, which is the same counter as the host's eth0 tx.
  cpu s/GB   CPU s / GB tx.
  cpu vs tcp a row's cpu s/GB / that of iperf3 streams in the same lab.
"""

import contextlib
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import time
from typing import Dict, List, Optional

CLK_TCK = os.sysconf("SC_CLK_TCK")
TCP_PAYLOAD = 0.956  # of the link rate (1448 / 1514)
RATE_UNITS = {"kbit": 1e3, "mbit": 1e6, "gbit": 1e9}


def parse_rate_bits(text: str) -> float:
    """'250mbit' -> 2.5e8 bits/s (netlab's RATE syntax; tc's '1Gbit' too)."""
    m = re.fullmatch(r"([0-9.]+)(kbit|mbit|gbit)", text.strip().lower())
    if not m:
        raise ValueError(f"unknown rate {text!r}")
    return float(m.group(1)) * RATE_UNITS[m.group(2)]


def straggler_rate(rate: str, fraction: float) -> str:
    """The netlab RATE of `fraction` x `rate`, in whole kbit: ('1gbit', 0.5)
    -> '500000kbit'. ValueError when fraction is not in (0, 1]."""
    if not 0 < fraction <= 1:
        raise ValueError(f"--straggler: {fraction} is not in (0, 1]")
    return f"{round(parse_rate_bits(rate) * fraction / 1e3)}kbit"


def ps_bound(m_bytes: float, workers: int, shards: int, bytes_per_s: float,
             steps: int, compute_s: float = 0.0,
             straggler: float = 1.0) -> float:
    """A BSP parameter-server row's step-time bound in seconds. Each worker
    pushes M and pulls M over its own link (the straggler's at `straggler`
    x B), each shard receives and sends W M / S; the train time also holds
    the first Pull, one more transfer, spread over the steps."""
    transfer = max(m_bytes / (straggler * bytes_per_s),
                   workers * m_bytes / (shards * bytes_per_s))
    return compute_s + (1 + 1 / max(1, steps)) * transfer


def ring_bound(m_bytes: float, workers: int, bytes_per_s: float,
               compute_s: float = 0.0, straggler: float = 1.0) -> float:
    """Ring all-reduce: every worker sends and receives 2 (W - 1) / W x M, the
    slowest link (the straggler's, at `straggler` x B) sets the pace."""
    return compute_s + 2 * (workers - 1) / workers * m_bytes / (
        straggler * bytes_per_s)


def proc_stat_cpu(text: str, clk_tck: int = CLK_TCK) -> float:
    """CPU seconds in a /proc/PID/stat line: utime + stime + cutime + cstime
    (fields 14-17; the command name, field 2, may hold spaces and ')')."""
    fields = text[text.rindex(")") + 2:].split()  # fields[0] is field 3
    if len(fields) < 15:
        raise ValueError(f"short /proc/PID/stat line: {text!r}")
    return sum(int(x) for x in fields[11:15]) / clk_tck


def read_proc(pid: int, name: str, what: str) -> str:
    """/proc/PID/NAME of a live process; `what` names what is lost when it
    is gone."""
    try:
        with open(f"/proc/{pid}/{name}") as f:
            return f.read()
    except FileNotFoundError:
        raise RuntimeError(f"process {pid} is gone: its {what} is lost")


def proc_cpu(pid: int) -> float:
    """CPU seconds of a live process and its reaped children so far."""
    return proc_stat_cpu(read_proc(pid, "stat", "CPU time"))


def status_vm_hwm(text: str) -> int:
    """Peak resident bytes (VmHWM) in a /proc/PID/status text."""
    m = re.search(r"^VmHWM:\s+(\d+) kB$", text, re.M)
    if m is None:
        raise ValueError("no VmHWM line in /proc/PID/status")
    return int(m.group(1)) * 1024


def peak_rss(pid: int) -> int:
    """Peak resident bytes of a live process so far."""
    return status_vm_hwm(read_proc(pid, "status", "peak memory"))


def children_cpu() -> float:
    """CPU seconds of this process's reaped children (getrusage)."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def host_tx_bytes(prefix: str, hosts: int) -> int:
    """Bytes sent so far by the eth0 of hosts 1..`hosts` of lab `prefix`."""
    total = 0
    for i in range(1, hosts + 1):
        path = f"/sys/class/net/{prefix}-v{i}/statistics/rx_bytes"
        try:
            with open(path) as f:
                total += int(f.read())
        except FileNotFoundError:
            raise RuntimeError(f"{path} is missing: is lab {prefix!r} up?")
    return total


def cpu_s_per_gb(cpu_s: float, tx_bytes: float) -> Optional[float]:
    """CPU seconds per 1e9 bytes sent; None when nothing was sent."""
    return cpu_s / (tx_bytes / 1e9) if tx_bytes > 0 else None


def cpu_ticks() -> tuple:
    """(busy, total) jiffies of all CPUs from /proc/stat (idle + iowait are
    not busy)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return sum(v) - v[3] - v[4], sum(v)


def cpu_busy(start: tuple) -> float:
    """Fraction of the machine's CPU time busy since `start` (cpu_ticks())."""
    busy, total = cpu_ticks()
    return (busy - start[0]) / max(1, total - start[1])


class CostWindow:
    """What a row costs between open (construction) and close(): the CPU
    seconds of `procs` (alive throughout) and of the children this process
    reaps meanwhile (psctl, the all-reduce peers), the machine's CPU busy
    fraction, and the bytes all lab hosts send (lab_cost)."""

    def __init__(self, lab, procs: List[subprocess.Popen]):
        self.lab, self.procs = lab, procs
        self.tx0 = lab.tx_bytes()
        self.busy0 = cpu_ticks()
        self.cpu0 = [proc_cpu(p.pid) for p in procs]
        self.children0 = children_cpu()

    def close(self) -> Dict:
        busy = cpu_busy(self.busy0)
        cpu = children_cpu() - self.children0 + sum(
            proc_cpu(p.pid) - c for p, c in zip(self.procs, self.cpu0))
        tx = self.lab.tx_bytes() - self.tx0
        return {"cpu_busy": busy, "cpu_s": cpu, "tx_bytes": tx,
                "cpu_s_per_gb": cpu_s_per_gb(cpu, tx)}


def mis_shaped(status: str, rate: str) -> List[str]:
    """'host I: LINE' for each line of `netlab status` whose tbf is not at
    `rate` (a straggler left behind by a run that was killed)."""
    want = parse_rate_bits(rate)
    bad, host = [], "?"
    for line in status.splitlines():
        h = re.match(r"(\d+) \S+-h\d+ ", line)
        host = h.group(1) if h else host
        m = re.search(r"tbf ([0-9.]+[KMG]bit),", line)
        if m and abs(parse_rate_bits(m.group(1)) - want) > 0.01 * want:
            bad.append(f"host {host}: {line.strip()}")
    return bad


@contextlib.contextmanager
def straggler(lab, host: int, frac: Optional[float]):
    """Host `host` at `frac` x the lab's rate for the block, then restored
    (also on an exception, Ctrl-C or SIGTERM: main turns it into SystemExit)."""
    if frac is None:
        yield
        return
    lab.shape(host, straggler_rate(lab.rate, frac))
    try:
        yield
    finally:
        try:
            lab.shape(host)
        except (RuntimeError, subprocess.SubprocessError) as e:
            sys.exit(f"scaling: could not restore host {host}'s rate ({e}); "
                     f"run: tools/lab/netlab --prefix={lab.prefix} shape {host}")


def stop(procs: List[subprocess.Popen]) -> None:
    """SIGTERM to each process group still running, SIGKILL after 10 s."""
    for p in procs:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGTERM)
    deadline = time.time() + 10
    for p in procs:
        try:
            p.wait(timeout=max(0.1, deadline - time.time()))
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()


def stop_and_clean(procs: List[subprocess.Popen], folder: str,
                   keep_logs: bool, name: str = "") -> None:
    """stop(procs), then removes `folder` (the run's logs and files) unless
    `keep_logs`; kept, and with a `name`, says where they are."""
    stop(procs)
    if not keep_logs:
        shutil.rmtree(folder, ignore_errors=True)
    elif name:
        print(f"{name}: logs kept in {folder}", file=sys.stderr)


def tcp_reference(lab, hosts: int, seconds: float, work: str,
                  timeout: float) -> Dict:
    """iperf3 in a ring of lab hosts 1..`hosts`: each sends `seconds` of the
    lab's payload rate (iperf3 -n) to the next and receives from the one
    before, all at once, so every link carries a stream each way as in a
    row. Returns the iperf3 processes' CPU (clients and servers) per GB of
    eth0 tx. `lab` is scaling.Lab (popen, hosts, prefix, bytes_per_s); the
    logs go to `work`."""
    n_bytes = max(1 << 20, int(seconds * lab.bytes_per_s))
    procs: List[subprocess.Popen] = []
    try:
        window = CostWindow(lab, [])  # every iperf3 is reaped within it
        logs = [f"{work}/iperf3-s{i + 1}.log" for i in range(hosts)]
        procs += [lab.popen(i + 1, ["iperf3", "-s", "-1", "--forceflush", "-B",
                                    lab.hosts[i], "-p", "5201"], logs[i])
                  for i in range(hosts)]
        wait_files(logs, procs, 10, text="Server listening")
        t0 = time.time()
        procs += [lab.popen(i + 1, ["iperf3", "-c", lab.hosts[(i + 1) % hosts],
                                    "-p", "5201", "-n", str(n_bytes)],
                            f"{work}/iperf3-c{i + 1}.log")
                  for i in range(hosts)]
        for p in procs[hosts:]:
            p.wait(timeout=timeout)
        wall = time.time() - t0
        for p in procs[:hosts]:
            p.wait(timeout=10)  # a server exits after its one test (-1)
        cost = window.close()
        failed = [p.args[3:] for p in procs if p.returncode != 0]
        if failed:
            raise RuntimeError(f"iperf3 failed: {failed}")
    finally:
        stop(procs)
    return {"hosts": hosts, "bytes_per_stream": n_bytes, "seconds": wall,
            "goodput_bytes_per_s": hosts * n_bytes / wall, **cost}


def wait_files(paths: List[str], procs: List[subprocess.Popen], timeout: float,
               text: str = "") -> None:
    """Until every file in `paths` exists and holds `text` (written by other
    processes: `procs`, which must not exit first)."""
    deadline = time.time() + timeout
    while True:
        missing = []
        for path in paths:
            try:
                with open(path) as f:
                    if text not in f.read():
                        missing.append(path)
            except FileNotFoundError:
                missing.append(path)
        if not missing:
            return
        for p in procs:
            if p.poll() is not None:
                raise RuntimeError(f"{p.args[3:]} exited with {p.returncode} "
                                   f"before writing {missing}")
        if time.time() > deadline:
            raise RuntimeError(f"no {text or 'file'!r} after {timeout} s in "
                               f"{missing}")
        time.sleep(0.05)  # another process writes them: nothing to wait on
