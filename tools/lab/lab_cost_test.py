#!/usr/bin/env python3
"""Tests of tools/lab/lab_cost.py (the scaling rows' bounds, CPU and byte
accounting, straggler handling) and scaling.py's table. No lab needed: the
lab is faked; the CPU accounting runs real child processes for < 2 s."""
import os
import subprocess
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import lab_cost  # noqa: E402
import scaling  # noqa: E402

# Burns about `s` CPU seconds, says so, then waits for stdin to close.
BURN = ("import sys, time\n"
        "t = time.process_time()\n"
        "while time.process_time() - t < float(sys.argv[1]): pass\n"
        "print('burnt', flush=True)\n"
        "sys.stdin.read()\n")


class FakeLab:
    """What lab_cost needs of scaling.Lab: tx counter, rate, shape calls."""

    def __init__(self, fail_restore: bool = False):
        self.rate, self.prefix, self.tx = "100mbit", "fake", 0
        self.shapes, self.fail_restore = [], fail_restore

    def tx_bytes(self) -> int:
        return self.tx

    def shape(self, host: int, rate: str = "") -> None:
        if not rate and self.fail_restore:
            raise RuntimeError("tc failed")
        self.shapes.append((host, rate))


class BoundsTest(unittest.TestCase):
    def test_ps_bound(self):
        # M = B = 1e6: one step moves M per worker link, W M / S per shard.
        for w, s, f, steps, want in [
                (8, 8, 1.0, 1, 2.0),   # (1 + 1/1) x max(1, 1)
                (8, 8, 0.5, 1, 4.0),   # the straggler's link: M / (0.5 B)
                (8, 2, 0.5, 1, 8.0),   # the shards still bound: W M / (S B)
                (8, 2, 0.25, 3, 16 / 3),  # (1 + 1/3) x 4
                (1, 1, 1.0, 0, 2.0)]:  # steps 0 counts as 1
            self.assertAlmostEqual(
                lab_cost.ps_bound(1e6, w, s, 1e6, steps, straggler=f), want,
                msg=(w, s, f, steps))
        self.assertAlmostEqual(lab_cost.ps_bound(1e6, 8, 8, 1e6, 1, 0.25), 2.25)

    def test_ring_bound(self):
        self.assertAlmostEqual(lab_cost.ring_bound(1e6, 8, 1e6), 1.75)
        self.assertAlmostEqual(lab_cost.ring_bound(1e6, 8, 1e6, straggler=0.5), 3.5)
        self.assertAlmostEqual(lab_cost.ring_bound(1e6, 2, 1e6, 0.1), 1.1)

    def test_rates(self):
        self.assertEqual(lab_cost.straggler_rate("100mbit", 0.5), "50000kbit")
        self.assertEqual(lab_cost.straggler_rate("1gbit", 1), "1000000kbit")
        self.assertEqual(lab_cost.straggler_rate("250mbit", 0.3), "75000kbit")
        for bad in (0, -0.5, 1.5):
            with self.assertRaisesRegex(ValueError, "--straggler"):
                lab_cost.straggler_rate("1gbit", bad)
        self.assertEqual(lab_cost.parse_rate_bits("62500Kbit"), 62.5e6)
        self.assertEqual(lab_cost.parse_rate_bits("1Gbit"), 1e9)
        with self.assertRaisesRegex(ValueError, "50mbps"):
            lab_cost.parse_rate_bits("50mbps")


class CpuAndBytesTest(unittest.TestCase):
    def test_proc_stat_cpu(self):
        # The command name may hold spaces and ')': fields count from the last.
        line = "1234 (a) b (c) S " + " ".join(["1"] * 10) + " 100 50 25 25 0 0\n"
        self.assertAlmostEqual(lab_cost.proc_stat_cpu(line, clk_tck=100), 2.0)
        with self.assertRaisesRegex(ValueError, "short"):
            lab_cost.proc_stat_cpu("1 (x) S 1 2", clk_tck=100)
        with open("/proc/self/stat") as f:
            self.assertGreaterEqual(lab_cost.proc_stat_cpu(f.read()), 0)
        with self.assertRaisesRegex(RuntimeError, "gone"):
            lab_cost.proc_cpu(2**22 + 1)  # above pid_max's default

    def test_status_vm_hwm(self):
        text = "Name:\tpsd\nVmPeak:\t  900 kB\nVmHWM:\t   12345 kB\nVmRSS:\t 1 kB\n"
        self.assertEqual(lab_cost.status_vm_hwm(text), 12345 * 1024)
        with self.assertRaises(ValueError):
            lab_cost.status_vm_hwm("Name:\tpsd\n")
        self.assertGreater(lab_cost.peak_rss(os.getpid()), 0)

    def test_cpu_s_per_gb(self):
        self.assertAlmostEqual(lab_cost.cpu_s_per_gb(3, 2e9), 1.5)
        self.assertIsNone(lab_cost.cpu_s_per_gb(1, 0))

    def test_host_tx_bytes_of_no_lab(self):
        with self.assertRaisesRegex(RuntimeError, "nolab9-v1/statistics"):
            lab_cost.host_tx_bytes("nolab9", 2)

    def test_window_counts_live_processes_and_reaped_children(self):
        lab = FakeLab()
        live = subprocess.Popen([sys.executable, "-c", BURN, "0.4"],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                text=True)
        try:
            window = lab_cost.CostWindow(lab, [live])
            self.assertEqual(live.stdout.readline().strip(), "burnt")
            subprocess.run([sys.executable, "-c", BURN, "0.3"], check=True,
                           stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
            lab.tx = 500_000_000
            cost = window.close()
        finally:
            live.stdin.close()
            live.wait(timeout=10)
            live.stdout.close()
        # 0.4 + 0.3 s burnt, plus the interpreters' start-up (< 1 s).
        self.assertGreater(cost["cpu_s"], 0.6)
        self.assertLess(cost["cpu_s"], 2.5)
        self.assertEqual(cost["tx_bytes"], 500_000_000)
        self.assertAlmostEqual(cost["cpu_s_per_gb"], cost["cpu_s"] * 2)
        self.assertGreater(cost["cpu_busy"], 0)


class StragglerTest(unittest.TestCase):
    def test_shapes_then_restores_even_on_error(self):
        lab = FakeLab()
        with lab_cost.straggler(lab, 4, 0.5):
            self.assertEqual(lab.shapes, [(4, "50000kbit")])
        self.assertEqual(lab.shapes, [(4, "50000kbit"), (4, "")])
        lab.shapes.clear()
        with self.assertRaises(KeyboardInterrupt):
            with lab_cost.straggler(lab, 2, 0.25):
                raise KeyboardInterrupt
        self.assertEqual(lab.shapes, [(2, "25000kbit"), (2, "")])

    def test_none_leaves_the_lab_alone(self):
        lab = FakeLab()
        with lab_cost.straggler(lab, 4, None):
            pass
        self.assertEqual(lab.shapes, [])

    def test_a_failed_restore_stops_the_sweep_naming_the_fix(self):
        lab = FakeLab(fail_restore=True)
        with self.assertRaisesRegex(SystemExit, "shape 3"):
            with lab_cost.straggler(lab, 3, 0.5):
                pass

    def test_mis_shaped(self):
        status = ("lab x: 2 hosts, net 10.213.0.0/24, rate 100mbit, burst 1\n"
                  "1 x-h1 10.213.0.1 pids: \n"
                  "  out (eth0):        tbf 100Mbit, 0 bytes 0 pkt\n"
                  "  in  (x-v1): tbf 100Mbit, 0 bytes 0 pkt\n"
                  "2 x-h2 10.213.0.2 pids: \n"
                  "  out (eth0):        tbf 50Mbit, 0 bytes 0 pkt\n"
                  "  in  (x-v2): tbf 100Mbit, 0 bytes 0 pkt\n")
        self.assertEqual(lab_cost.mis_shaped(status, "100mbit"),
                         ["host 2: out (eth0):        tbf 50Mbit, 0 bytes 0 pkt"])
        self.assertEqual(len(lab_cost.mis_shaped(status, "50mbit")), 3)


class TableTest(unittest.TestCase):
    ROW = {"system": "ps", "mode": "bsp", "workers": 8, "shards": 8,
           "params": 10_000_000, "rate": "250mbit", "step_s": 1.5,
           "samples_per_s": 170.0, "bytes_per_step": 6.4e8, "bound_s": 1.4,
           "of_bound": 0.93, "cpu_busy": 0.5}

    def test_new_columns_and_old_rows(self):
        new = dict(self.ROW, straggler=0.5, cpu_s=31.25, tx_bytes=1.25e10,
                   cpu_s_per_gb=2.5, cpu_vs_tcp=1.6)
        lines = scaling.table([new, self.ROW]).splitlines()
        self.assertEqual(lines[0].count("|"), lines[1].count("|"))
        self.assertIn("| cpu s/GB | cpu vs tcp |", lines[0])
        self.assertIn("| 0.5 | 1500.0 |", lines[2])
        self.assertTrue(lines[2].endswith("| 50% | 31.2 | 12.50 | 2.50 | 1.60 | - | - |"))
        # A row of an older results.json: no CPU or byte figures.
        self.assertTrue(lines[3].endswith("| 50% | - | 0.00 | - | - | - | - |"))
        shard = dict(self.ROW, shard_tx_per_step=8.4e7, shard_peak_rss=2.5e8)
        line = scaling.table([shard]).splitlines()[2]
        self.assertTrue(line.endswith("| 84.0 | 250 |"), line)
        self.assertIn("| 250mbit | - |", lines[3])


if __name__ == "__main__":
    unittest.main()
