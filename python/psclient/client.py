"""The Python API of psclient: a Client of the coordinator and the Worker of
one job, over the native core (psclient._native, C++).

    c = connect(cluster="configs/local/cluster.pbtxt", timeout_s=10.0)
    job_id, joined = c.submit(spec_text, join_existing=True)
    w = c.join(job_id)                 # blocks until the job assigns it
    w.pull(0)                          # w.params: the job's flat parameters
    for step in range(w.start_step, steps):
        ... write the gradient into w.grads ...
        h = w.start("pushpull", step)  # returns at once; GIL released
        w.wait(h)                      # raises psclient.Error subclasses
    w.report(step=steps, finished=True)
    w.close()

`w.params` and `w.grads` are float32 numpy views of the client's own flat
buffers (no copies; the transport reads and writes them in place), laid out
as `w.tensors` says. While a request is in flight its tensors' ranges of
both belong to it: do not write them until `wait` returned.
"""

import math
from typing import Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from psclient import _native
from psclient.errors import Error, ShapeError

TensorInfo = Tuple[str, Tuple[int, ...], int, int]


class Worker:
    """One worker of one job (from Client.join). Thread-safe.

    Attributes: job_id, worker_id, rank, num_workers, start_step, spec_bytes
    (the serialized ps.JobSpec), tensors (list of (name, shape, offset,
    size) in the flat layout), params and grads (float32 1-D numpy views of
    the flat buffers, the same memory for the worker's life).
    """

    def __init__(self, native: "_native.Worker") -> None:
        self._w = native
        self.job_id: str = native.job_id
        self.worker_id: str = native.worker_id
        self.rank: int = native.rank
        self.num_workers: int = native.num_workers
        self.start_step: int = native.start_step
        self.spec_bytes: bytes = native.spec_bytes
        self.tensors: List[TensorInfo] = native.tensors
        self.params: np.ndarray = native.params
        self.grads: np.ndarray = native.grads
        self._by_name = {t[0]: t for t in self.tensors}

    def tensor(self, buffer: np.ndarray, name: str) -> np.ndarray:
        """The view of tensor `name` in `buffer` (w.params or w.grads),
        shaped as the job declares it; no copy."""
        if name not in self._by_name:
            raise ShapeError(
                f"tensor {name!r}: job {self.job_id} has no such tensor "
                f"(it has {', '.join(self._by_name)})", "NOT_FOUND")
        if buffer.dtype != np.float32 or buffer.shape != self.params.shape:
            raise ShapeError(
                f"tensor {name!r}: buffer must be the worker's params or "
                f"grads (float32, {self.params.shape[0]} elements), got "
                f"{buffer.dtype} {buffer.shape}", "INVALID_ARGUMENT")
        _, shape, offset, size = self._by_name[name]
        return buffer[offset:offset + size].reshape(shape)

    def start(self, op: str, step: int,
              tensors: Optional[Sequence[str]] = None,
              priority: int = 0) -> "_native.Handle":
        """Starts `op` ("pull", "push" or "pushpull") of `step` over
        `tensors` (None = all; several are fused per shard) and returns its
        handle: `h.wait(timeout_s)` (or `w.wait(h)`) and `h.cancel()`.
        Never blocks on the network; a higher priority goes on the wire
        first. Raises Error (code NOT_FOUND) naming an unknown tensor.
        """
        if isinstance(tensors, str):
            tensors = [tensors]
        if tensors is not None and len(tensors) == 0:
            raise ShapeError("tensors: an empty list (None means every "
                             "tensor)", "INVALID_ARGUMENT")
        return self._w.start(op, step,
                             None if tensors is None else list(tensors),
                             priority)

    def wait(self, handle: "_native.Handle",
             timeout_s: Optional[float] = None) -> None:
        """Blocks (GIL released) until the request is over. Raises its
        error (naming the tensor, shard, address or job), JobAborted when
        the job was aborted, or Timeout when `timeout_s` passes first (the
        request carries on; wait for it again)."""
        self._check(handle).wait(timeout_s)

    def cancel(self, handle: "_native.Handle") -> None:
        """Ends the request early; its wait then raises Error (CANCELLED)
        unless it was already over. Does not block."""
        self._check(handle).cancel()

    @staticmethod
    def _check(handle: "_native.Handle") -> "_native.Handle":
        if not isinstance(handle, _native.Handle):
            raise Error(f"handle {handle!r}: not a handle that start "
                        "returned", "INVALID_ARGUMENT")
        return handle

    def pull(self, step: int, tensors: Optional[Sequence[str]] = None,
             timeout_s: Optional[float] = None) -> None:
        """Blocking pull of the parameters of `step` into w.params."""
        self.wait(self.start("pull", step, tensors), timeout_s)

    def push(self, step: int, tensors: Optional[Sequence[str]] = None,
             timeout_s: Optional[float] = None) -> None:
        """Blocking push of w.grads as the gradient of `step`."""
        self.wait(self.start("push", step, tensors), timeout_s)

    def push_pull(self, step: int, tensors: Optional[Sequence[str]] = None,
                  timeout_s: Optional[float] = None) -> None:
        """Blocking push of w.grads for `step`, then pull of the parameters
        of step + 1 into w.params."""
        self.wait(self.start("pushpull", step, tensors), timeout_s)

    def report(self, *, step: int, total_steps: int = 0, epoch: int = 0,
               loss: float = math.nan, train_accuracy: float = math.nan,
               test_accuracy: float = -1.0, samples_per_s: float = 0.0,
               data_s: float = 0.0, compute_s: float = 0.0,
               comm_s: float = 0.0, finished: bool = False,
               error: str = "") -> None:
        """Reports progress to the coordinator (psctl status shows it);
        `finished` on the last report, `error` to fail the job. Raises
        JobAborted if the coordinator answers that the job was aborted."""
        self._w.report(step, total_steps, epoch, loss, train_accuracy,
                       test_accuracy, samples_per_s, data_s, compute_s,
                       comm_s, finished, error)

    @property
    def leads(self) -> bool:
        """Whether this worker leads the job now: rank 0, or the lowest rank
        left after an on_worker_failure: SHRINK job lost rank 0 (learned from
        the heartbeats). The leader's reports are the job's progress: it is
        the one to evaluate and report test accuracy."""
        return self._w.leads

    @property
    def aborted(self) -> Optional[str]:
        """None, or why the job was aborted (cancelled, failed)."""
        return self._w.aborted

    def close(self) -> None:
        """Stops the heartbeats, cancels every request and leaves the job
        at once (the coordinator drops this worker's rank now, not after
        its heartbeat timeout; the last step counted for it is the last
        whose push it waited for: close between steps). Idempotent.
        Every later call (start, wait, cancel, report, pull, push) raises
        Error (FAILED_PRECONDITION, "... is closed") at once."""
        self._w.close()

    def __enter__(self) -> "Worker":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class Client:
    """A connection to a cluster's coordinator (from connect()). Close it
    with close() or use it in a `with` block; every call on a closed client
    raises Error (FAILED_PRECONDITION) at once. Workers it joined are not
    closed with it (each holds its own connection)."""

    def __init__(self, native: "_native.Client") -> None:
        self._native: Optional["_native.Client"] = native
        self._address: str = native.coordinator

    @property
    def _c(self) -> "_native.Client":
        native = self._native
        if native is None:
            raise Error(f"client of the coordinator at {self._address} is "
                        "closed", "FAILED_PRECONDITION")
        return native

    @property
    def coordinator(self) -> str:
        """The coordinator's "host:port"."""
        return self._c.coordinator

    def close(self) -> None:
        """Drops the connection to the coordinator; idempotent."""
        self._native = None

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def submit(self, spec: Union[str, bytes], join_existing: bool = False,
               dry_run: bool = False) -> Tuple[str, bool]:
        """Submits a job: `spec` is a ps.JobSpec in text format (str) or
        serialized (bytes). With join_existing, a pending or running job of
        the same name and spec is answered instead (joined = True). Returns
        (job_id, joined); job_id is "" on a dry run. Raises InvalidSpec
        listing every problem."""
        return self._c.submit(spec, join_existing, dry_run)

    def status(self, job_id: str) -> Dict:
        """The job's status: job_id, name, state ("RUNNING"...), reason,
        workers, progress (a dict of the Progress fields), times."""
        return self._c.status(job_id)

    def cancel(self, job_id: str) -> str:
        """Cancels the job; returns its state after the call."""
        return self._c.cancel(job_id)

    def jobs(self) -> List[Dict]:
        """The status of every job the coordinator knows."""
        return self._c.jobs()

    def join(self, job_id: str, name: Optional[str] = None,
             timeout_s: float = 60.0) -> Worker:
        """Registers as a worker of `job_id` and blocks until the job
        assigns this worker a rank (it starts once it has all its workers).
        Raises Timeout naming the job and what it waits for."""
        return Worker(self._c.join(job_id, name or "", timeout_s))


def connect(cluster: Optional[str] = None, coordinator: Optional[str] = None,
            tls_ca: Optional[str] = None, tls_cert: Optional[str] = None,
            tls_key: Optional[str] = None, token: Optional[str] = None,
            timeout_s: float = 10.0) -> Client:
    """Connects to a cluster: its cluster file (shard addresses, TLS and
    token) and/or the coordinator's "host:port". tls_* (PEM file paths) and
    token replace the cluster file's. Raises Unavailable naming the address
    when the coordinator does not answer within timeout_s."""
    return Client(_native.connect(cluster or "", coordinator or "",
                                  tls_ca or "", tls_cert or "",
                                  tls_key or "", token or "", timeout_s))


def export(path: str, job: Optional[str] = None, *,
           cluster: Optional[str] = None, coordinator: Optional[str] = None,
           from_checkpoint: Optional[str] = None,
           tables_dir: Optional[str] = None,
           timeout_s: Optional[float] = None) -> str:
    """Writes a job's parameters to `path` (.npz), as `psctl export`
    does and with the same code: one float32 array per tensor name and
    shape, and the JobSpec as JSON under "__job_spec__". A job's sparse
    tables' rows are streamed in (never the whole table in memory) as
    "tables/NAME/ids" (uint64) and "tables/NAME/values" (float32, rows x
    dim), or with tables_dir=DIR (which must not exist) as one file per
    table and shard, DIR/NAME.shardN.npz with "ids" and "values". A path ending in
    .pt, .ts or .onnx gets a built-in model's PyTorch state_dict,
    TorchScript or ONNX instead (psclient.export_model, which raises
    ValueError naming the file or tensor for a model it cannot convert).

    job: a running or SUCCEEDED job's id, pulled from its shards through
    `cluster` (file) or `coordinator` ("host:port"); or, with
    from_checkpoint=DIR, read from stopped shards' checkpoints in DIR (job
    may then be left out when DIR holds one job). timeout_s: each pull's
    deadline, and one table's rows from one shard (default 60). The file
    (and tables_dir) appears complete or not at all.
    Returns psctl's summary line. Raises InvalidSpec for bad input (an
    unknown job, a path that cannot be written, a directory without the
    job's checkpoints; psctl's exit 2) and Error otherwise, with psctl's
    message naming the job or file."""
    if not isinstance(path, str) or not path:
        raise ValueError("path: expected a file name ending in .npz")
    if path.endswith((".pt", ".ts", ".onnx")):
        from psclient import export_model  # imports torch
        return export_model.export(
            path, job, cluster=cluster, coordinator=coordinator,
            from_checkpoint=from_checkpoint, timeout_s=timeout_s)
    argv = [] if job is None else [str(job)]
    argv += ["-o", path]
    if cluster:
        argv.append("--cluster=" + cluster)
    if coordinator:
        argv.append("--coordinator=" + coordinator)
    if from_checkpoint is not None:
        argv.append("--from-checkpoint=" + from_checkpoint)
    if tables_dir is not None:
        argv.append("--tables-dir=" + tables_dir)
    if timeout_s is not None:
        argv.append("--timeout=%r" % float(timeout_s))
    return _native.export_model(argv).strip()
