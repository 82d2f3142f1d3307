#!/usr/bin/python3
"""Charts of a scaling sweep (tools/lab/scaling.py's results.json), as PNGs:

  samples_per_s.png   samples/s vs workers, one panel per model size: the
                      parameter server per shard count (BSP solid, ASP
                      dashed) and ring all-reduce
  of_bound.png        measured step time as a fraction of its bound
                      (bound / measured: 1.0 = at the bound)
  ps_vs_allreduce.png BSP step-time speedup over all-reduce at the same W
                      and model, per shard count

  /usr/bin/python3 tools/lab/plot_scaling.py results.json --out DIR
"""

import argparse
import json
import os
from collections import defaultdict
from typing import Dict, List

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def series(rows: List[Dict], params: int):
    """(label, style) -> sorted [(workers, row)] for one model size."""
    out = defaultdict(list)
    for r in rows:
        if r["params"] != params:
            continue
        if r["system"] == "allreduce":
            key = ("ring all-reduce (gloo)", "k-o")
        else:
            dash = "-" if r["mode"] == "bsp" else "--"
            key = (f"PS {r['mode'].upper()} S={r['shards']}", dash + "s")
        out[key].append((r["workers"], r))
    return {k: sorted(v, key=lambda x: x[0]) for k, v in out.items()}


def panels(rows: List[Dict], metric, ylabel: str, path: str, title: str,
           ylim=None):
    sizes = sorted({r["params"] for r in rows})
    fig, axes = plt.subplots(1, len(sizes), figsize=(5 * len(sizes), 4),
                             squeeze=False)
    rate = rows[0]["rate"] if rows else ""
    for ax, p in zip(axes[0], sizes):
        for (label, style), pts in sorted(series(rows, p).items()):
            xs = [w for w, _ in pts]
            ys = [metric(r) for _, r in pts]
            if any(y is not None for y in ys):
                ax.plot(xs, ys, style, label=label)
        ax.set_title(f"{p / 1e6:g}M parameters, {rate} links")
        ax.set_xlabel("workers")
        ax.set_ylabel(ylabel)
        ax.set_xscale("log", base=2)
        ws = sorted({r["workers"] for r in rows})
        ax.set_xticks(ws)
        ax.set_xticklabels([str(w) for w in ws])
        ax.set_ylim(*(ylim or (0, None)))
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def speedup(rows: List[Dict], path: str):
    ring = {(r["params"], r["workers"]): r["step_s"]
            for r in rows if r["system"] == "allreduce"}
    sub = [dict(r, speedup=ring[(r["params"], r["workers"])] / r["step_s"])
           for r in rows if r["system"] == "ps" and r["mode"] == "bsp"
           and (r["params"], r["workers"]) in ring]
    if not sub:
        return False  # no BSP row has an all-reduce row at the same W
    panels(sub, lambda r: r["speedup"], "all-reduce step / PS step", path,
           "BSP parameter server vs ring all-reduce (>1: PS faster)")
    return True


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results")
    ap.add_argument("--out", default=".")
    args = ap.parse_args()
    with open(args.results) as f:
        rows = json.load(f)
    if not rows:
        raise SystemExit(f"{args.results}: no rows")
    os.makedirs(args.out, exist_ok=True)
    panels(rows, lambda r: r["samples_per_s"], "samples/s",
           os.path.join(args.out, "samples_per_s.png"),
           "Throughput vs workers")
    panels(rows, lambda r: r["of_bound"], "bound / measured step time",
           os.path.join(args.out, "of_bound.png"),
           "Fraction of the bandwidth bound", ylim=(0, 1.1))
    wrote = ["samples_per_s.png", "of_bound.png"]
    if speedup(rows, os.path.join(args.out, "ps_vs_allreduce.png")):
        wrote.append("ps_vs_allreduce.png")
    print(f"plot_scaling: wrote {', '.join(wrote)} in {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
