#!/usr/bin/env python3
"""Tests of tools/lab/ctr_lab.py's pure parts, without a lab: the job it
submits (the shipped CTR job at the sweep's sizes, the peer's seed) and its
summary table with the pairs' ratio."""
import os
import sys
import types
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import ctr_lab  # noqa: E402


class CtrLabTest(unittest.TestCase):
    def test_job_is_the_shipped_one_at_the_sweeps_sizes(self):
        args = types.SimpleNamespace(train=204800, test=20000, batch=256,
                                     workers=3)
        spec = ctr_lab.job_spec(args)
        self.assertIn("synthetic_train: 204800", spec)
        self.assertIn("synthetic_test: 20000", spec)
        self.assertIn("batch_size: 256", spec)
        self.assertIn("num_workers: 3", spec)
        self.assertIn(f"seed: {ctr_lab.SEED}", spec)
        self.assertIn('dataset: "ctr-synthetic"', spec)

    def test_summary_has_every_row_and_the_ratio_of_the_medians(self):
        def row(system, sps):
            return {"system": system, "samples_per_s": sps, "test_auc": 0.77,
                    "train_s": 10.0, "row_s": 12.0, "cpu_s": 5.0,
                    "tx_bytes": 2e9}
        text = ctr_lab.summarize([row("ps", 4000), row("ddp", 2000),
                                  row("ps", 6000), row("ddp", 2000)])
        self.assertEqual(text.count("| ps |"), 2)
        self.assertIn("| ddp | 2000 | 0.7700 | 10.0 | 12.0 | 5.0 | 2.00 |", text)
        self.assertIn("median 2.50x (pairs 2.00, 3.00)", text)


if __name__ == "__main__":
    unittest.main()
