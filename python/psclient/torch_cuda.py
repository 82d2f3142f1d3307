"""psclient.torch for a model on a CUDA device (used by psclient.torch.Worker).

The client's flat parameter and gradient buffers stay in host memory (the
network reads and writes them); the model lives on the GPU:

- Parameters: the model's parameters become views of one flat device
  buffer. The host buffers are page-locked in place (cudaHostRegister), so
  copies between them and the device are real DMA, asynchronous to the CPU.
- Gradients: as backward produces each parameter's gradient (its hook, on
  autograd's device thread) the gradient is copied device-to-host into the
  pinned gradient buffer on a side stream, which first waits for the compute
  stream (so the gradient is complete) and then runs beside the rest of
  backward. When a fused bucket of gradients is due, an event recorded on
  the side stream marks its copies; a sender thread waits for that event
  alone and then starts the bucket's push+pull, so the CPU never waits for
  the GPU to finish backward before the first bytes leave.
- Step: step() waits for each bucket's exchange and queues the bucket's
  new parameters host-to-device (non_blocking) on the compute stream, the
  one the next forward runs on: the GPU orders them before the forward's
  kernels, and the CPU returns without synchronizing the device, so the
  step waits only for the exchanges and the next forward only for its
  parameters' copies.
- Gradient accumulation (no_sync) sums on the device; only the step's
  last backward copies the sums to the host.

Every device call is torch's own (torch.cuda.Stream, Event, Tensor.copy_
with non_blocking); nothing here runs without CUDA, and psclient.torch
takes this path only for parameters on a CUDA device.
"""

import concurrent.futures

import torch


def cuda_device(params):
    """The CUDA device all of `params` live on, or None when they are all
    on the CPU. ValueError naming a parameter on another device, or when
    they are spread over several."""
    devices = {}
    for name, p in params:
        devices.setdefault(p.device, name)
    if len(devices) == 1 and next(iter(devices)).type == "cpu":
        return None
    for device, name in devices.items():
        if device.type not in ("cpu", "cuda"):
            raise ValueError(
                "parameter %r: on %s; psclient exchanges CPU and CUDA "
                "tensors" % (name, device))
    if len(devices) > 1:
        raise ValueError(
            "parameters on several devices (%s): move the model to one "
            "device (model.to(device))"
            % ", ".join("%r on %s" % (n, d) for d, n in devices.items()))
    return next(iter(devices))


class _Pinned:
    """Page-locks a host tensor's memory in place for its lifetime."""

    def __init__(self, tensor):
        self._ptr = tensor.data_ptr()
        self._tensor = tensor
        nbytes = tensor.numel() * tensor.element_size()
        err = torch.cuda.cudart().cudaHostRegister(self._ptr, nbytes, 0)
        if int(err) != 0:
            raise RuntimeError("psclient: cudaHostRegister of %d bytes "
                               "failed: error %d" % (nbytes, int(err)))

    def release(self):
        if self._ptr:
            torch.cuda.cudart().cudaHostUnregister(self._ptr)
            self._ptr = 0


class CudaExchange:
    """The device side of a psclient.torch.Worker (see the module comment).

    params: [(name, parameter)] in job order; host_params / host_grads: the
    client's flat float32 buffers as CPU tensors; spans: [(offset, size)] of
    each parameter in them. Thread-compatible, as the Worker.
    """

    def __init__(self, params, host_params, host_grads, spans, device):
        self.device = device
        self._host_params = host_params
        self._host_grads = host_grads
        self._spans = spans
        self._pins = [_Pinned(host_params), _Pinned(host_grads)]
        total = host_params.numel()
        with torch.cuda.device(device):
            self._dev_params = torch.empty(total, dtype=torch.float32,
                                           device=device)
            # Sums of the no_sync backwards (allocated on first use).
            self._dev_grads = None
            self._side = torch.cuda.Stream(device=device)
        for (_, p), (offset, size) in zip(params, spans):
            p.data = self._dev_params[offset:offset + size].view(p.shape)
        # One thread starts the exchanges, in the order they were queued.
        self._sender = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="psclient-cuda-send")

    def load_all(self):
        """All parameters host-to-device, waiting for the copy (join)."""
        self._dev_params.copy_(self._host_params, non_blocking=True)
        torch.cuda.current_stream(self.device).synchronize()

    def _dev_grad(self, index):
        if self._dev_grads is None:
            self._dev_grads = torch.zeros_like(self._dev_params)
        offset, size = self._spans[index]
        return self._dev_grads[offset:offset + size]

    def take(self, index, grad, accumulated, no_sync):
        """A parameter's gradient from backward: summed on the device inside
        no_sync, else (with any sum) copied to the host on the side stream."""
        flat = grad.reshape(-1)
        if no_sync:
            if accumulated:
                self._dev_grad(index).add_(flat)
            else:
                self._dev_grad(index).copy_(flat)
            return
        if accumulated:
            self._dev_grad(index).add_(flat)
            flat = self._dev_grad(index)
        self._to_host(index, flat)

    def take_accumulated(self, index):
        """step(): the no_sync sum of a parameter no later backward sent."""
        self._to_host(index, self._dev_grad(index))

    def _to_host(self, index, flat):
        offset, size = self._spans[index]
        compute = torch.cuda.current_stream(self.device)
        self._side.wait_stream(compute)  # the gradient is complete
        with torch.cuda.stream(self._side):
            self._host_grads[offset:offset + size].copy_(flat,
                                                         non_blocking=True)
        # Its memory must outlive the copy queued on another stream.
        flat.record_stream(self._side)

    def send(self, start):
        """A future of start()'s handle, called once the copies queued so
        far reached the host."""
        # Ordered after the compute stream too: a bucket whose gradients
        # were zeros on the host must still not pull over parameters whose
        # host-to-device copy (load) is queued there.
        self._side.wait_stream(torch.cuda.current_stream(self.device))
        done = torch.cuda.Event()
        done.record(self._side)

        def run():
            done.synchronize()
            return start()

        return self._sender.submit(run)

    def load(self, indices):
        """The new values of parameters `indices` host-to-device on the
        compute stream, without waiting (the next forward is queued after
        them)."""
        for i in indices:
            offset, size = self._spans[i]
            self._dev_params[offset:offset + size].copy_(
                self._host_params[offset:offset + size], non_blocking=True)

    def close(self):
        """Waits for queued copies; unpins the host buffers."""
        self._sender.shutdown(wait=True)
        torch.cuda.synchronize(self.device)
        for pin in self._pins:
            pin.release()
