#!/usr/bin/python3
"""Draws rows on the wire and AUC against max_row_staleness (docs/SPARSE.md).

  /usr/bin/python3 tools/plot/plot_row_cache.py sweep.txt -o docs/img/row_cache.png

The input is what `row_cache_job_test`'s sweep prints (docs/SPARSE.md
"Hot-row cache"): a header line, then one line per run,
"staleness auc samples_per_s rank0_pushed rank0_pulled rank0_hits
shards_pulled"; other lines (gtest's) are skipped. Left: rank 0's rows
pulled and pushed for training, as a share of staleness 0's pulls; right:
the test AUC. Needs python3-matplotlib (Debian); draws off screen (Agg).
"""

import argparse
import sys
from typing import List, Tuple

FIELDS = ("staleness", "auc", "samples_per_s", "rank0_pushed", "rank0_pulled",
          "rank0_hits", "shards_pulled")


class SweepError(Exception):
    """Input that is not the sweep's: names the file and line."""


def read_sweep(path: str) -> List[Tuple[float, ...]]:
    """The sweep's runs, each as FIELDS' numbers, in file order."""
    runs: List[Tuple[float, ...]] = []
    with open(path, encoding="utf-8") as f:
        for line_no, line in enumerate(f, start=1):
            parts = line.split()
            if len(parts) != len(FIELDS) or not parts[0].isdigit():
                continue
            try:
                runs.append(tuple(float(p) for p in parts))
            except ValueError as e:
                raise SweepError(f"{path}:{line_no}: {e}") from e
    if not runs or runs[0][0] != 0:
        raise SweepError(f"{path}: no run with staleness 0 first")
    return runs


def draw(runs: List[Tuple[float, ...]], out: str) -> None:
    import matplotlib  # pylint: disable=import-outside-toplevel
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel

    staleness = [r[0] for r in runs]
    base = runs[0][4]
    pulled = [r[4] / base for r in runs]
    pushed = [r[3] / base for r in runs]
    auc = [r[1] for r in runs]
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.6))
    left.plot(staleness, pulled, "o-", label="rows pulled")
    left.plot(staleness, pushed, "s--", label="rows pushed")
    left.set_xlabel("max_row_staleness (steps)")
    left.set_ylabel("rows / rows pulled at staleness 0")
    left.set_ylim(0, 1.1)
    left.set_xticks(staleness)
    left.grid(alpha=0.3)
    left.legend()
    right.plot(staleness, auc, "o-", color="tab:green")
    right.axhspan(auc[0] - 0.002, auc[0] + 0.002, color="tab:green",
                  alpha=0.12, label="staleness 0 +- 0.002")
    right.set_xlabel("max_row_staleness (steps)")
    right.set_ylabel("test AUC")
    right.set_xticks(staleness)
    right.grid(alpha=0.3)
    right.legend()
    fig.suptitle("Hot-row cache on ctr-synthetic (1M examples, 2 workers, BSP)")
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweep", help="the sweep's output (text)")
    parser.add_argument("-o", "--out", required=True, help="PNG to write")
    args = parser.parse_args()
    try:
        draw(read_sweep(args.sweep), args.out)
    except (OSError, SweepError) as e:
        print(f"plot_row_cache: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
