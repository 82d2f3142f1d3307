#!/usr/bin/python3
"""Charts of scaling sweeps (tools/lab/scaling.py's results.json), as PNGs.

Per link rate (one sweep; with several rates each name gets _RATE):
  samples_per_s.png   samples/s vs workers, one panel per model size: the
                      parameter server per shard count (BSP solid, ASP
                      dashed) and ring all-reduce
  of_bound.png        measured step time as a fraction of its bound
                      (bound / measured: 1.0 = at the bound)
  ps_vs_allreduce.png BSP step-time speedup over all-reduce at the same W
                      and model, per shard count
  cpu_per_gb.png      CPU seconds per GB sent (rows with that figure), and
                      the raw-TCP reference of the sweep (dotted)
Across rates (sweeps at several rates, given together), per W:
  by_rate_wW.png      x = link rate; per model size a column of three
                      panels: fraction of the bound (each point labelled
                      with the machine's CPU busy), gloo step / PS step,
                      and cpu s/GB with the raw-TCP reference

Straggler rows (scaling.py --straggler) are series of their own.

  /usr/bin/python3 tools/lab/plot_scaling.py results.json --out DIR
  /usr/bin/python3 tools/lab/plot_scaling.py 100mbit/results.json \\
      250mbit/results.json 1gbit/results.json --out DIR   # + by_rate_w8.png
"""

import argparse
import json
import os
from collections import defaultdict
from typing import Dict, List

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from lab_cost import parse_rate_bits as rate_bits  # noqa: E402

def label(r: Dict) -> tuple:
    """(label, style) of a row's series."""
    tail = f" straggler {r['straggler']:g}" if r.get("straggler") else ""
    if r["system"] == "allreduce":
        return ("ring all-reduce (gloo)" + tail, "k-o" if not tail else "k:o")
    dash = "-" if r["mode"] == "bsp" else "--"
    return (f"PS {r['mode'].upper()} S={r['shards']}" + tail,
            (dash if not tail else ":") + "s")


def series(rows: List[Dict], params: int, x) -> Dict:
    """(label, style) -> sorted [(x(row), row)] for one model size."""
    out = defaultdict(list)
    for r in rows:
        if r["params"] == params:
            out[label(r)].append((x(r), r))
    return {k: sorted(v, key=lambda p: p[0]) for k, v in out.items()}


def panels(rows: List[Dict], metric, ylabel: str, path: str, title: str,
           ylim=None, reference=None):
    """One panel per model size, y = metric(row) vs workers; `reference`
    (row -> value) adds a dotted black line."""
    sizes = sorted({r["params"] for r in rows})
    fig, axes = plt.subplots(1, len(sizes), figsize=(5 * len(sizes), 4),
                             squeeze=False)
    rate = rows[0]["rate"] if rows else ""
    ws = sorted({r["workers"] for r in rows})
    for ax, p in zip(axes[0], sizes):
        for (name, style), pts in sorted(series(rows, p, lambda r: r["workers"]).items()):
            ys = [metric(r) for _, r in pts]
            if any(y is not None for y in ys):
                ax.plot([w for w, _ in pts], ys, style, label=name)
        refs = [reference(r) for r in rows if reference and reference(r)]
        if refs:
            ax.axhline(refs[0], color="k", ls=":", lw=1, label="raw TCP (iperf3)")
        ax.set_title(f"{p / 1e6:g}M parameters, {rate} links")
        ax.set_xlabel("workers")
        ax.set_ylabel(ylabel)
        ax.set_xscale("log", base=2)
        ax.set_xticks(ws)
        ax.set_xticklabels([str(w) for w in ws])
        ax.set_ylim(*(ylim or (0, None)))
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def with_speedup(rows: List[Dict], modes=("bsp",)) -> List[Dict]:
    """PS rows of `modes` with speedup = the all-reduce step / theirs, where
    a row of the same model, W, rate and straggler exists."""
    key = lambda r: (r["params"], r["workers"], r["rate"], r.get("straggler"))  # noqa: E731
    ring = {key(r): r["step_s"] for r in rows if r["system"] == "allreduce"}
    return [dict(r, speedup=ring[key(r)] / r["step_s"]) for r in rows
            if r["system"] == "ps" and r["mode"] in modes and key(r) in ring]


def per_rate(rows: List[Dict], out: str, suffix: str) -> List[str]:
    """The per-sweep charts of one rate's rows; the names written."""
    names = [f"samples_per_s{suffix}.png", f"of_bound{suffix}.png"]
    panels(rows, lambda r: r["samples_per_s"], "samples/s",
           os.path.join(out, names[0]), "Throughput vs workers")
    panels(rows, lambda r: r["of_bound"], "bound / measured step time",
           os.path.join(out, names[1]), "Fraction of the bandwidth bound",
           ylim=(0, 1.1))
    sub = with_speedup(rows)
    if sub:
        names.append(f"ps_vs_allreduce{suffix}.png")
        panels(sub, lambda r: r["speedup"], "all-reduce step / PS step",
               os.path.join(out, names[-1]),
               "BSP parameter server vs ring all-reduce (>1: PS faster)")
    if any(r.get("cpu_s_per_gb") for r in rows):
        names.append(f"cpu_per_gb{suffix}.png")
        panels(rows, lambda r: r.get("cpu_s_per_gb"), "CPU s per GB sent",
               os.path.join(out, names[-1]),
               "CPU per byte (project processes; dotted: raw TCP)",
               reference=lambda r: r.get("tcp_cpu_s_per_gb"))
    return names


def by_rate(rows: List[Dict], workers: int, path: str) -> None:
    """x = rate; per model size: of bound (+ CPU busy), speedup, cpu s/GB."""
    rows = [r for r in rows if r["workers"] == workers]
    sizes = sorted({r["params"] for r in rows})
    rates = sorted({r["rate"] for r in rows}, key=rate_bits)
    fig, axes = plt.subplots(3, len(sizes), figsize=(5.5 * len(sizes), 11),
                             squeeze=False, sharex=True)
    x = lambda r: rate_bits(r["rate"])  # noqa: E731
    speed = with_speedup(rows, modes=("bsp", "asp"))
    for col, p in enumerate(sizes):
        top, mid, low = axes[0][col], axes[1][col], axes[2][col]
        for (name, style), pts in sorted(series(rows, p, x).items()):
            top.plot([v for v, _ in pts], [r["of_bound"] for _, r in pts],
                     style, label=name)
            for v, r in pts:
                if r.get("cpu_busy") is not None:
                    top.annotate(f"{r['cpu_busy']:.0%}", (v, r["of_bound"]),
                                 fontsize=6, xytext=(3, 3),
                                 textcoords="offset points")
            ys = [r.get("cpu_s_per_gb") for _, r in pts]
            if any(y is not None for y in ys):
                low.plot([v for v, _ in pts], ys, style, label=name)
        for (name, style), pts in sorted(series(speed, p, x).items()):
            mid.plot([v for v, _ in pts], [r["speedup"] for _, r in pts],
                     style, label=name)
        tcp = sorted({(x(r), r["tcp_cpu_s_per_gb"]) for r in rows
                      if r["params"] == p and r.get("tcp_cpu_s_per_gb")})
        if tcp:
            low.plot([v for v, _ in tcp], [y for _, y in tcp], "k:",
                     label="raw TCP (iperf3)")
        mid.axhline(1.0, color="gray", lw=0.8)
        top.set_title(f"W = {workers}, {p / 1e6:g}M parameters")
        top.set_ylabel("bound / measured step (labels: CPU busy)")
        top.set_ylim(0, 1.1)
        mid.set_ylabel("gloo step / PS step (>1: PS faster)")
        low.set_ylabel("CPU s per GB sent")
        low.set_xlabel("link rate")
        for ax in (top, mid, low):
            ax.set_xscale("log")
            ax.set_xticks([rate_bits(r) for r in rates])
            ax.set_xticklabels(rates)
            ax.minorticks_off()
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize=7)
            if ax is not top:
                ax.set_ylim(0, None)
    fig.suptitle(f"Parameter server vs ring all-reduce at W = {workers}, by link rate")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", nargs="+", help="results.json files")
    ap.add_argument("--out", default=".")
    ap.add_argument("--workers", type=int, default=0,
                    help="by_rate chart for this W only (default: every W "
                    "present at two rates or more)")
    args = ap.parse_args()
    rows: List[Dict] = []
    for path in args.results:
        with open(path) as f:
            rows += json.load(f)
    if not rows:
        raise SystemExit(f"{' '.join(args.results)}: no rows")
    os.makedirs(args.out, exist_ok=True)
    rates = sorted({r["rate"] for r in rows}, key=rate_bits)
    wrote = []
    for rate in rates:
        suffix = f"_{rate}" if len(rates) > 1 else ""
        wrote += per_rate([r for r in rows if r["rate"] == rate], args.out, suffix)
    for w in sorted({r["workers"] for r in rows}):
        if (args.workers in (0, w) and
                len({r["rate"] for r in rows if r["workers"] == w}) > 1):
            wrote.append(f"by_rate_w{w}.png")
            by_rate(rows, w, os.path.join(args.out, wrote[-1]))
    print(f"plot_scaling: wrote {', '.join(wrote)} in {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
