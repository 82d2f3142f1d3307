#!/usr/bin/python3
"""Draws a psctl trace (Trace Event Format JSON) as a picture: one row per
process and thread, each complete ("X") span a bar labelled with its name,
for a few steps; the flows as grey lines from start to finish. For the docs
(docs/img/trace.png) and for looking at a trace without a browser.

    /usr/bin/python3 tools/plot/plot_trace.py trace.json -o trace.png [--steps=2]
"""

import argparse
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

COLORS = {
    "step": "#dddddd", "data wait": "#f2c14e", "compute": "#5b8e7d",
    "forward": "#8cb369", "backward": "#4d7ea8", "comm wait": "#bc4b51",
    "local reduce": "#9e6240", "PushPull": "#f4a259", "pull reply": "#6d597a",
    "apply": "#355070", "request": "#b56576",
}


def load(path):
    with open(path) as f:
        data = json.load(f)
    events = data["traceEvents"] if isinstance(data, dict) else data
    names = {}
    for e in events:
        if e.get("ph") == "M" and e.get("name") in ("process_name",
                                                    "thread_name"):
            key = (e["pid"],) if e["name"] == "process_name" else (
                e["pid"], e["tid"])
            names[key] = e["args"]["name"]
    return events, names


def main():
    p = argparse.ArgumentParser()
    p.add_argument("trace")
    p.add_argument("-o", "--out", required=True)
    p.add_argument("--steps", type=int, default=2,
                   help="how many steps to draw, from the first (default 2)")
    a = p.parse_args()
    events, names = load(a.trace)
    spans = [e for e in events if e.get("ph") == "X"]
    if not spans:
        sys.exit("plot_trace: no complete spans in %s" % a.trace)
    steps = sorted({e["args"]["step"] for e in spans
                    if "step" in e.get("args", {})})[:a.steps]
    keep = [e for e in spans if e.get("args", {}).get("step") in steps]
    t0 = min(e["ts"] for e in keep)
    t1 = max(e["ts"] + e["dur"] for e in keep)
    lanes = sorted({(e["pid"], e["tid"]) for e in keep})
    row = {lane: i for i, lane in enumerate(lanes)}
    fig, ax = plt.subplots(figsize=(12, 0.45 * len(lanes) + 1.2))
    for e in keep:
        y = row[(e["pid"], e["tid"])]
        name = e["name"].split(" ")[0] if e["name"].startswith("PushPull") \
            else e["name"]
        color = next((c for k, c in COLORS.items() if name.startswith(k)),
                     "#999999")
        x = (e["ts"] - t0) / 1000.0
        w = max(e["dur"] / 1000.0, 0.01)
        ax.broken_barh([(x, w)], (y - 0.35, 0.7), facecolors=color,
                       edgecolors="black", linewidth=0.3)
        if w > (t1 - t0) / 1000.0 / 40:
            ax.text(x + w / 2, y, e["name"], ha="center", va="center",
                    fontsize=6, clip_on=True)
    ax.set_yticks(range(len(lanes)))
    ax.set_yticklabels(["%s / %s" % (names.get((pid,), pid),
                                     names.get((pid, tid), tid))
                        for pid, tid in lanes], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("ms since the first span of step %s" % steps[0])
    ax.set_title("psctl trace: steps %s" % ", ".join(map(str, steps)))
    fig.tight_layout()
    fig.savefig(a.out, dpi=130)


if __name__ == "__main__":
    main()
