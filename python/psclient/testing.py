"""A local cluster of psd processes for tests and benchmarks.

    with LocalCluster(shards=2) as cluster:
        c = psclient.connect(cluster=cluster.cluster_file)
        ...

Every psd listens on 127.0.0.1 port 0 and writes the address it got to an
address file, which the cluster file names; shard 0 runs the coordinator.
With workerds=N it also starts N workerd processes (built-in models, one
CPU device with one thread each, cpu_kernels fixed to oneDNN) that read
Fashion-MNIST from data_dir.
The configs and logs go to a fresh temporary folder (under $TEST_TMPDIR in
a Bazel test). Every process is stopped on exit (SIGTERM, then SIGKILL),
also when starting fails part way.
"""

import os
import shutil
import signal
import subprocess
import tempfile
import time
from typing import Dict, List, Optional

# How long a psd may take to write its address file, and to exit on SIGTERM.
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 15.0


def _bazel_bin(checkout: str) -> str:
    """`bazel info bazel-bin` of the checkout ("" when bazel fails)."""
    try:
        r = subprocess.run(["bazel", "info", "bazel-bin"], cwd=checkout,
                           capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return r.stdout.strip() if r.returncode == 0 else ""


def find_binary(relative: str) -> str:
    """The built binary `relative` (e.g. "server/psd"): in the runfiles
    (the current folder of a Bazel test), under $PS_BIN_DIR, or in the
    checkout's `bazel info bazel-bin`. Raises FileNotFoundError naming
    where it looked."""
    candidates = [os.path.abspath(relative)]
    if os.environ.get("PS_BIN_DIR"):
        candidates.append(os.path.join(os.environ["PS_BIN_DIR"], relative))
    for c in candidates:
        if os.access(c, os.X_OK):
            return c
    here = os.path.dirname(os.path.abspath(__file__))
    bazel_bin = _bazel_bin(os.path.dirname(os.path.dirname(here)))
    if bazel_bin:
        candidates.append(os.path.join(bazel_bin, relative))
        if os.access(candidates[-1], os.X_OK):
            return candidates[-1]
    raise FileNotFoundError(
        f"{relative}: not built (looked in {', '.join(candidates)}); run "
        f"`bazel build //{os.path.dirname(relative)}:"
        f"{os.path.basename(relative)}`")


class LocalCluster:
    """`shards` psd processes on loopback, each with a job store in its own
    state folder (PsdConfig.state_dir, as configs/local has; the
    coordinator's holds the jobs and their progress) unless psd_extra sets
    one. Not thread-safe."""

    def __init__(self, shards: int = 2, psd_extra: str = "",
                 cluster_extra: str = "", taskset: Optional[str] = None,
                 token: str = "", workerds: int = 0,
                 data_dir: str = "/usr/share/datasets/fashion-mnist",
                 started_shards: Optional[int] = None):
        self.shards = shards
        # psd 0 .. started_shards - 1 start with the cluster; start_shard()
        # starts the others later.
        self.started_shards = shards if started_shards is None else \
            started_shards
        self.workerds = workerds
        self.data_dir = data_dir
        self.token = token  # set: every call must carry it (auth_token_file)
        self.psd_extra = psd_extra
        self.cluster_extra = cluster_extra
        self.taskset = taskset  # e.g. "0-3": pin the shards to these cores
        self.dir = ""
        self._procs: List[subprocess.Popen] = []
        self._shard_procs: Dict[int, subprocess.Popen] = {}

    @property
    def cluster_file(self) -> str:
        return os.path.join(self.dir, "cluster.pbtxt")

    def address(self, shard: int) -> str:
        with open(os.path.join(self.dir, f"s{shard}.addr")) as f:
            return f.read().strip()

    def log(self, shard: int) -> str:
        with open(os.path.join(self.dir, f"psd{shard}.log"),
                  errors="replace") as f:
            return f.read()

    def start(self) -> "LocalCluster":
        self.dir = tempfile.mkdtemp(prefix="psclient-",
                                    dir=os.environ.get("TEST_TMPDIR"))
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self) -> None:
        psd = find_binary("server/psd")
        if self.token:
            with open(os.path.join(self.dir, "token"), "w") as f:
                f.write(self.token + "\n")
            self.cluster_extra += '\nauth_token_file: "token"'
        with open(self.cluster_file, "w") as f:
            for i in range(self.shards):
                f.write(f'shards {{ address_file: "s{i}.addr" }}\n')
            f.write(f"coordinator_shard: 0\n{self.cluster_extra}\n")
        for i in range(self.started_shards):
            self._spawn_psd(psd, i)
        for i in range(self.started_shards):
            self._await_address(i)
        self._start_workerds()

    def start_shard(self, i: int) -> None:
        """Starts psd `i`, one of those left out by started_shards, and
        waits for its address file."""
        if self._shard_procs.get(i) is not None:
            raise ValueError(f"psd {i} is already started")
        self._spawn_psd(find_binary("server/psd"), i)
        self._await_address(i)

    def _spawn_psd(self, psd: str, i: int) -> None:
        config = os.path.join(self.dir, f"psd{i}.pbtxt")
        store = "" if "state_dir" in self.psd_extra else \
            f'state_dir: "state{i}"\n'
        with open(config, "w") as f:
            f.write(f'cluster_file: "cluster.pbtxt"\nshard_id: {i}\n'
                    f'address_file: "s{i}.addr"\n{store}'
                    f"worker_timeout_ms: 3000\n{self.psd_extra}\n")
        argv = [psd, f"--config={config}"]
        if self.taskset:
            argv = ["taskset", "-c", self.taskset] + argv
        with open(os.path.join(self.dir, f"psd{i}.log"), "w") as log:
            p = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                 stdin=subprocess.DEVNULL)
        self._procs.append(p)
        self._shard_procs[i] = p

    def _await_address(self, i: int) -> None:
        p = self._shard_procs[i]
        deadline = time.monotonic() + START_TIMEOUT_S
        path = os.path.join(self.dir, f"s{i}.addr")
        while not (os.path.exists(path) and os.path.getsize(path) > 0):
            if p.poll() is not None:
                raise RuntimeError(f"psd {i} exited with {p.returncode}:"
                                   f"\n{self.log(i)[-2000:]}")
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"psd {i} wrote no address file {path} within "
                    f"{START_TIMEOUT_S} s:\n{self.log(i)[-2000:]}")
            time.sleep(0.05)  # polling a file another process writes

    def psd_process(self, i: int) -> subprocess.Popen:
        """psd `i`'s process (to signal it)."""
        return self._shard_procs[i]

    def _start_workerds(self) -> None:
        if not self.workerds:
            return
        workerd = find_binary("worker/workerd")
        for i in range(self.workerds):
            config = os.path.join(self.dir, f"worker{i}.pbtxt")
            with open(config, "w") as f:
                f.write(f'cluster_file: "cluster.pbtxt"\nname: "worker{i}"\n'
                        'devices: "cpu:0"\nthreads_per_device: 1\n'
                        f'data_dir: "{self.data_dir}"\nloader_threads: 1\n'
                        'heartbeat_interval_ms: 200\n'
                        'cpu_kernels: "onednn"\n')
            with open(os.path.join(self.dir, f"worker{i}.log"), "w") as log:
                self._procs.append(subprocess.Popen(
                    [workerd, f"--config={config}"], stdout=log,
                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL))

    def stop(self) -> None:
        """Stops every psd (SIGTERM, SIGKILL after STOP_TIMEOUT_S) and
        removes the folder."""
        self.stop_daemons()
        if self.dir and not os.environ.get("PSCLIENT_KEEP_CLUSTER_DIR"):
            shutil.rmtree(self.dir, ignore_errors=True)

    def stop_daemons(self) -> None:
        """Stops every psd (SIGTERM, SIGKILL after STOP_TIMEOUT_S), keeping
        the folder (logs, address files) until stop()."""
        for p in self._procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self._procs:
            try:
                p.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self._procs = []
        self._shard_procs = {}

    def __enter__(self) -> "LocalCluster":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
