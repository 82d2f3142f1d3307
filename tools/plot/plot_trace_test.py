#!/usr/bin/python3
"""Tests of tools/plot/plot_trace.py on a small hand-made trace: it draws the
selected steps' spans to a PNG, and says so when a trace has no spans.
Skipped, with the reason, where matplotlib is missing."""

import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import unittest

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                      "plot_trace.py")
HAVE_MPL = importlib.util.find_spec("matplotlib") is not None


def span(name, step, ts, dur, pid, tid):
    return {"ph": "X", "name": name, "cat": "worker", "ts": ts, "dur": dur,
            "pid": pid, "tid": tid, "args": {"step": step}}


@unittest.skipUnless(HAVE_MPL, "python3-matplotlib is not installed")
class PlotTraceTest(unittest.TestCase):
    def run_script(self, events, *args):
        with tempfile.TemporaryDirectory() as d:
            trace = os.path.join(d, "trace.json")
            out = os.path.join(d, "trace.png")
            with open(trace, "w") as f:
                json.dump({"traceEvents": events}, f)
            p = subprocess.run([sys.executable, SCRIPT, trace, "-o", out,
                                *args], capture_output=True, text=True)
            size = os.path.getsize(out) if os.path.exists(out) else 0
        return p, size

    def test_draws_the_selected_steps(self):
        events = [
            {"ph": "M", "name": "process_name", "pid": 1, "tid": 0,
             "args": {"name": "workerd w0"}},
            {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1,
             "args": {"name": "step"}},
        ]
        for step in range(5):
            t = 1000 * step
            events += [span("step", step, t, 900, 1, 1),
                       span("compute", step, t + 10, 500, 1, 1),
                       span("apply", step, t + 600, 200, 2, 1)]
        p, size = self.run_script(events, "--steps=2")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertGreater(size, 1000)  # a PNG was written

    def test_a_trace_without_spans_is_an_error(self):
        p, size = self.run_script([], "--steps=2")
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("no complete spans", p.stderr)
        self.assertEqual(size, 0)


if __name__ == "__main__":
    unittest.main()
