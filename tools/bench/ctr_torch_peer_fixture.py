#!/usr/bin/python3
"""A small numpy stand-in for tools/datagen/ctr_datagen: writes CTR record files in
the same binary layout, with a planted logistic teacher, for the tests and
benchmarks of tools/bench/ctr_torch_peer.py.

  /usr/bin/python3 tools/bench/ctr_torch_peer_fixture.py --out /tmp/ctr/train.bin \
      --examples 200000 --seed 1 --max-cardinality 1000000
  /usr/bin/python3 tools/bench/ctr_torch_peer_fixture.py --out /tmp/ctr/test.bin \
      --examples 50000 --seed 2 --teacher-seed 1 --max-cardinality 1000000

Layout (the ctr_datagen contract): little-endian records of 264 bytes,
float32 label, float32 dense[13], uint64 ids[26]; global id = (field << 40)
| value with value < 2^40, and value 2^32 meaning "missing". A sidecar
<file>.json holds {"examples", "seed", "cardinalities", "teacher_auc",
"teacher_logloss", "positive_rate", "generator", ...}.

The data: field f has cardinality card[f] (geometric from --max-cardinality
down to --min-cardinality over the 26 fields); values are drawn from a
power law P(v) ~ (v + 1)^-alpha on [0, card[f]) so the head repeats and the
tail is rare; a value is missing with probability --missing. The teacher:
logit = bias + sum_f w_f(value) + dense . u, where w_f(value) is a hash of
(teacher seed, field, value) mapped to uniform(-s, s), so the teacher needs
no table and train and test files share it when --teacher-seed matches.
This is NOT ctr_datagen's distribution; it only shares the file layout.
"""

import argparse
import json
import os
import sys
from typing import Dict, List, Sequence

import numpy as np

from ctr_torch_peer import (MISSING_VALUE, NUM_DENSE, NUM_FIELDS, RECORD_DTYPE,
                            VALUE_BITS, exact_auc)

CHUNK = 65536  # examples generated per chunk (bounds peak memory)


def cardinalities(max_card: int, min_card: int) -> List[int]:
    """Geometric cardinalities from max_card (field 0) to min_card (last)."""
    if not 1 <= min_card <= max_card < MISSING_VALUE:
        raise ValueError(f"cardinalities: need 1 <= min ({min_card}) <= max "
                         f"({max_card}) < 2^32")
    ratio = (min_card / max_card) ** (1.0 / (NUM_FIELDS - 1))
    return [max(1, int(round(max_card * ratio ** f)))
            for f in range(NUM_FIELDS)]


def _mix64(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser on uint64 (wrapping arithmetic)."""
    x = x.astype(np.uint64, copy=True)
    with np.errstate(over="ignore"):
        x ^= x >> np.uint64(30)
        x *= np.uint64(0xBF58476D1CE4E5B9)
        x ^= x >> np.uint64(27)
        x *= np.uint64(0x94D049BB133111EB)
        x ^= x >> np.uint64(31)
    return x


def teacher_weights(teacher_seed: int, ids: np.ndarray,
                    scale: float) -> np.ndarray:
    """w(id) in [-scale, scale): a hash of (teacher_seed, global id)."""
    with np.errstate(over="ignore"):
        h = _mix64(ids ^ _mix64(np.array([teacher_seed + 1], np.uint64)))
    u = (h >> np.uint64(11)).astype(np.float64) / float(1 << 53)
    return (2.0 * u - 1.0) * scale


def generate(path: str, examples: int, seed: int, teacher_seed: int,
             cards: Sequence[int], alpha: float = 1.1, missing: float = 0.02,
             weight_scale: float = 1.0, bias: float = -1.0) -> Dict:
    """Writes `examples` records to path and the sidecar path + '.json'.

    Returns the sidecar dict. Deterministic in (seed, teacher_seed, cards,
    alpha, missing, weight_scale, bias).
    """
    if examples <= 0:
        raise ValueError(f"examples: must be > 0, got {examples}")
    if len(cards) != NUM_FIELDS:
        raise ValueError(f"cardinalities: need {NUM_FIELDS}, got {len(cards)}")
    if alpha == 1.0:
        raise ValueError("alpha: must not be 1 (the inverse CDF divides by "
                         "1 - alpha)")
    if not 0.0 <= missing <= 1.0:
        raise ValueError(f"missing: must be in [0, 1], got {missing}")
    rng = np.random.default_rng(seed)
    dense_w = np.random.default_rng(teacher_seed).normal(0.0, 0.3, NUM_DENSE)
    card = np.asarray(cards, np.float64)
    field_bits = np.arange(NUM_FIELDS, dtype=np.uint64) << np.uint64(
        VALUE_BITS)
    all_p = np.empty(examples, np.float64)
    all_y = np.empty(examples, np.float32)
    with open(path, "wb") as f:
        for lo in range(0, examples, CHUNK):
            n = min(CHUNK, examples - lo)
            rec = np.zeros(n, RECORD_DTYPE)
            u = rng.random((n, NUM_FIELDS))
            # Inverse CDF of the continuous power law on [1, card + 1).
            top = (card + 1.0) ** (1.0 - alpha)
            x = ((top - 1.0) * u + 1.0) ** (1.0 / (1.0 - alpha))
            values = np.minimum(np.floor(x) - 1.0, card - 1.0).astype(
                np.uint64)
            values[rng.random((n, NUM_FIELDS)) < missing] = MISSING_VALUE
            ids = field_bits | values
            dense = rng.normal(0.0, 1.0, (n, NUM_DENSE)).astype(np.float32)
            logit = (bias + teacher_weights(teacher_seed, ids, weight_scale)
                     .sum(axis=1) + dense.astype(np.float64) @ dense_w)
            p = 1.0 / (1.0 + np.exp(-logit))
            y = (rng.random(n) < p).astype(np.float32)
            rec["label"], rec["dense"], rec["ids"] = y, dense, ids
            f.write(rec.tobytes())
            all_p[lo:lo + n], all_y[lo:lo + n] = p, y
    eps = 1e-12
    logloss = -np.mean(all_y * np.log(all_p + eps) +
                       (1 - all_y) * np.log(1 - all_p + eps))
    meta = {
        "examples": examples, "seed": seed, "teacher_seed": teacher_seed,
        "cardinalities": [int(c) for c in cards],
        "teacher_auc": exact_auc(all_y, all_p),
        "teacher_logloss": float(logloss),
        "positive_rate": float(all_y.mean()),
        "generator": "tools/bench/ctr_torch_peer_fixture.py",
        "alpha": alpha, "missing": missing, "weight_scale": weight_scale,
        "bias": bias,
    }
    with open(path + ".json", "w") as f:
        json.dump(meta, f, indent=1)
    return meta


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="record file to write")
    ap.add_argument("--examples", type=int, required=True)
    ap.add_argument("--seed", type=int, default=1, help="sampling seed")
    ap.add_argument("--teacher-seed", type=int, default=None,
                    help="teacher seed (default: --seed); give train and "
                    "test files the same one")
    ap.add_argument("--max-cardinality", type=int, default=100000)
    ap.add_argument("--min-cardinality", type=int, default=10)
    ap.add_argument("--alpha", type=float, default=1.1,
                    help="power-law exponent of the id distribution")
    ap.add_argument("--missing", type=float, default=0.02,
                    help="probability that a field's value is missing")
    ap.add_argument("--weight-scale", type=float, default=1.0,
                    help="teacher weights are uniform(-s, s) per id")
    args = ap.parse_args()
    teacher = args.seed if args.teacher_seed is None else args.teacher_seed
    try:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        meta = generate(args.out, args.examples, args.seed, teacher,
                        cardinalities(args.max_cardinality,
                                      args.min_cardinality),
                        alpha=args.alpha, missing=args.missing,
                        weight_scale=args.weight_scale)
    except (OSError, ValueError) as e:
        sys.exit(f"ctr_torch_peer_fixture: {e}")
    print(json.dumps(meta))


if __name__ == "__main__":
    main()
