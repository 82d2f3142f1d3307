"""PyTorch integration: a standard training loop on the parameter servers.

    import psclient.torch
    model = Net()
    ps = psclient.torch.join(model, job="fmnist-cnn", workers=2,
                             optimizer={"kind": "SGD", "learning_rate": 0.05,
                                        "momentum": 0.9},
                             mode="bsp", batch_size=64)
    sampler = DistributedSampler(train_set, num_replicas=ps.world_size,
                                 rank=ps.rank, shuffle=True, seed=0)
    for epoch in range(epochs):
        for x, y in ps.timed(DataLoader(train_set, 64, sampler=sampler)):
            loss = F.cross_entropy(model(x), y)
            loss.backward()            # each layer's gradient leaves as it is ready
            ps.step(loss=loss.item())  # the shards' optimizer; parameters come back
        ps.report(test_accuracy=evaluate(model))
    ps.finish()

What join() does:
- The job's tensors are the model's parameters that require a gradient, by
  their names in model.named_parameters(), in that order. The first worker
  to call join() submits the job (ModelSpec.custom); the others find it by
  name (join_existing) and must bring the same tensors, else join() raises
  psclient.InvalidSpec naming the first difference.
- Every parameter's storage becomes a view of the client's flat parameter
  buffer (no copy): pulls write the shards' values straight into the model.
  Initial values come from the shards: each tensor's initializer is drawn
  there from the job seed (so every worker starts identical). By default a
  Linear/Conv/Bilinear weight and bias get U(-1/sqrt(fan_in), +1/sqrt(fan_in)),
  PyTorch's own default distribution, a norm layer's weight 1 and bias 0, an
  Embedding N(0, 1); any other parameter needs an entry in `init`.
- A hook on each parameter copies its gradient into the flat gradient buffer
  when backward produces it and starts its push+pull (fused with its
  neighbours up to `fusion_bytes`, the first layer's at the highest
  priority), so communication overlaps the rest of backward. step() waits for
  every exchange of the step, so the next forward sees the new parameters.
- The optimizer is the job's, applied by the shards: do not also call a
  torch optimizer.
- Gradient accumulation: backward passes run inside `with ps.no_sync():`
  sum their gradients into the client's buffer and send nothing; the step's
  last backward (outside no_sync, its exchanges overlapping it as above) or
  step() itself sends the sums. Scale each micro-batch's loss by
  1 / micro-batches to get the large batch's mean:
      for i, (x, y) in enumerate(micro_batches):
          with ps.no_sync() if i + 1 < len(micro_batches) else nullcontext():
              (F.cross_entropy(model(x), y) / len(micro_batches)).backward()
      ps.step()
  A second backward outside no_sync in one step raises (its first
  gradients are already on the wire).
- A model on a CUDA device works as it is: its parameters live in a device
  buffer mirroring the client's (page-locked) host buffer; gradients go
  device-to-host on a side stream as backward produces them, each bucket's
  push starting once its copies landed, and step() queues the new
  parameters host-to-device (non_blocking) before the next forward without
  synchronizing the device (psclient/torch_cuda.py).
- rank and world_size come from the coordinator (for DistributedSampler);
  `leads` says whether this worker is the one to evaluate (rank 0, or the
  lowest rank left after SHRINK lost rank 0).
"""

import contextlib
import json
import math
import os
import time

import torch

import psclient
from psclient import torch_cuda

# Parameters by module type: (weight init, bias init) as InitSpec text.
_NORM_TYPES = (
    torch.nn.modules.batchnorm._NormBase,
    torch.nn.LayerNorm,
    torch.nn.GroupNorm,
)
_FAN_IN_TYPES = (
    torch.nn.Linear,
    torch.nn.Bilinear,
    torch.nn.modules.conv._ConvNd,
)

_MODES = {"bsp": "BSP", "asp": "ASP", "ssp": "SSP"}
_DEFAULT_FUSION_BYTES = 64 * 1024  # as workerd's fusion_bytes default
_REPORT_INTERVAL_S = 1.0
_CONNECT_TIMEOUT_S = 10.0
# How long step() waits for a CUDA bucket's device-to-host copy (its push
# starts after it): the GPU finishing the backward kernels before it.
_SEND_TIMEOUT_S = 300.0


def _uniform(scale):
    return "kind: UNIFORM scale: %.9g" % scale


def _fan_in(weight):
    # PyTorch's _calculate_fan_in_and_fan_out: dim 1 times the kernel size.
    if weight.dim() < 2:
        return weight.shape[0]
    fan_in = weight.shape[1]
    for d in weight.shape[2:]:
        fan_in *= d
    return fan_in


def default_inits(model):
    """InitSpec text by parameter name for the module types join() knows."""
    inits = {}
    for prefix, module in model.named_modules():
        dot = prefix + "." if prefix else ""
        weight = getattr(module, "weight", None)
        if isinstance(module, _FAN_IN_TYPES) and isinstance(weight, torch.Tensor):
            bound = 1.0 / math.sqrt(max(_fan_in(weight), 1))
            inits[dot + "weight"] = _uniform(bound)
            if getattr(module, "bias", None) is not None:
                inits[dot + "bias"] = _uniform(bound)
        elif isinstance(module, _NORM_TYPES):
            if getattr(module, "weight", None) is not None:
                inits[dot + "weight"] = "kind: CONSTANT value: 1"
            if getattr(module, "bias", None) is not None:
                inits[dot + "bias"] = "kind: ZEROS"
        elif isinstance(module, torch.nn.Embedding):
            inits[dot + "weight"] = "kind: NORMAL scale: 1"
    return inits


def _optimizer_text(optimizer):
    if isinstance(optimizer, str):
        return optimizer
    fields = []
    for key, value in optimizer.items():
        if isinstance(value, bool):
            value = "true" if value else "false"
        fields.append("%s: %s" % (key, value))
    return " ".join(fields)


def job_spec(model, job, workers, optimizer, mode="bsp", staleness=0,
             batch_size=1, seed=0, init=None, step_deadline_ms=0,
             on_worker_failure="", checkpoint_every_steps=0, warm_start=None):
    """The JobSpec text join() submits (also for `psctl submit --dry-run`)."""
    if mode not in _MODES:
        raise ValueError("mode: %r is not one of %s" % (mode, sorted(_MODES)))
    inits = default_inits(model)
    inits.update(init or {})
    lines = []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        _check_tensor(name, p)
        if name not in inits:
            raise ValueError(
                "init: parameter %r of shape %s has no default initializer; pass "
                "init={%r: 'kind: NORMAL scale: 0.02'} or another InitSpec"
                % (name, tuple(p.shape), name))
        shape = " ".join("shape: %d" % d for d in p.shape) or "shape: 1"
        lines.append('tensors { name: "%s" %s init { %s } }'
                     % (name, shape, inits[name]))
    if not lines:
        raise ValueError("model: no parameter requires a gradient")
    consistency = "mode: %s" % _MODES[mode]
    if staleness:
        consistency += " staleness: %d" % staleness
    if step_deadline_ms:
        consistency += " step_deadline_ms: %d" % step_deadline_ms
    spec = [
        'name: "%s"' % job,
        "model { custom { %s } }" % " ".join(lines),
        "data { batch_size: %d }" % batch_size,
        "optimizer { %s }" % _optimizer_text(optimizer),
        "consistency { %s }" % consistency,
        "num_workers: %d" % workers,
        "seed: %d" % seed,
    ]
    if on_worker_failure:
        spec.append("on_worker_failure: %s" % on_worker_failure)
    if checkpoint_every_steps:
        spec.append("checkpoint { every_steps: %d }" % checkpoint_every_steps)
    if warm_start:
        spec.append("init { %s }" % _warm_start_text(warm_start))
    return "\n".join(spec)


def _warm_start_text(warm_start):
    """JobSpec.init as text from {"from_file": path} or {"from_job": name},
    with an optional "optimizer_state": True."""
    known = {"from_file", "from_job", "optimizer_state"}
    unknown = sorted(set(warm_start) - known)
    sources = [k for k in ("from_file", "from_job") if k in warm_start]
    if unknown or len(sources) != 1:
        raise ValueError("warm_start: expected one of from_file, from_job "
                         "(and optionally optimizer_state), got %r"
                         % sorted(warm_start))
    text = "%s: %s" % (sources[0], json.dumps(str(warm_start[sources[0]])))
    if warm_start.get("optimizer_state"):
        text += " optimizer_state: true"
    return text


def _check_tensor(name, p):
    if p.dtype != torch.float32:
        raise psclient.ShapeError(
            "parameter %r: dtype %s, the parameter servers hold float32 "
            "(model.float())" % (name, p.dtype), "INVALID_ARGUMENT")
    if p.device.type not in ("cpu", "cuda"):
        raise psclient.ShapeError(
            "parameter %r: on %s; the Python client exchanges CPU and CUDA "
            "tensors" % (name, p.device), "INVALID_ARGUMENT")


def _check_parameters(model, tensors):
    """The model's trainable parameters against the job's tensors."""
    params = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    if len(params) != len(tensors):
        raise psclient.ShapeError(
            "model has %d trainable parameters, the job %d tensors"
            % (len(params), len(tensors)))
    for (name, p), (tname, shape, _, _) in zip(params, tensors):
        if name != tname:
            raise psclient.ShapeError(
                "parameter %r: the job's tensor in that place is %r"
                % (name, tname))
        if tuple(p.shape) != tuple(shape) and not (p.dim() == 0 and
                                                   tuple(shape) == (1,)):
            raise psclient.ShapeError(
                "parameter %r: shape %s, the job's tensor has %s"
                % (name, tuple(p.shape), tuple(shape)))
        _check_tensor(name, p)
    return params


class Worker:
    """A model joined to a job; see the module comment. Use join()."""

    def __init__(self, model, client, worker, batch_size, fusion_bytes):
        self.model = model
        self._client = client
        self._w = worker
        self.job_id = worker.job_id
        self.rank = worker.rank
        self.world_size = worker.num_workers
        self.step_count = worker.start_step
        self._batch_size = batch_size
        self._fusion_bytes = fusion_bytes
        self._params = _check_parameters(model, worker.tensors)
        try:
            device = torch_cuda.cuda_device(self._params)
        except ValueError as e:
            raise psclient.ShapeError(str(e), "INVALID_ARGUMENT") from None
        flat_params = torch.from_numpy(worker.params)
        flat_grads = torch.from_numpy(worker.grads)
        self._slots = []  # per parameter: (name, grad view, bytes)
        for (name, p), (_, shape, offset, size) in zip(self._params,
                                                       worker.tensors):
            if device is None:
                # The model now lives in the client's buffer.
                p.data = flat_params[offset:offset + size].view(p.shape)
            gview = flat_grads[offset:offset + size].view(p.shape)
            self._slots.append((name, gview, 4 * size))
        # A CUDA model: its parameters in a device buffer mirroring the
        # client's (psclient/torch_cuda.py).
        self._cuda = None
        if device is not None:
            self._cuda = torch_cuda.CudaExchange(
                self._params, flat_params, flat_grads,
                [(offset, size) for _, _, offset, size in worker.tensors],
                device)
        self._hooks = [p.register_hook(self._hook(i))
                       for i, (_, p) in enumerate(self._params)]
        self._begin_step()
        # The shards' initial values (or, rejoining, the current ones).
        self._w.wait(self._w.start("pull", self.step_count))
        if self._cuda is not None:
            self._cuda.load_all()
        self._t_step_end = time.monotonic()
        self._t_start = self._t_step_end
        self._t_report = self._t_step_end
        self._data_s = self._compute_s = self._comm_s = 0.0
        self._step_data_s = 0.0  # timed()'s wait since the last step
        self._losses = []
        self._last = {}
        self._finished = False
        self._job_succeeded = False

    # -- the step ---------------------------------------------------------

    def _begin_step(self):
        self._ready = [False] * len(self._params)
        # Per parameter: a no_sync backward's gradient is in the buffer.
        self._accumulated = [False] * len(self._params)
        self._no_sync = False
        self._bucket = []  # parameter indices held for fusion
        self._bucket_bytes = 0
        self._handles = []

    def _hook(self, index):
        def hook(grad):
            self._on_grad(index, grad)
            return grad
        return hook

    def _on_grad(self, index, grad):
        if self._ready[index]:
            raise RuntimeError(
                "psclient: parameter %r got a second gradient in step %d "
                "after its first was sent: call ps.step() after each "
                "backward, or run all but the step's last backward inside "
                "`with ps.no_sync():` (gradient accumulation)"
                % (self._slots[index][0], self.step_count))
        name, gview, nbytes = self._slots[index]
        if self._cuda is not None:
            self._cuda.take(index, grad, self._accumulated[index],
                            self._no_sync)
        elif self._accumulated[index]:
            gview.add_(grad)
        else:
            gview.copy_(grad)
        if self._no_sync:
            self._accumulated[index] = True
            return
        self._ready[index] = True
        self._bucket.append(index)
        self._bucket_bytes += nbytes
        if self._bucket_bytes >= self._fusion_bytes or all(self._ready):
            self._flush()

    def _flush(self):
        if not self._bucket:
            return
        names = [self._slots[i][0] for i in self._bucket]
        # The first layer's parameters are needed first by the next forward.
        priority = len(self._slots) - min(self._bucket)
        step = self.step_count

        def start():
            return self._w.start("pushpull", step, tensors=names,
                                 priority=priority)

        if self._cuda is None:
            self._handles.append((start(), None))
        else:  # started once the bucket's gradients reached the host
            self._handles.append((self._cuda.send(start), self._bucket))
        self._bucket = []
        self._bucket_bytes = 0

    def _wait_all(self, handles):
        """Waits for the step's exchanges; on CUDA, queues each bucket's new
        parameters to the device as its exchange ends."""
        if self._cuda is not None:
            # Every start first (the sender thread's), then the waits.
            handles = [(f.result(timeout=_SEND_TIMEOUT_S), bucket)
                       for f, bucket in handles]
        for h, bucket in handles:
            self._w.wait(h)
            if self._cuda is not None:
                self._cuda.load(bucket)

    def step(self, loss=None, accuracy=None):
        """Ends the step: every gradient pushed, the new parameters in the model.

        Raises psclient.JobAborted when the job was cancelled or failed, and
        the client's errors (naming tensor, shard and address) otherwise.
        """
        t0 = time.monotonic()
        self._raise_if_aborted()
        if self._no_sync:
            raise RuntimeError("psclient: ps.step() inside ps.no_sync(): "
                               "leave the block first")
        # Parameters not sent yet push what no_sync backwards summed, or
        # zeros (no gradient this step: unused in the graph), so every
        # tensor is exchanged once per step.
        for i, done in enumerate(self._ready):
            if not done:
                if not self._accumulated[i]:
                    self._slots[i][1].zero_()
                elif self._cuda is not None:
                    self._cuda.take_accumulated(i)
                self._ready[i] = True
                self._bucket.append(i)
                self._bucket_bytes += self._slots[i][2]
        self._flush()
        try:
            self._wait_all(self._handles)
        except psclient.Error:
            self._raise_if_ended()
            raise
        for _, p in self._params:
            p.grad = None
        t1 = time.monotonic()
        data_s, self._step_data_s = self._step_data_s, 0.0
        self._data_s += data_s
        self._compute_s += max(0.0, t0 - self._t_step_end - data_s)
        self._comm_s += t1 - t0
        self._t_step_end = t1
        self.step_count += 1
        if loss is not None:
            self._last["loss"] = float(loss)
        if accuracy is not None:
            self._last["train_accuracy"] = float(accuracy)
        if t1 - self._t_report >= _REPORT_INTERVAL_S:
            self._report()
        self._begin_step()

    @contextlib.contextmanager
    def no_sync(self):
        """Backward passes inside sum their gradients into the buffer and
        send nothing until the step's last backward or step() (gradient
        accumulation; see the module comment)."""
        if self._no_sync:
            raise RuntimeError("psclient: ps.no_sync() is already active")
        self._no_sync = True
        try:
            yield
        finally:
            self._no_sync = False

    def timed(self, iterable):
        """Yields from `iterable`, counting the wait in the data time."""
        it = iter(iterable)
        while True:
            t0 = time.monotonic()
            try:
                item = next(it)
            except StopIteration:
                return
            self._step_data_s += time.monotonic() - t0
            yield item

    # -- status -----------------------------------------------------------

    def _raise_if_aborted(self):
        reason = self._w.aborted
        if reason:
            raise psclient.JobAborted("job %s: %s" % (self.job_id, reason),
                                      "ABORTED")

    def _raise_if_ended(self):
        """After a failed exchange: JobAborted if the job itself ended (the
        shards dropped it), before the heartbeat says so."""
        self._raise_if_aborted()
        try:
            status = self._client.status(self.job_id)
        except psclient.Error:
            return
        if status["state"] in ("CANCELLED", "FAILED"):
            raise psclient.JobAborted(
                "job %s %s: %s" % (self.job_id, status["state"],
                                   status["reason"]), "ABORTED")

    def _report(self, finished=False, **extra):
        now = time.monotonic()
        elapsed = now - self._t_start
        steps = self.step_count - self._w.start_step
        rate = (steps * self._batch_size * self.world_size / elapsed
                if elapsed > 0 else 0.0)
        fields = dict(self._last)
        fields.update(extra)
        self._t_report = now
        if self._job_succeeded:
            return
        try:
            self._w.report(step=self.step_count, samples_per_s=rate,
                           data_s=self._data_s, compute_s=self._compute_s,
                           comm_s=self._comm_s, finished=finished, **fields)
        except psclient.JobAborted:
            # The job ended while this rank reported (its other ranks all
            # finished, or were lost under SHRINK): its reports no longer
            # count.
            try:
                succeeded = (self._client.status(self.job_id)["state"] ==
                             "SUCCEEDED")
            except psclient.Error:
                succeeded = False
            if not succeeded:
                raise
            self._job_succeeded = True

    @property
    def leads(self) -> bool:
        """Whether this worker leads the job now (rank 0, or the lowest rank
        left after SHRINK lost rank 0): its reports are the job's progress,
        so it is the one to evaluate and report test_accuracy."""
        return self._w.leads

    def report(self, **fields):
        """Sends progress now: test_accuracy, train_accuracy, loss, epoch,
        total_steps (psctl status shows them)."""
        self._last.update({k: float(v) if k not in ("epoch", "total_steps")
                           else int(v) for k, v in fields.items()})
        self._report()

    def finish(self):
        """Reports this worker done (the job succeeds once every rank is) and
        leaves the job. The model keeps the last parameters (copied out of
        the client's buffer)."""
        if self._finished:
            return
        self._finished = True
        try:
            self._report(finished=True)
        finally:
            self.close()

    def close(self):
        for h in self._hooks:
            h.remove()
        self._hooks = []
        for _, p in self._params:
            p.data = p.data.clone()  # off the client's (or device) buffer
        if self._cuda is not None:
            self._cuda.close()
            self._cuda = None
        self._w.close()

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.finish()
        else:
            try:
                self._w.report(step=self.step_count, error="%s: %s" % (
                    exc_type.__name__, exc))
            except psclient.Error:
                pass
            self.close()
        return False


def join(model, job, optimizer, workers=None, mode="bsp", staleness=0,
         batch_size=1, seed=0, init=None, cluster=None, coordinator=None,
         timeout_s=600.0, fusion_bytes=_DEFAULT_FUSION_BYTES,
         step_deadline_ms=0, on_worker_failure="", checkpoint_every_steps=0,
         warm_start=None, **connect_kwargs):
    """Joins `model` to the job named `job` (creating it if it is new).

    workers: the job's number of workers (world size), default
    $PSCLIENT_WORKERS (set by `python3 -m psclient.run`) or 1; join()
    returns once all of them joined, or raises psclient.Timeout after
    timeout_s.
    optimizer: the shards' optimizer, an OptimizerSpec as a dict
    ({"kind": "ADAM", "learning_rate": 1e-3}) or text.
    mode: "bsp", "asp" or "ssp" (with staleness). batch_size: samples per
    worker per step (for samples/s). init: InitSpec text by parameter name,
    over the defaults (see the module comment). cluster / coordinator: the
    cluster file or the coordinator's address; default $PSCLIENT_CLUSTER or
    $PSCLIENT_COORDINATOR (set by `python3 -m psclient.run`).
    checkpoint_every_steps: the shards checkpoint the job every N steps
    (0 = never; needs PsdConfig.checkpoint_dir), which `psctl export
    --from-checkpoint` reads once the shards are gone. warm_start: the
    initial parameters from {"from_file": "model.npz"} (psctl export or
    psclient.export; a path the shards can read) or {"from_job": NAME} (a
    SUCCEEDED job), instead of the initializers (JobSpec.init). Other keyword
    arguments (tls_ca, tls_cert, tls_key, token) go to psclient.connect.
    """
    if cluster is None and coordinator is None:
        cluster = os.environ.get("PSCLIENT_CLUSTER")
        coordinator = os.environ.get("PSCLIENT_COORDINATOR")
        if not cluster and not coordinator:
            raise ValueError(
                "cluster: pass cluster= or coordinator=, or run the script "
                "with `python3 -m psclient.run --cluster=FILE`")
    if workers is None:
        workers = int(os.environ.get("PSCLIENT_WORKERS", "1"))
    spec = job_spec(model, job, workers, optimizer, mode=mode,
                    staleness=staleness, batch_size=batch_size, seed=seed,
                    init=init, step_deadline_ms=step_deadline_ms,
                    on_worker_failure=on_worker_failure,
                    checkpoint_every_steps=checkpoint_every_steps,
                    warm_start=warm_start)
    client = psclient.connect(cluster=cluster, coordinator=coordinator,
                              timeout_s=min(timeout_s, _CONNECT_TIMEOUT_S),
                              **connect_kwargs)
    job_id, _ = client.submit(spec, join_existing=True)
    worker = client.join(job_id, name=os.environ.get("PSCLIENT_WORKER_NAME"),
                         timeout_s=timeout_s)
    try:
        return Worker(model, client, worker, batch_size, fusion_bytes)
    except BaseException:
        worker.close()
        raise
