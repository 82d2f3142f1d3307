#!/usr/bin/python3
"""Draws training curves from the CSV that `psctl curves -o X.csv` writes.

  /usr/bin/python3 tools/plot/plot_curves.py curves.csv -o curves.png

`psctl curves JOB... -o X.png` runs this script itself (it is embedded in
psctl): one chart with three panels (loss, accuracy, samples/s) against the
step, one line per job, so several runs compare on one chart. Needs
python3-matplotlib (Debian); draws off screen (Agg).
"""

import argparse
import csv
import sys
from typing import Dict, List, Tuple

# The CSV's columns, in order (tools/psctl/psctl_curves.cc writes them).
COLUMNS = ("job", "name", "step", "epoch", "loss", "train_accuracy",
           "test_accuracy", "samples_per_s", "data_s", "compute_s", "comm_s",
           "elapsed_s")
NUMERIC = COLUMNS[2:]


class CurveError(Exception):
    """A CSV that is not psctl's: names the file, line and column."""


def read_curves(path: str) -> Dict[str, Dict[str, List[float]]]:
    """Reads the CSV into {"JOB (NAME)": {column: values}}, in file order."""
    curves: Dict[str, Dict[str, List[float]]] = {}
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.reader(f)
        header = next(reader, None)
        if header is None or tuple(header) != COLUMNS:
            raise CurveError(f"{path}:1: header is not {','.join(COLUMNS)}")
        for line, row in enumerate(reader, start=2):
            if len(row) != len(COLUMNS):
                raise CurveError(
                    f"{path}:{line}: {len(row)} fields, want {len(COLUMNS)}")
            label = f"{row[0]} ({row[1]})" if row[1] else row[0]
            curve = curves.setdefault(label, {c: [] for c in NUMERIC})
            for column, text in zip(COLUMNS[2:], row[2:]):
                try:
                    curve[column].append(float(text))
                except ValueError:
                    raise CurveError(f"{path}:{line}: {column}: not a number: "
                                     f"{text!r}") from None
    if not curves:
        raise CurveError(f"{path}: no points (has any job reported progress?)")
    return curves


def measured(steps: List[float],
             values: List[float]) -> Tuple[List[float], List[float]]:
    """The points of an accuracy that was measured: not NaN (a Python
    worker reports no train accuracy) and not the -1 of a test accuracy
    before the first evaluation."""
    kept = [(s, v) for s, v in zip(steps, values) if v >= 0]  # NaN >= 0 is false
    return [s for s, _ in kept], [v for _, v in kept]


def plot(curves: Dict[str, Dict[str, List[float]]], out: str) -> None:
    """Writes the three-panel chart to `out` (PNG, SVG or PDF by suffix)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (loss_ax, acc_ax, rate_ax) = plt.subplots(
        3, 1, sharex=True, figsize=(8, 9), constrained_layout=True)
    for label, c in curves.items():
        line, = loss_ax.plot(c["step"], c["loss"], label=label)
        color = line.get_color()
        steps, train = measured(c["step"], c["train_accuracy"])
        if steps:
            acc_ax.plot(steps, train, color=color, label=f"{label} train")
        steps, test = measured(c["step"], c["test_accuracy"])
        if steps:
            acc_ax.plot(steps, test, color=color, linestyle="--", marker="o",
                        label=f"{label} test")
        rate_ax.plot(c["step"], c["samples_per_s"], color=color, label=label)
    loss_ax.set_ylabel("loss")
    acc_ax.set_ylabel("accuracy")
    rate_ax.set_ylabel("samples/s")
    rate_ax.set_xlabel("step")
    for ax in (loss_ax, acc_ax, rate_ax):
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize="small")
    fig.savefig(out, dpi=100)
    plt.close(fig)


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("csv", help="the CSV psctl curves -o X.csv wrote")
    parser.add_argument("-o", "--out", required=True,
                        help="the chart to write (.png, .svg, .pdf)")
    args = parser.parse_args(argv)
    try:
        curves = read_curves(args.csv)
    except (OSError, CurveError) as e:
        print(f"plot_curves: {e}", file=sys.stderr)
        return 1
    try:
        plot(curves, args.out)
    except ImportError:
        print("plot_curves: matplotlib is missing (apt install "
              "python3-matplotlib), or write CSV: -o curves.csv",
              file=sys.stderr)
        return 1
    except (OSError, ValueError) as e:
        print(f"plot_curves: {args.out}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
