"""Starts N local workers of a training script, for trying a job out.

    python3 -m psclient.run --cluster=configs/local/cluster.pbtxt --workers=2 \
        examples/torch_mlp.py --epochs=1

Each worker is `python3 SCRIPT ARGS...` with PSCLIENT_CLUSTER (or
PSCLIENT_COORDINATOR), PSCLIENT_WORKERS and PSCLIENT_WORKER_NAME set, which
psclient.torch.join() reads; its output lines are prefixed with "[w<i>] ".
When a worker fails, the others are stopped (SIGTERM, then SIGKILL after
--grace seconds); so are all on Ctrl-C or when --timeout passes. The exit
code is the first failing worker's (124 on timeout), else 0.
"""

import argparse
import os
import signal
import socket
import subprocess
import sys
import threading
import time


def _parse(argv):
    p = argparse.ArgumentParser(
        prog="python3 -m psclient.run",
        description="Start N local workers of a psclient training script.")
    p.add_argument("--cluster", help="the cluster file")
    p.add_argument("--coordinator", help="the coordinator's host:port")
    p.add_argument("--workers", type=int, default=1,
                   help="processes to start (default 1)")
    p.add_argument("--timeout", type=float, default=0,
                   help="stop every worker after this many seconds (0: never)")
    p.add_argument("--cpus", default="",
                   help="pin worker i to the i-th of these comma-separated "
                        "CPU numbers (round robin), e.g. 0,1")
    p.add_argument("--grace", type=float, default=10,
                   help="seconds between SIGTERM and SIGKILL (default 10)")
    p.add_argument("script")
    p.add_argument("args", nargs=argparse.REMAINDER)
    a = p.parse_args(argv)
    if not a.cluster and not a.coordinator:
        p.error("--cluster or --coordinator is required")
    if a.workers < 1:
        p.error("--workers: must be >= 1, got %d" % a.workers)
    if a.cluster and not os.path.isfile(a.cluster):
        p.error("--cluster: no file %r" % a.cluster)
    if not os.path.isfile(a.script):
        p.error("script: no file %r" % a.script)
    try:
        a.cpus = [int(c) for c in a.cpus.split(",") if c.strip()]
    except ValueError:
        p.error("--cpus: want comma-separated CPU numbers, got %r" % a.cpus)
    usable = os.sched_getaffinity(0)
    for c in a.cpus:
        if c not in usable:
            p.error("--cpus: CPU %d is not available (have %s)"
                    % (c, sorted(usable)))
    return a


def _pump(prefix, stream, lock):
    for line in iter(stream.readline, b""):
        with lock:
            sys.stdout.buffer.write(prefix + line)
            sys.stdout.buffer.flush()
    stream.close()


def _stop(procs, grace):
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + grace
    for p in procs:
        try:
            p.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def main(argv=None):
    a = _parse(sys.argv[1:] if argv is None else argv)
    package_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [package_root] + [x for x in env.get("PYTHONPATH", "").split(os.pathsep)
                          if x])
    env["PSCLIENT_WORKERS"] = str(a.workers)
    if a.cluster:
        env["PSCLIENT_CLUSTER"] = os.path.abspath(a.cluster)
    if a.coordinator:
        env["PSCLIENT_COORDINATOR"] = a.coordinator
    host = socket.gethostname()
    procs, pumps = [], []
    lock = threading.Lock()
    for i in range(a.workers):
        wenv = dict(env)
        wenv["PSCLIENT_WORKER_NAME"] = "%s-%d-w%d" % (host, os.getpid(), i)
        pin = None
        if a.cpus:
            cpu = a.cpus[i % len(a.cpus)]
            pin = lambda cpu=cpu: os.sched_setaffinity(0, {cpu})  # noqa: E731
        p = subprocess.Popen([sys.executable, a.script] + a.args, env=wenv,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             preexec_fn=pin)
        procs.append(p)
        t = threading.Thread(target=_pump, args=(b"[w%d] " % i, p.stdout, lock),
                             daemon=True)
        t.start()
        pumps.append(t)
    start = time.monotonic()
    rc = 0
    try:
        while True:
            codes = [p.poll() for p in procs]
            failed = [c for c in codes if c not in (None, 0)]
            if failed:
                rc = failed[0]
                print("psclient.run: a worker exited with %d; stopping the "
                      "others" % rc, file=sys.stderr)
                break
            if all(c == 0 for c in codes):
                break
            if a.timeout and time.monotonic() - start > a.timeout:
                rc = 124
                print("psclient.run: --timeout=%g s passed; stopping the "
                      "workers" % a.timeout, file=sys.stderr)
                break
            time.sleep(0.1)
    except KeyboardInterrupt:
        rc = 130
    finally:
        _stop(procs, a.grace)
        for t in pumps:
            t.join(timeout=5)
    return rc


if __name__ == "__main__":
    sys.exit(main())
