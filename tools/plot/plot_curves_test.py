#!/usr/bin/python3
"""Tests of tools/plot/plot_curves.py.

  /usr/bin/python3 -m pytest -q tools/plot/plot_curves_test.py
  /usr/bin/python3 tools/plot/plot_curves_test.py     # the same, via unittest

The drawing test is skipped, with the reason, where matplotlib is missing.
"""

import importlib.util
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import plot_curves  # noqa: E402

HAVE_MPL = importlib.util.find_spec("matplotlib") is not None
HEADER = ",".join(plot_curves.COLUMNS)


def row(job: str, step: int, loss: float, test_acc: float = -1) -> str:
    return (f"{job},mlp,{step},0,{loss},0.5,{test_acc},1000,0.1,0.2,0.3,"
            f"{step / 10}")


class PlotCurvesTest(unittest.TestCase):
    def setUp(self) -> None:
        self.dir = tempfile.TemporaryDirectory()
        self.addCleanup(self.dir.cleanup)

    def write(self, lines) -> str:
        path = os.path.join(self.dir.name, "curves.csv")
        with open(path, "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
        return path

    def test_reads_one_curve_per_job_in_order(self) -> None:
        path = self.write([HEADER, row("job-1", 10, 2.0), row("job-2", 10, 3),
                           row("job-1", 20, 1.0, 0.8)])
        curves = plot_curves.read_curves(path)
        self.assertEqual(list(curves), ["job-1 (mlp)", "job-2 (mlp)"])
        self.assertEqual(curves["job-1 (mlp)"]["step"], [10.0, 20.0])
        self.assertEqual(curves["job-1 (mlp)"]["test_accuracy"], [-1.0, 0.8])

    def test_only_measured_accuracies_are_drawn(self) -> None:
        # A Python worker's train accuracy is NaN ("nan" in the CSV); a test
        # accuracy is -1 until the first evaluation.
        path = self.write([HEADER,
                           "job-1,torch,1,0,2.0,nan,-1,10,0,0,0,0",
                           "job-1,torch,2,0,1.0,nan,0.85,10,0,0,0,0"])
        c = plot_curves.read_curves(path)["job-1 (torch)"]
        self.assertEqual(plot_curves.measured(c["step"], c["train_accuracy"]),
                         ([], []))
        self.assertEqual(plot_curves.measured(c["step"], c["test_accuracy"]),
                         ([2.0], [0.85]))
        if HAVE_MPL:  # draws without the NaN series
            plot_curves.plot({"job-1 (torch)": c},
                             os.path.join(self.dir.name, "nan.png"))

    def test_bad_files_name_the_line_and_column(self) -> None:
        cases = [
            ([], "header"),
            (["job,step"], "header"),
            ([HEADER], "no points"),
            ([HEADER, "job-1,mlp,1"], ":2: 3 fields"),
            ([HEADER, row("job-1", 1, 1).replace(",1000,", ",fast,")],
             ":2: samples_per_s: not a number"),
        ]
        for lines, want in cases:
            with self.subTest(want=want):
                path = self.write(lines)
                with self.assertRaisesRegex(plot_curves.CurveError, want):
                    plot_curves.read_curves(path)

    def test_main_exits_1_on_a_bad_file(self) -> None:
        path = self.write([HEADER])
        out = os.path.join(self.dir.name, "c.png")
        self.assertEqual(plot_curves.main([path, "-o", out]), 1)
        self.assertFalse(os.path.exists(out))

    @unittest.skipUnless(HAVE_MPL, "matplotlib is missing "
                         "(apt install python3-matplotlib)")
    def test_draws_a_png(self) -> None:
        path = self.write([HEADER] + [row("job-1", s, 1 / s) for s in
                                      range(1, 50)] +
                          [row("job-2", s, 2 / s, 0.7) for s in range(1, 50)])
        out = os.path.join(self.dir.name, "c.png")
        self.assertEqual(plot_curves.main([path, "-o", out]), 0)
        with open(out, "rb") as f:
            self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")


if __name__ == "__main__":
    unittest.main()
