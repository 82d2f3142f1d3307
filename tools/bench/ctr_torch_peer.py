#!/usr/bin/python3
"""PyTorch reference for the CTR workload (issue 15): the same model, data and
optimizers as the parameter-server CTR job, in plain PyTorch 1.13.

  # one process, pinned to core 0, one thread:
  /usr/bin/python3 tools/bench/ctr_torch_peer.py --train train.bin --test test.bin \
      --procs 1 --batch 1024 --epochs 1 --out single.json
  # DistributedDataParallel over gloo, 2 processes on cores 0 and 1:
  /usr/bin/python3 tools/bench/ctr_torch_peer.py --train train.bin --test test.bin \
      --procs 2 --batch 512 --epochs 1 --out ddp.json
  # one process per host (the network lab, tools/lab/ctr_lab.py), rank 1 of 2:
  GLOO_SOCKET_IFNAME=eth0 /usr/bin/python3 tools/bench/ctr_torch_peer.py \
      --train train.bin --test test.bin --batch 512 --world 2 --rank 1 \
      --master 10.77.0.1:29700

Data: the tools/datagen/ctr_datagen layout (little-endian records of 264 bytes:
float32 label, float32 dense[13], uint64 ids[26]; global id = (field << 40)
| value, value 2^32 = missing) plus the sidecar <file>.json whose
"cardinalities" size the tables (without a sidecar, the largest value seen
in train and test + 1). Files are memory-mapped; every batch is a slice of
consecutive records (no full copy); each epoch visits the batches in a fresh
seeded order, the same on every rank, and rank r of W takes the batches at
positions r, r + W, ... of it (the remainder dropped).

Model (the C++ side implements the same): ONE shared embedding table,
nn.EmbeddingBag(sum(card[f] + 1), dim, mode='sum', sparse=True), field f's
value v at row base[f] + v with base[f] = sum_{g<f}(card[g] + 1) and the
missing value at row base[f] + card[f]; each (example, field) is a bag of one
id, so the 26 vectors are concatenated, not summed. [26 x dim embeddings,
13 dense] -> Linear/ReLU per --hidden -> 1 logit -> BCEWithLogits (mean
over the batch; under DDP gradients are averaged, so it is the mean over the
global batch). Embeddings: Adagrad (sparse updates); MLP: Adagrad or Adam
(--mlp-opt). Init: embeddings N(0, s^2) or uniform(-s, s) (--emb-init,
--emb-init-scale); Linear weights Glorot-uniform, biases zero; all seeded.

DDP: DistributedDataParallel all-reduces the sparse embedding gradient
itself (gloo's sparse all-reduce: an all-gather of indices and values),
checked to work on torch 1.13 + gloo; the JSON says so in "grad_exchange".

Timing (rank 0): a step is slicing the batch, forward, backward and the
optimizer steps. samples_per_s = global batch x steps / time in those steps,
leaving out the first --warmup-steps and every evaluation (steady_s); the
process CPU time of those steps is steady_cpu_s: well below steady_s, on a
single process, means other load took the core. time_to_auc_s is
wall time from the first step to the end of the first evaluation whose AUC
reaches --target-auc (evaluations included). Evaluation runs every
--eval-every steps (0: only at the end of each epoch) on the whole test set,
on rank 0 only; AUC is exact (ties averaged). Each process is pinned to its
own core (--cores) and runs one intra-op, one inter-op and one OpenBLAS
thread, as in tools/bench/torch_peer.py.
"""

import argparse
import ctypes
import datetime
import json
import os
import socket
import sys
import time
from typing import Dict, List, Optional, Sequence, Tuple

try:
    import numpy as np
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    import torch.nn as nn
except ImportError as e:  # one line instead of a traceback
    sys.exit(f"ctr_torch_peer: this python cannot import {e.name} (install it "
             "with tools/setup.sh --torch)")

NUM_DENSE = 13
NUM_FIELDS = 26
VALUE_BITS = 40
VALUE_MASK = (1 << VALUE_BITS) - 1
MISSING_VALUE = 1 << 32
RECORD_DTYPE = np.dtype([("label", "<f4"), ("dense", "<f4", (NUM_DENSE,)),
                         ("ids", "<u8", (NUM_FIELDS,))])
SCAN_CHUNK = 65536  # records per validation chunk (bounds memory)
EVAL_BATCH = 16384  # records per evaluation forward pass
GRAD_EXCHANGE = ("DistributedDataParallel built-in sparse all-reduce "
                 "(gloo: all-gather of indices and values) for the "
                 "embedding; bucketed dense all-reduce for the MLP")


class DataError(ValueError):
    """A data file or its sidecar is malformed; the message names it."""


# ---------------------------------------------------------------- data ----

def open_records(path: str) -> np.ndarray:
    """Memory-maps a record file read-only; raises DataError if malformed."""
    try:
        size = os.path.getsize(path)
    except OSError as e:
        raise DataError(f"{path}: cannot open: {e.strerror}") from e
    if size == 0 or size % RECORD_DTYPE.itemsize:
        raise DataError(f"{path}: size {size} is not a positive multiple of "
                        f"the {RECORD_DTYPE.itemsize}-byte record")
    return np.memmap(path, dtype=RECORD_DTYPE, mode="r")


def read_sidecar(path: str) -> Optional[Dict]:
    """The <path>.json sidecar, or None if there is none."""
    side = path + ".json"
    if not os.path.exists(side):
        return None
    try:
        with open(side) as f:
            meta = json.load(f)
    except (OSError, ValueError) as e:
        raise DataError(f"{side}: unreadable: {e}") from e
    cards = meta.get("cardinalities") if isinstance(meta, dict) else None
    if (not isinstance(cards, list) or len(cards) != NUM_FIELDS or
            not all(isinstance(c, int) and 0 < c < MISSING_VALUE
                    for c in cards)):
        raise DataError(f"{side}: 'cardinalities' must be {NUM_FIELDS} "
                        f"integers in [1, 2^32)")
    return meta


def scan_records(recs: np.ndarray, path: str) -> np.ndarray:
    """Checks every record; returns the largest non-missing value per field
    (-1 where a field is always missing). Raises DataError naming the record
    and the field."""
    top = np.full(NUM_FIELDS, -1, np.int64)
    fields = np.arange(NUM_FIELDS, dtype=np.uint64)
    for lo in range(0, len(recs), SCAN_CHUNK):
        chunk = recs[lo:lo + SCAN_CHUNK]
        bad = np.flatnonzero((chunk["label"] != 0) & (chunk["label"] != 1))
        if bad.size:
            raise DataError(f"{path}: record {lo + bad[0]}: label "
                            f"{chunk['label'][bad[0]]} is not 0 or 1")
        bad = np.flatnonzero(~np.isfinite(chunk["dense"]).all(axis=1))
        if bad.size:
            raise DataError(f"{path}: record {lo + bad[0]}: dense feature "
                            f"not finite")
        ids = chunk["ids"]
        wrong = (ids >> np.uint64(VALUE_BITS)) != fields
        if wrong.any():
            r, f = np.argwhere(wrong)[0]
            raise DataError(f"{path}: record {lo + r}: ids[{f}] has field "
                            f"{int(ids[r, f]) >> VALUE_BITS}, want {f}")
        values = (ids & np.uint64(VALUE_MASK)).astype(np.int64)
        values[values == MISSING_VALUE] = -1
        top = np.maximum(top, values.max(axis=0))
    return top


def resolve_cardinalities(train: str, test: str, train_top: np.ndarray,
                          test_top: np.ndarray) -> Tuple[List[int], str]:
    """Cardinalities from the train sidecar (checked against both files), or
    the largest value seen + 1. Returns (cards, where they came from)."""
    meta = read_sidecar(train)
    seen = np.maximum(train_top, test_top)
    if meta is None:
        return [int(max(v + 1, 1)) for v in seen], "scan"
    cards = meta["cardinalities"]
    for f in range(NUM_FIELDS):
        if seen[f] >= cards[f]:
            where = train if train_top[f] >= cards[f] else test
            raise DataError(f"{where}: field {f}: value {seen[f]} >= "
                            f"cardinality {cards[f]} from {train}.json")
    return list(cards), train + ".json"


class Batcher:
    """Turns a slice of records into tensors: rows into the shared table."""

    def __init__(self, cards: Sequence[int]):
        card = np.asarray(cards, np.int64)
        self.base = np.concatenate([[0], np.cumsum(card + 1)[:-1]])
        self.missing_row = self.base + card
        self.rows = int((card + 1).sum())

    def __call__(self, recs: np.ndarray):
        values = (recs["ids"] & np.uint64(VALUE_MASK)).astype(np.int64)
        rows = np.where(values == MISSING_VALUE, self.missing_row,
                        values + self.base)
        return (torch.from_numpy(rows),
                torch.from_numpy(np.ascontiguousarray(recs["dense"])),
                torch.from_numpy(np.ascontiguousarray(recs["label"])))


# --------------------------------------------------------------- model ----

class CtrModel(nn.Module):
    """Shared table + MLP: forward(rows[B, 26], dense[B, 13]) -> logits[B]."""

    def __init__(self, table_rows: int, dim: int, hidden: Sequence[int],
                 emb_init: str, emb_scale: float, seed: int):
        super().__init__()
        torch.manual_seed(seed)
        self.emb = nn.EmbeddingBag(table_rows, dim, mode="sum", sparse=True)
        with torch.no_grad():
            if emb_init == "normal":
                self.emb.weight.normal_(0.0, emb_scale)
            else:
                self.emb.weight.uniform_(-emb_scale, emb_scale)
        layers: List[nn.Module] = []
        width = NUM_FIELDS * dim + NUM_DENSE
        for h in hidden:
            layers += [nn.Linear(width, h), nn.ReLU()]
            width = h
        layers.append(nn.Linear(width, 1))
        self.mlp = nn.Sequential(*layers)
        for m in self.mlp:
            if isinstance(m, nn.Linear):
                nn.init.xavier_uniform_(m.weight)
                nn.init.zeros_(m.bias)

    def forward(self, rows: torch.Tensor,
                dense: torch.Tensor) -> torch.Tensor:
        b = rows.shape[0]
        flat = rows.reshape(-1)
        bags = torch.arange(flat.numel(), dtype=torch.int64)  # one id a bag
        e = self.emb(flat, bags).reshape(b, -1)
        return self.mlp(torch.cat([e, dense], dim=1)).squeeze(1)


def make_optimizers(model: CtrModel, args) -> list:
    emb = torch.optim.Adagrad([model.emb.weight], lr=args.emb_lr,
                              initial_accumulator_value=args.adagrad_init)
    if args.mlp_opt == "adam":
        mlp = torch.optim.Adam(model.mlp.parameters(), lr=args.mlp_lr)
    else:
        mlp = torch.optim.Adagrad(model.mlp.parameters(), lr=args.mlp_lr,
                                  initial_accumulator_value=args.adagrad_init)
    return [emb, mlp]


# ------------------------------------------------------------- metrics ----

def exact_auc(labels: np.ndarray, scores: np.ndarray) -> float:
    """Mann-Whitney AUC with tied scores given the average rank."""
    labels = np.asarray(labels) > 0.5
    scores = np.asarray(scores, np.float64)
    pos = int(labels.sum())
    neg = labels.size - pos
    if pos == 0 or neg == 0:
        return float("nan")
    order = np.argsort(scores, kind="mergesort")
    s = scores[order]
    starts = np.flatnonzero(np.r_[True, s[1:] != s[:-1]])
    ends = np.r_[starts[1:], s.size]
    ranks = np.empty(s.size, np.float64)
    ranks[order] = np.repeat((starts + ends + 1) / 2.0, ends - starts)
    return float((ranks[labels].sum() - pos * (pos + 1) / 2.0) / (pos * neg))


def auc_score(labels: np.ndarray, scores: np.ndarray) -> Tuple[float, str]:
    """(AUC, implementation): sklearn's if installed, else exact_auc."""
    try:
        from sklearn.metrics import roc_auc_score
    except ImportError:
        return exact_auc(labels, scores), "numpy-mann-whitney"
    return float(roc_auc_score(labels, scores)), "sklearn"


def evaluate(model: CtrModel, recs: np.ndarray, batcher: Batcher) -> Dict:
    """Test AUC and mean logloss over every record of recs."""
    logits = np.empty(len(recs), np.float64)
    labels = np.empty(len(recs), np.float32)
    with torch.no_grad():
        for lo in range(0, len(recs), EVAL_BATCH):
            rows, dense, y = batcher(recs[lo:lo + EVAL_BATCH])
            logits[lo:lo + len(y)] = model(rows, dense).double().numpy()
            labels[lo:lo + len(y)] = y.numpy()
    # logloss = softplus(z) - y z, computed stably.
    loss = np.logaddexp(0.0, logits) - labels * logits
    auc, impl = auc_score(labels, logits)
    return {"auc": auc, "logloss": float(loss.mean()), "auc_impl": impl}


# ------------------------------------------------------------ training ----

def set_blas_threads(n: int) -> Optional[int]:
    """OpenBLAS threads (Debian's torch runs Linear on OpenBLAS, which
    torch.set_num_threads leaves alone; see tools/bench/torch_peer.py). Returns the
    count in effect, or None when no OpenBLAS is loaded."""
    try:
        lib = ctypes.CDLL("libopenblas.so.0")
    except OSError:
        return None
    lib.openblas_set_num_threads(n)
    return lib.openblas_get_num_threads()


def free_port() -> int:
    """A free TCP port on 127.0.0.1 (gloo's init cannot take port 0)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pin(core: int, threads: int) -> Optional[int]:
    os.sched_setaffinity(0, {core})
    torch.set_num_threads(threads)
    torch.set_num_interop_threads(1)
    return set_blas_threads(threads)


def train(local: int, args, port: int) -> None:
    """One process: rank 0 of 1 (single), rank `local` of args.procs (DDP on
    this machine), or, with --world, rank args.rank of args.world with one
    process per host (DDP over the network, rendezvous at --master)."""
    blas = pin(args.cores[local], args.threads)
    world = args.world or args.procs
    rank = args.rank if args.world else local
    if world > 1:
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
        master = args.master or f"127.0.0.1:{port}"
        dist.init_process_group("gloo", init_method=f"tcp://{master}",
                                rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=300))
    train_recs = open_records(args.train)
    test_recs = open_records(args.test)
    batcher = Batcher(args.cards)
    model = CtrModel(batcher.rows, args.dim, args.hidden, args.emb_init,
                     args.emb_init_scale, args.seed)
    net = nn.parallel.DistributedDataParallel(model) if world > 1 else model
    opts = make_optimizers(model, args)
    loss_fn = nn.BCEWithLogitsLoss()
    n_batches = len(train_recs) // args.batch
    steps_per_epoch = n_batches // world
    if steps_per_epoch == 0:
        raise DataError(f"{args.train}: {len(train_recs)} records give no "
                        f"step at batch {args.batch} x {world} processes")
    global_batch = args.batch * world
    evaluates = rank == 0
    evals: List[Dict] = []
    time_to_auc = None
    step_s = 0.0
    warm_s = 0.0
    cpu_s = 0.0  # process CPU time in the steady steps (all its threads)
    step = 0
    start = time.perf_counter()

    def run_eval(epoch: int) -> None:
        nonlocal time_to_auc
        r = evaluate(model, test_recs, batcher)
        elapsed = time.perf_counter() - start
        r.update(step=step, epoch=epoch, samples=step * global_batch,
                 elapsed_s=elapsed)
        evals.append(r)
        print(f"eval step={step} epoch={epoch} auc={r['auc']:.5f} "
              f"logloss={r['logloss']:.5f} elapsed_s={elapsed:.2f}",
              flush=True)
        if time_to_auc is None and r["auc"] >= args.target_auc:
            time_to_auc = elapsed

    gen = np.random.default_rng(args.seed)
    for epoch in range(args.epochs):
        order = gen.permutation(n_batches)  # same on every rank
        for s in range(steps_per_epoch):
            t0 = time.perf_counter()
            c0 = time.process_time()
            lo = int(order[s * world + rank]) * args.batch
            rows, dense, y = batcher(train_recs[lo:lo + args.batch])
            for o in opts:
                o.zero_grad(set_to_none=True)
            loss_fn(net(rows, dense), y).backward()
            for o in opts:
                o.step()
            dt = time.perf_counter() - t0
            step += 1
            step_s += dt
            if step <= args.warmup_steps:
                warm_s += dt
            else:
                cpu_s += time.process_time() - c0
            if (evaluates and args.eval_every > 0 and
                    step % args.eval_every == 0):
                run_eval(epoch)
        if evaluates and (args.eval_every == 0 or step % args.eval_every):
            run_eval(epoch)
    wall = time.perf_counter() - start
    if world > 1:
        dist.barrier()
        dist.destroy_process_group()
    if not evaluates:
        return
    steady = step - min(step, args.warmup_steps)
    last = evals[-1]
    result = {
        "tool": "tools/bench/ctr_torch_peer.py", "torch": torch.__version__,
        "mode": "ddp" if world > 1 else "single", "procs": world,
        "grad_exchange": GRAD_EXCHANGE if world > 1 else "none",
        "cores": args.cores, "threads": args.threads, "blas_threads": blas,
        "train": args.train, "test": args.test,
        "train_examples": len(train_recs), "test_examples": len(test_recs),
        "cardinalities": args.cards, "cardinalities_from": args.cards_from,
        "table": "one shared EmbeddingBag, row = base[field] + value, "
                 "missing = base[field] + card[field]",
        "table_rows": batcher.rows, "dim": args.dim, "hidden": args.hidden,
        "emb_init": args.emb_init, "emb_init_scale": args.emb_init_scale,
        "emb_opt": "adagrad", "emb_lr": args.emb_lr, "mlp_opt": args.mlp_opt,
        "mlp_lr": args.mlp_lr, "adagrad_init": args.adagrad_init,
        "seed": args.seed, "batch_per_proc": args.batch,
        "global_batch": global_batch, "epochs": args.epochs,
        "steps_per_epoch": steps_per_epoch, "steps": step,
        "warmup_steps": args.warmup_steps,
        "samples_per_s": (steady * global_batch / (step_s - warm_s)
                          if steady else None),
        "samples_per_s_incl_warmup": step * global_batch / step_s,
        "train_s": step_s, "steady_s": step_s - warm_s,
        "steady_cpu_s": cpu_s, "wall_s": wall,
        "test_auc": last["auc"], "test_logloss": last["logloss"],
        "auc_impl": last["auc_impl"], "target_auc": args.target_auc,
        "time_to_auc_s": time_to_auc, "eval_every": args.eval_every,
        "evals": evals, "teacher_auc": args.teacher_auc,
    }
    text = json.dumps(result, indent=1)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    print("RESULT " + json.dumps({k: result[k] for k in (
        "mode", "procs", "global_batch", "samples_per_s", "test_auc",
        "test_logloss", "time_to_auc_s", "wall_s")}), flush=True)


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="\n".join(__doc__.split("\n")[1:]))
    ap.add_argument("--train", required=True, help="training record file")
    ap.add_argument("--test", required=True, help="test record file")
    ap.add_argument("--procs", type=int, default=1,
                    help="1: single process; N > 1: DDP over gloo")
    ap.add_argument("--cores", default=None,
                    help="comma-separated core per rank (default 0..procs-1)")
    ap.add_argument("--threads", type=int, default=1,
                    help="intra-op and OpenBLAS threads per process")
    ap.add_argument("--batch", type=int, default=1024,
                    help="examples per step PER PROCESS (global = x procs)")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--dim", type=int, default=16, help="embedding dim")
    ap.add_argument("--hidden", default="256,128",
                    help="MLP hidden widths, comma-separated ('' = linear)")
    ap.add_argument("--emb-init", choices=["normal", "uniform"],
                    default="normal")
    ap.add_argument("--emb-init-scale", type=float, default=0.01,
                    help="normal: std; uniform: half-width")
    ap.add_argument("--emb-lr", type=float, default=0.05,
                    help="Adagrad learning rate of the embeddings")
    ap.add_argument("--mlp-opt", choices=["adagrad", "adam"],
                    default="adagrad")
    ap.add_argument("--mlp-lr", type=float, default=0.01)
    ap.add_argument("--adagrad-init", type=float, default=0.0,
                    help="Adagrad initial accumulator value")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--warmup-steps", type=int, default=20,
                    help="steps left out of samples_per_s")
    ap.add_argument("--eval-every", type=int, default=0,
                    help="evaluate every N steps (0: at each epoch's end)")
    ap.add_argument("--target-auc", type=float, default=0.75,
                    help="AUC for time_to_auc_s")
    ap.add_argument("--out", default=None, help="JSON result file")
    ap.add_argument("--world", type=int, default=0,
                    help="one process per host: the processes in all "
                    "(--procs 1 here; with --rank and --master)")
    ap.add_argument("--rank", type=int, default=0,
                    help="with --world: this process's rank")
    ap.add_argument("--master", default="",
                    help="with --world: HOST:PORT of rank 0's rendezvous")
    args = ap.parse_args(argv)
    try:
        args.hidden = [int(h) for h in args.hidden.split(",") if h.strip()]
        args.cores = (list(range(args.procs)) if args.cores is None else
                      [int(c) for c in args.cores.split(",")])
    except ValueError as e:
        ap.error(f"--hidden/--cores: {e}")
    for name in ("procs", "threads", "batch", "epochs", "dim"):
        if getattr(args, name) < 1:
            ap.error(f"--{name}: must be >= 1")
    if any(h < 1 for h in args.hidden):
        ap.error("--hidden: widths must be >= 1")
    if len(args.cores) != args.procs:
        ap.error(f"--cores: {len(args.cores)} cores for {args.procs} procs")
    allowed = os.sched_getaffinity(0)
    if any(c not in allowed for c in args.cores):
        ap.error(f"--cores: {args.cores} not within allowed {sorted(allowed)}")
    if args.warmup_steps < 0 or args.eval_every < 0:
        ap.error("--warmup-steps/--eval-every: must be >= 0")
    if args.world:
        if args.procs != 1:
            ap.error("--world: one process per host, so --procs 1")
        if not 0 <= args.rank < args.world:
            ap.error(f"--rank: {args.rank} is not in [0, {args.world})")
        if ":" not in args.master:
            ap.error("--master: HOST:PORT of rank 0 is needed with --world")
    return args


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    try:
        train_top = scan_records(open_records(args.train), args.train)
        test_top = scan_records(open_records(args.test), args.test)
        args.cards, args.cards_from = resolve_cardinalities(
            args.train, args.test, train_top, test_top)
        meta = read_sidecar(args.test) or read_sidecar(args.train) or {}
    except DataError as e:
        print(f"ctr_torch_peer: {e}", file=sys.stderr)
        return 1
    args.teacher_auc = meta.get("teacher_auc")
    if args.procs == 1:
        train(0, args, 0)
    else:
        mp.spawn(train, args=(args, free_port()), nprocs=args.procs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
