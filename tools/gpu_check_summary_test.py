#!/usr/bin/env python3
"""Tests tools/gpu_check_summary.py on made-up run folders: what passes the
GPU check and what fails it, and that the JSON carries the figures."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "gpu_check_summary.py")

JOBS = ("mlp mlp configs/jobs/fashion_mlp.pbtxt - test_accuracy 0.875 0.05 120 off\n"
        "cnn cnn configs/jobs/fashion_cnn.pbtxt - test_accuracy 0.905 0.02 200 off\n"
        "cnn_overlap cnn configs/jobs/fashion_cnn.pbtxt - test_accuracy 0.905 0.02 200 on\n"
        "ctr - configs/jobs/ctr_synthetic.pbtxt s/a/b/ test_auc 0.785 - 150 off\n")
BENCH = {"pass": True, "ops": [{"name": "BiasRelu 64x256", "max_rel_diff": 0,
                                "tolerance": 0, "pass": True}],
         "models": [], "gemm": [{"name": "square 4096", "m": 4096, "n": 4096,
                                 "k": 4096, "backend_gflops": 51200.2,
                                 "cublas_gflops": 51210.2, "ratio": 1.0,
                                 "pass": True}],
         "steps": [{"model": "cnn", "batch": 64, "parameters": 3274634,
                    "host_io_ms": 6.1, "pinned_io_ms": 2.0,
                    "resident_ms": 0.9}]}


def job_line(acc, state="SUCCEEDED", rate=72338):
    return (f"job=job-000001 state={state} test_accuracy={acc} loss=0.22 "
            f"steps=4680 samples_per_s={rate} wall_s=9.06 "
            f'reason="finished at step 4680, test accuracy {acc}"')


class GpuCheckSummaryTest(unittest.TestCase):
    def run_on(self, **override):
        files = {
            "MANIFEST": "commit=abc\ndirty=no\n",
            "tests.tsv": "cuda_conv_test\tpass\t0.4\t0\t2\t0\t0\n"
                         "device_group_gpu_test\tpass\t0.3\t0\t0\t4\t0\n",
            "bench.json": json.dumps(BENCH), "bench.rc": "0", "jobs": JOBS,
            "job_mlp.rc": "0", "job_mlp.line": job_line(0.8815),
            "job_cnn.rc": "0", "job_cnn.line": job_line(0.9097, rate=8479),
            "job_cnn_overlap.rc": "0",
            "job_cnn_overlap.line": job_line(0.9097, rate=12000),
            "job_ctr.rc": "0",
            "job_ctr.line": ("job=job-000001 state=SUCCEEDED loss=0.45 steps=976 "
                             "samples_per_s=40000 wall_s=30 test_auc=0.7878 "
                             'reason="finished"'),
            "peer_mlp.json": json.dumps({"samples_per_s": 101857.0,
                                         "test_accuracy": 0.8875}),
            "env": "nccl=/usr/lib\n", "gpu": "NVIDIA H200, 580, 143771 MiB",
        }
        files.update(override)
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        work, out = os.path.join(tmp.name, "work"), os.path.join(tmp.name, "out")
        os.makedirs(work)
        os.makedirs(out)
        for name, text in files.items():
            if text is not None:
                with open(os.path.join(work, name), "w") as f:
                    f.write(text)
        proc = subprocess.run([sys.executable, SCRIPT, work, out, "carried",
                               "abc", "12"],
                              capture_output=True, text=True)
        with open(os.path.join(out, "gpu_check.json")) as f:
            return proc, json.load(f)

    def test_all_good_passes_and_reports_the_peer_ratio(self):
        proc, s = self.run_on()
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        self.assertTrue(s["pass"])
        mlp, cnn, overlap, ctr = s["bsp_jobs"]
        self.assertEqual((ctr["metric"], ctr["value"]), ("test_auc", 0.7878))
        self.assertIsNone(ctr["torch_peer"])
        self.assertIn("(sed 's/a/b/')", ctr["job"])
        self.assertEqual(mlp["ratio_to_torch"], round(72338 / 101857, 3))
        self.assertIsNone(cnn["torch_peer"])  # a missing peer does not fail
        self.assertIn("overlap on", overlap["job"])
        self.assertIn("| mlp | SUCCEEDED | test_accuracy 0.8815 (>= 0.875)", proc.stdout)
        self.assertIn("| cnn | 3274634 | 6.1 | 2.0 | 0.9 |", proc.stdout)

    def test_psclient_not_run_says_why_and_does_not_fail(self):
        reason = json.dumps({"run": "no", "reason": "not run: Python 3.10"})
        for text in (reason, None):
            proc, s = self.run_on(**{"psclient.json": text})
            self.assertEqual(proc.returncode, 0, proc.stdout)
            self.assertFalse(s["psclient_torch_cuda"]["run"])
        self.assertIn("not run: Python 3.10", self.run_on(
            **{"psclient.json": reason})[0].stdout)

    def test_psclient_run_passes_at_its_target_and_fails_under_it(self):
        def ran(acc, test_summary="OK", example_rc="0"):
            return json.dumps({
                "run": "yes", "python": "3.12", "test_rc": "0",
                "test_summary": test_summary, "max_param_diff": "1.49e-08",
                "example_rc": example_rc, "epochs": "3", "target": "0.875",
                "last_epoch": f"rank 0 epoch 3 step 1404 loss 0.17 "
                              f"test_accuracy {acc} samples_per_s 9580.3"})
        peer = json.dumps({"samples_per_s": 51798.0, "test_accuracy": 0.88})
        proc, s = self.run_on(**{"psclient.json": ran(0.9026), "peer_cnn.json": peer})
        self.assertEqual(proc.returncode, 0, proc.stdout)
        p = s["psclient_torch_cuda"]
        self.assertTrue(p["run"] and p["pass"])
        self.assertEqual((p["test_accuracy"], p["samples_per_s"]), (0.9026, 9580.3))
        self.assertEqual(p["ratio_to_torch"], round(9580.3 / 51798, 3))
        self.assertIn("test accuracy 0.9026 (>= 0.875)", proc.stdout)
        for bad in (ran(0.85), ran(0.9, test_summary="OK (skipped=1)"),
                    ran(0.9, test_summary="FAILED (failures=1)"),
                    ran(0.9, example_rc="1")):
            proc, s = self.run_on(**{"psclient.json": bad})
            self.assertEqual(proc.returncode, 1, bad)
            self.assertFalse(s["psclient_torch_cuda"]["pass"], bad)

    def test_jobs_of_one_model_share_its_peer(self):
        peer = json.dumps({"samples_per_s": 60000.0, "test_accuracy": 0.9})
        _, s = self.run_on(**{"peer_cnn.json": peer})
        self.assertEqual(s["bsp_jobs"][1]["ratio_to_torch"], round(8479 / 60000, 3))
        self.assertEqual(s["bsp_jobs"][2]["ratio_to_torch"], 0.2)

    def test_a_job_under_its_target_fails(self):
        proc, s = self.run_on(**{"job_cnn.line": job_line(0.9049)})
        self.assertEqual(proc.returncode, 1)
        self.assertFalse(s["pass"])
        self.assertFalse(s["bsp_jobs"][1]["pass"])
        line = "job=job-1 state=SUCCEEDED samples_per_s=1 test_auc=0.7 reason=\"x\""
        proc, s = self.run_on(**{"job_ctr.line": line})
        self.assertEqual(proc.returncode, 1)
        self.assertFalse(s["bsp_jobs"][3]["pass"])

    def test_a_failed_job_or_no_job_line_fails(self):
        for line in (job_line(0.95, state="FAILED"), None):
            proc, s = self.run_on(**{"job_mlp.line": line})
            self.assertEqual(proc.returncode, 1, line)
            self.assertFalse(s["bsp_jobs"][0]["pass"], line)

    def test_a_skipped_or_failed_test_fails(self):
        for status in ("skipped", "fail", "timeout"):
            proc, _ = self.run_on(**{"tests.tsv": f"t\t{status}\t1\t0\t1\t1\t0\n"})
            self.assertEqual(proc.returncode, 1, status)

    def test_a_failed_or_unreadable_benchmark_fails(self):
        proc, _ = self.run_on(**{"bench.rc": "1"})
        self.assertEqual(proc.returncode, 1)
        proc, s = self.run_on(**{"bench.json": "{not json"})
        self.assertEqual(proc.returncode, 1)
        self.assertEqual(s["benchmark"]["error"], "unreadable output")


if __name__ == "__main__":
    unittest.main()
