#!/usr/bin/python3
"""Latency of a normal GET while many idle connections are held open to the
same HTTP endpoint (issue 27: the status page and /metrics).

To every --url at once, opens --idle connections that send nothing (or,
with --partial, half a request) and keeps that many open: a connection the
server closes (its header timeout) is opened again at once. Meanwhile it
sends --probes GETs of each URL in turn, one at a time, --interval-ms apart,
each on a fresh connection, and reports their latency (connect to last
byte):

    tools/bench/http_idle_bench.py --url http://127.0.0.1:9100/metrics \\
        --url http://127.0.0.1:8080/api/jobs --idle 500 --probes 50

Prints one line per URL, then a JSON line with every figure. Exit code 1
when a probe failed or the p99 is over --target-ms.

With --until-signal it holds the connections and probes the URLs in turn
until SIGTERM or SIGINT, then reports: `tools/bench/bench_metrics.sh
--on=idle` runs it that way beside a training job.
"""

import argparse
import json
import selectors
import signal
import socket
import threading
import time
from typing import Dict, List, Tuple
from urllib.parse import urlsplit


def parse_url(url: str) -> Tuple[str, int, str]:
    """(host, port, path) of an http:// URL."""
    parts = urlsplit(url)
    if parts.scheme != "http" or not parts.hostname or not parts.port:
        raise argparse.ArgumentTypeError(
            f"--url {url!r}: want http://HOST:PORT/PATH")
    return parts.hostname, parts.port, parts.path or "/"


class IdleHolder:
    """Keeps `count` connections to (host, port) open, sending nothing but
    `greeting`; reopens those the server closes, counting them."""

    def __init__(self, host: str, port: int, count: int,
                 greeting: bytes) -> None:
        self._addr = (host, port)
        self._greeting = greeting
        self._selector = selectors.DefaultSelector()
        self._stop = threading.Event()
        self.reopened = 0
        for _ in range(count):
            self._open()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _open(self) -> None:
        s = socket.create_connection(self._addr, timeout=5)
        if self._greeting:
            s.sendall(self._greeting)
        s.setblocking(False)
        self._selector.register(s, selectors.EVENT_READ)

    def _run(self) -> None:
        while not self._stop.is_set():
            for key, _ in self._selector.select(timeout=0.1):
                self._selector.unregister(key.fileobj)
                key.fileobj.close()
                try:
                    self._open()
                    self.reopened += 1
                except OSError:
                    pass  # refused (over the cap): one fewer held

    def open_count(self) -> int:
        return len(self._selector.get_map())

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        for key in list(self._selector.get_map().values()):
            key.fileobj.close()
        self._selector.close()


def probe(host: str, port: int, path: str, timeout_s: float) -> Tuple[float,
                                                                      str]:
    """Seconds for one GET on a fresh connection, and its status line."""
    start = time.perf_counter()
    with socket.create_connection((host, port), timeout=timeout_s) as s:
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: {host}\r\n"
                  "Connection: close\r\n\r\n".encode())
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    return time.perf_counter() - start, data.split(b"\r\n", 1)[0].decode(
        errors="replace")


def percentile(values: List[float], q: float) -> float:
    """The q-th percentile (nearest rank) of `values`."""
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, int(round(q / 100 * len(ordered))) - 1))
    return ordered[rank]


class Probes:
    """Latencies and failures of the GETs of one URL."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.latencies: List[float] = []
        self.failures: List[str] = []

    def once(self, timeout_s: float) -> None:
        host, port, path = parse_url(self.url)
        try:
            seconds, status = probe(host, port, path, timeout_s)
            self.latencies.append(seconds * 1000)
            if " 200 " not in status + " ":
                self.failures.append(status)
        except OSError as e:
            self.failures.append(str(e))

    def result(self, holder: IdleHolder, idle: int) -> Dict:
        result = {"url": self.url, "idle": idle,
                  "held_at_end": holder.open_count(),
                  "reopened": holder.reopened,
                  "probes": len(self.latencies) + len(self.failures),
                  "failures": self.failures}
        if self.latencies:
            result.update(p50_ms=percentile(self.latencies, 50),
                          p99_ms=percentile(self.latencies, 99),
                          max_ms=max(self.latencies))
        return result


def probe_all(probes: List[Probes], args: argparse.Namespace) -> None:
    """--probes GETs of each URL in turn; with --until-signal, round robin
    over the URLs until SIGTERM or SIGINT."""
    if not args.until_signal:
        for p in probes:
            for _ in range(args.probes):
                p.once(args.timeout_s)
                time.sleep(args.interval_ms / 1000)
        return
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    while not stop.is_set():
        for p in probes:
            p.once(args.timeout_s)
        stop.wait(args.interval_ms / 1000)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", action="append", required=True,
                        help="http://HOST:PORT/PATH to probe (repeatable)")
    parser.add_argument("--idle", type=int, default=500,
                        help="idle connections held per URL")
    parser.add_argument("--probes", type=int, default=50)
    parser.add_argument("--interval-ms", type=float, default=100,
                        help="pause between probes")
    parser.add_argument("--timeout-s", type=float, default=10,
                        help="deadline of each probe")
    parser.add_argument("--partial", action="store_true",
                        help="idle connections send half a request line")
    parser.add_argument("--target-ms", type=float, default=100,
                        help="p99 above this fails (exit 1)")
    parser.add_argument("--until-signal", action="store_true",
                        help="probe until SIGTERM/SIGINT (--probes unused)")
    args = parser.parse_args()
    greeting = b"GET / HTTP/1.1\r\n" if args.partial else b""
    holders = [IdleHolder(*parse_url(url)[:2], args.idle, greeting)
               for url in args.url]
    print(f"holding {args.idle} idle connections to each of "
          f"{len(args.url)} URLs", flush=True)
    probes = [Probes(url) for url in args.url]
    try:
        probe_all(probes, args)
        results = [p.result(holder, args.idle)
                   for p, holder in zip(probes, holders)]
    finally:
        for holder in holders:
            holder.close()
    ok = True
    for r in results:
        print(f"{r['url']}: {r['idle']} idle ({r['reopened']} reopened, "
              f"{r['held_at_end']} held at the end): p50 "
              f"{r.get('p50_ms', float('nan')):.2f} ms, p99 "
              f"{r.get('p99_ms', float('nan')):.2f} ms, max "
              f"{r.get('max_ms', float('nan')):.2f} ms, "
              f"{len(r['failures'])} failed")
        ok = ok and not r["failures"] and r.get("p99_ms", 1e9) <= args.target_ms
    print(json.dumps(results))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
