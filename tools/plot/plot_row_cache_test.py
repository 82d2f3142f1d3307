#!/usr/bin/python3
"""Tests of tools/plot/plot_row_cache.py on a hand-made sweep: it skips
gtest's lines, draws a PNG, and refuses a sweep without staleness 0 first.
The drawing test is skipped, with the reason, where matplotlib is missing."""

import importlib.util
import os
import subprocess
import sys
import tempfile
import unittest

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                      "plot_row_cache.py")
HAVE_MPL = importlib.util.find_spec("matplotlib") is not None

SWEEP = """[ RUN      ] RowCacheJobTest.DISABLED_SweepOnTheMillionExampleJob
staleness auc samples_per_s rank0_pushed rank0_pulled rank0_hits shards_pulled
0 0.7878 16000 4000 4000 0 9000
4 0.7875 17000 4000 2600 1400 6000
[       OK ] RowCacheJobTest.DISABLED_SweepOnTheMillionExampleJob (1 ms)
"""


def run_script(text):
    with tempfile.TemporaryDirectory() as d:
        sweep = os.path.join(d, "sweep.txt")
        out = os.path.join(d, "row_cache.png")
        with open(sweep, "w", encoding="utf-8") as f:
            f.write(text)
        proc = subprocess.run([sys.executable, SCRIPT, sweep, "-o", out],
                              capture_output=True, text=True, check=False)
        return proc, os.path.exists(out) and os.path.getsize(out) > 0


class PlotRowCacheTest(unittest.TestCase):
    @unittest.skipUnless(HAVE_MPL, "python3-matplotlib is not installed")
    def test_draws_the_sweep(self):
        proc, drawn = run_script(SWEEP)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertTrue(drawn)

    def test_refuses_a_sweep_without_staleness_zero(self):
        proc, drawn = run_script(SWEEP.replace("\n0 0.7878", "\n1 0.7878"))
        self.assertEqual(proc.returncode, 1)
        self.assertIn("no run with staleness 0 first", proc.stderr)
        self.assertFalse(drawn)


if __name__ == "__main__":
    unittest.main()
