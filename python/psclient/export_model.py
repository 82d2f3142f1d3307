"""A job's model as a file PyTorch or ONNX reads: one command for every
format (docs/TUTORIAL.md).

    python3 -m psclient.export_model JOB -o model.onnx --cluster=FILE
    python3 -m psclient.export_model JOB -o model.ts --from-checkpoint=DIR
    python3 -m psclient.export_model --from-npz=model.npz -o model.pt

The output's extension picks the format:
  .npz   the parameters by tensor name (psctl export's file, any model)
  .pt    the state_dict of psclient.models' module (torch.save), built-in
         softmax / MLP / CNN only
  .ts    TorchScript of that module (torch.jit.load, no psclient needed)
  .onnx  ONNX by PyTorch's exporter (input "input", output "logits", the
         batch dimension dynamic), checked with onnx.checker
The parameters come from a running or SUCCEEDED job's shards (JOB with
--cluster or --coordinator), from stopped shards' checkpoints
(--from-checkpoint=DIR, as psctl export), or from an .npz psctl export
wrote (--from-npz). The file appears complete or not at all (written to a
temporary file beside it, then renamed). Exit 2 for bad input (naming the
job, file, field or tensor), 1 for other failures, as psctl.
"""

import argparse
import os
import sys
import tempfile
from typing import Callable, Optional

import numpy as np

FORMATS = (".npz", ".pt", ".ts", ".onnx")
ONNX_OPSET = 13
EXIT_BAD_INPUT = 2
EXIT_FAILED = 1


def _format(path: str) -> str:
    ext = os.path.splitext(path)[1]
    if ext not in FORMATS:
        raise ValueError(f"{path}: the extension picks the format, one of "
                         f"{', '.join(FORMATS)}")
    return ext


def _write_atomically(path: str, write: Callable[[str], None]) -> None:
    """write(tmp) then rename tmp to path; tmp is removed on failure."""
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".",
                               suffix=".tmp", dir=folder)
    os.close(fd)
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _check_writable(path: str) -> None:
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise ValueError(f"{path}: folder {folder} does not exist")
    if not os.access(folder, os.W_OK):
        raise ValueError(f"{path}: folder {folder} is not writable")


def convert(npz_path: str, out_path: str, source: str = "") -> str:
    """Writes the built-in model in `npz_path` (psctl export's file) to
    `out_path` (.pt, .ts or .onnx). Returns a summary line. ValueError
    naming the file, field or tensor for bad input."""
    ext = _format(out_path)
    if ext == ".npz":
        raise ValueError(f"{out_path}: already the input's format")
    _check_writable(out_path)
    import torch  # python3-torch: needed only for these formats
    from psclient import models
    try:
        z = np.load(npz_path, allow_pickle=False)
    except (OSError, ValueError) as e:
        raise ValueError(f"{npz_path}: cannot read as .npz: {e}")
    with z:
        try:
            module, state = models.from_npz(z)
        except ValueError as e:
            raise ValueError(f"{npz_path}: {e}")
    example = torch.zeros((1,) + tuple(models.input_shape(module)))
    if ext == ".pt":
        _write_atomically(out_path, lambda tmp: torch.save(state, tmp))
    elif ext == ".ts":
        with torch.no_grad():
            traced = torch.jit.trace(module, example)
        _write_atomically(out_path, lambda tmp: traced.save(tmp))
    else:
        _write_atomically(out_path, lambda tmp: _write_onnx(module, example,
                                                            tmp))
    kind = type(module).__name__
    return (f"wrote {kind} ({len(state)} tensors) from {source or npz_path} "
            f"to {out_path}")


def _write_onnx(module, example, path: str) -> None:
    import onnx
    import torch
    with torch.no_grad():
        torch.onnx.export(module, example, path, input_names=["input"],
                          output_names=["logits"], opset_version=ONNX_OPSET,
                          dynamic_axes={"input": {0: "batch"},
                                        "logits": {0: "batch"}})
    onnx.checker.check_model(onnx.load(path))


def export(path: str, job: Optional[str] = None, *,
           cluster: Optional[str] = None, coordinator: Optional[str] = None,
           from_checkpoint: Optional[str] = None,
           from_npz: Optional[str] = None,
           timeout_s: Optional[float] = None) -> str:
    """psclient.export for every format: the job's parameters (from its
    shards, its checkpoints, or an .npz) written to `path` in the format
    its extension names. Returns a summary line. Raises ValueError for a
    bad path or model, psclient.InvalidSpec / Error as psclient.export."""
    ext = _format(path)
    if from_npz is not None:
        if job is not None or from_checkpoint is not None:
            raise ValueError("from_npz: takes neither a job nor "
                             "from_checkpoint")
        return convert(from_npz, path)
    import psclient
    if ext == ".npz":
        return psclient.export(path, job, cluster=cluster,
                               coordinator=coordinator,
                               from_checkpoint=from_checkpoint,
                               timeout_s=timeout_s)
    _check_writable(path)
    with tempfile.TemporaryDirectory(prefix="psclient-export-") as tmp:
        npz = os.path.join(tmp, "model.npz")
        psclient.export(npz, job, cluster=cluster, coordinator=coordinator,
                        from_checkpoint=from_checkpoint, timeout_s=timeout_s)
        source = f"job {job}" if job else ""
        if from_checkpoint is not None:
            source += f" (the checkpoints in {from_checkpoint})"
        return convert(npz, path, source=source.strip())


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        prog="python3 -m psclient.export_model",
        description="A job's model as .npz, .pt (state_dict), .ts "
        "(TorchScript) or .onnx; see docs/TUTORIAL.md.")
    p.add_argument("job", nargs="?", help="the job's id (or, with "
                   "--from-checkpoint, optional when DIR holds one job)")
    p.add_argument("-o", "--out", required=True,
                   help="output file; its extension picks the format")
    p.add_argument("--cluster", help="the cluster file")
    p.add_argument("--coordinator", help="the coordinator's host:port")
    p.add_argument("--from-checkpoint", metavar="DIR",
                   help="read stopped shards' checkpoints in DIR")
    p.add_argument("--from-npz", metavar="FILE",
                   help="convert an .npz psctl export wrote")
    p.add_argument("--timeout", type=float, help="each pull's deadline, s")
    a = p.parse_args(argv)
    if a.job is None and a.from_checkpoint is None and a.from_npz is None:
        p.print_usage(sys.stderr)
        print("export_model: expected JOB, --from-checkpoint=DIR or "
              "--from-npz=FILE", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        print(export(a.out, a.job, cluster=a.cluster,
                     coordinator=a.coordinator,
                     from_checkpoint=a.from_checkpoint, from_npz=a.from_npz,
                     timeout_s=a.timeout))
    except ValueError as e:
        print(f"export_model: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except Exception as e:  # psclient.Error and its InvalidSpec
        import psclient
        if not isinstance(e, psclient.Error):
            raise
        print(f"export_model: {e}", file=sys.stderr)
        code = EXIT_BAD_INPUT if isinstance(e, psclient.InvalidSpec) else \
            EXIT_FAILED
        return code
    return 0


if __name__ == "__main__":
    sys.exit(main())
