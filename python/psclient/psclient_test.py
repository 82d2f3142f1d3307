#!/usr/bin/python3
"""Tests of psclient against a local cluster of real psd processes
(psclient.testing.LocalCluster): submit/status/cancel, join, push/pull
checked against SGD, asynchronous handles, who leads after SHRINK, and the
errors of bad input."""

import os
import sys
import threading
import time
import unittest

# Runfiles (a Bazel test runs from their root) or a source checkout.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                ".."))

import numpy as np  # noqa: E402

import psclient  # noqa: E402
from psclient.testing import LocalCluster  # noqa: E402

LR = 0.5  # the jobs' SGD learning rate


# The tests' model: (name, shape, init) per tensor, torch-style names.
TENSORS = [("fc1.weight", (16, 64), "init { kind: UNIFORM scale: 0.1 }"),
           ("fc1.bias", (64,), "init { kind: ZEROS }"),
           ("fc2.weight", (64, 10), "init { kind: NORMAL scale: 0.1 }"),
           ("fc2.bias", (10,), "init { kind: CONSTANT value: 0.25 }")]


def custom_spec(name: str, workers: int = 1, tensors=TENSORS,
                mode: str = "BSP", extra: str = "") -> str:
    """A custom model's job (a Python worker's) of `tensors`."""
    text = "".join(
        f'tensors {{ name: "{n}" shape: {list(shape)} {init} }}\n'
        for n, shape, init in tensors)
    return (f'name: "{name}"\nmodel {{ custom {{\n{text}}} }}\n'
            "data { batch_size: 1 }\n"
            f"optimizer {{ kind: SGD learning_rate: {LR} }}\n"
            f"consistency {{ mode: {mode} step_deadline_ms: 20000 }}\n"
            f"num_workers: {workers}\nseed: 1\n{extra}")


def join_all(client, job_id, n, timeout_s=30.0):
    """Joins `n` workers of the job from threads (the job starts once all
    are registered); returns them by rank."""
    workers, errors = [], []

    def one(i):
        try:
            workers.append(client.join(job_id, name=f"py{i}",
                                       timeout_s=timeout_s))
        except Exception as e:  # noqa: BLE001 (reported below)
            errors.append(e)
    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        for w in workers:
            w.close()
        raise errors[0]
    return sorted(workers, key=lambda w: w.rank)


class PsclientTest(unittest.TestCase):
    """Each test gets its own cluster: no worker or job of another test
    can be assigned or counted."""

    def setUp(self):
        self.cluster = LocalCluster(shards=2).start()
        self.addCleanup(self.cluster.stop)
        self.client = psclient.connect(cluster=self.cluster.cluster_file,
                                       timeout_s=10.0)

    def test_submit_status_cancel(self):
        job_id, joined = self.client.submit(custom_spec("pending", workers=3))
        self.assertTrue(job_id)
        self.assertFalse(joined)
        st = self.client.status(job_id)
        self.assertEqual(st["job_id"], job_id)
        self.assertEqual(st["name"], "pending")
        self.assertEqual(st["state"], "PENDING")
        self.assertIn("step", st["progress"])
        self.assertIn(job_id, [j["job_id"] for j in self.client.jobs()])
        self.assertEqual(self.client.cancel(job_id), "CANCELLED")
        self.assertEqual(self.client.status(job_id)["state"], "CANCELLED")

    def test_join_existing_finds_the_job(self):
        first, joined = self.client.submit(custom_spec("shared", workers=2),
                                           join_existing=True)
        self.assertFalse(joined)
        again, joined = self.client.submit(custom_spec("shared", workers=2),
                                           join_existing=True)
        self.assertEqual((again, joined), (first, True))
        with self.assertRaises(psclient.InvalidSpec) as e:
            self.client.submit(custom_spec("shared", workers=3),
                               join_existing=True)
        self.assertIn(first, str(e.exception))
        self.assertIn("num_workers", str(e.exception))

    def test_built_in_model_cannot_be_joined(self):
        job_id, _ = self.client.submit(
            'name: "lab"\nmodel { lab { parameters: 4096 layers: 2 '
            'steps_per_epoch: 10 } }\ndata { batch_size: 1 epochs: 1 }\n'
            "optimizer { kind: SGD learning_rate: 0.1 }\n"
            "consistency { mode: ASP }\nnum_workers: 1\n")
        with self.assertRaises(psclient.Error) as e:
            self.client.join(job_id, timeout_s=5.0)
        self.assertIn(job_id, str(e.exception))
        self.assertEqual(e.exception.code, "FAILED_PRECONDITION")

    def test_dry_run_submits_nothing(self):
        before = len(self.client.jobs())
        job_id, _ = self.client.submit(custom_spec("dry"), dry_run=True)
        self.assertEqual(job_id, "")
        self.assertEqual(len(self.client.jobs()), before)

    def test_bad_spec_names_the_field(self):
        with self.assertRaises(psclient.InvalidSpec) as e:
            self.client.submit(custom_spec(
                "bad", tensors=[("w", (3, 0), "init { kind: ZEROS }")]))
        self.assertIn("model.custom.tensors[0].shape[1]", str(e.exception))
        with self.assertRaises(psclient.InvalidSpec) as e:
            self.client.submit(custom_spec("bad", workers=0))
        self.assertIn("num_workers", str(e.exception))
        with self.assertRaises(psclient.InvalidSpec) as e:
            self.client.submit('name: "x"\nno_such_field: 1\n')
        self.assertIn("no_such_field", str(e.exception))
        with self.assertRaises(psclient.InvalidSpec):
            self.client.submit(b"\xff\xff\xff")
        with self.assertRaises(psclient.InvalidSpec):
            self.client.submit(42)

    def test_unreachable_coordinator_within_timeout(self):
        t0 = time.monotonic()
        with self.assertRaises(psclient.Unavailable) as e:
            psclient.connect(coordinator="127.0.0.1:1", timeout_s=1.0)
        self.assertLess(time.monotonic() - t0, 5.0)
        self.assertIn("127.0.0.1:1", str(e.exception))
        self.assertEqual(e.exception.code, "UNAVAILABLE")
        with self.assertRaises(psclient.Error) as e:
            psclient.connect(cluster="/no/such/cluster.pbtxt")
        self.assertIn("/no/such/cluster.pbtxt", str(e.exception))

    def test_join_timeout_names_the_job(self):
        job_id, _ = self.client.submit(custom_spec("short", workers=2))
        try:
            with self.assertRaises(psclient.Timeout) as e:
                self.client.join(job_id, timeout_s=1.0)
            self.assertIn(job_id, str(e.exception))
            self.assertIn("PENDING", str(e.exception))
        finally:
            self.client.cancel(job_id)

    def test_push_pull_follows_sgd(self):
        job_id, _ = self.client.submit(custom_spec("sgd"))
        with self.client.join(job_id) as w:
            self.assertEqual((w.rank, w.num_workers, w.start_step), (0, 1, 0))
            self.assertEqual([t[:2] for t in w.tensors],
                             [t[:2] for t in TENSORS])
            offset = 0
            for name, shape, off, size in w.tensors:
                self.assertEqual(off, offset)
                self.assertEqual(int(np.prod(shape)), size)
                offset += size
            self.assertEqual(w.params.shape, (offset,))
            self.assertEqual(w.params.dtype, np.float32)
            w.pull(0)
            p0 = w.params.copy()
            # The shards' initial values, as the spec's inits say.
            np.testing.assert_array_equal(w.tensor(p0, "fc1.bias"), 0.0)
            np.testing.assert_array_equal(w.tensor(p0, "fc2.bias"), 0.25)
            self.assertLessEqual(np.abs(w.tensor(p0, "fc1.weight")).max(),
                                 0.1)
            self.assertGreater(np.abs(w.tensor(p0, "fc1.weight")).max(), 0)
            rng = np.random.default_rng(5)
            w.grads[:] = rng.standard_normal(offset).astype(np.float32)
            w.push_pull(0)
            np.testing.assert_allclose(w.params, p0 - LR * w.grads,
                                       rtol=1e-6, atol=1e-6)
            # One tensor alone moves only its range.
            p1 = w.params.copy()
            w.grads[:] = 1.0
            w.push_pull(1, tensors=["fc2.bias"])
            _, _, off, size = w.tensors[3]
            expect = p1.copy()
            expect[off:off + size] -= LR
            np.testing.assert_allclose(w.params, expect, rtol=1e-6)
            w.report(step=2, total_steps=2, loss=0.5, finished=True)

    def test_views_share_the_buffers(self):
        job_id, _ = self.client.submit(custom_spec("views"))
        with self.client.join(job_id) as w:
            self.assertTrue(w.params.flags.writeable)
            self.assertIs(w.params, w.params)
            b = w.tensor(w.grads, "fc1.bias")
            self.assertEqual(b.shape, (64,))
            b[:] = 3.0
            _, _, off, _ = w.tensors[1]
            self.assertEqual(w.grads[off], 3.0)
            with self.assertRaises(psclient.ShapeError):
                w.tensor(np.zeros(3, np.float32), "fc1.bias")
            with self.assertRaises(psclient.ShapeError) as e:
                w.tensor(w.grads, "nope")
            self.assertIn("nope", str(e.exception))
            w.report(step=0, finished=True)

    def test_async_handles_across_two_workers(self):
        job_id, _ = self.client.submit(custom_spec("async", workers=2))
        w0, w1 = join_all(self.client, job_id, 2)
        try:
            self.assertEqual((w0.rank, w1.rank), (0, 1))
            w0.grads[:] = 1.0
            w1.grads[:] = 3.0
            # BSP: step 0 waits for both workers' gradients.
            h0 = w0.start("pushpull", 0, priority=1)
            with self.assertRaises(psclient.Timeout) as e:
                w0.wait(h0, timeout_s=0.3)
            self.assertIn(job_id, str(e.exception))
            h1 = w1.start("pushpull", 0)
            w1.wait(h1, timeout_s=30)
            w0.wait(h0, timeout_s=30)  # the same handle, waited again
            # Sum of gradients (mean or sum per the job): both agree.
            np.testing.assert_array_equal(w0.params, w1.params)
            self.assertTrue(np.all(w0.params < 0))
            with self.assertRaises(psclient.Error):
                w0.wait(h0)  # already waited
            # Per-tensor requests in flight at once.
            hs = [w0.start("pull", 1, [name]) for name, _, _, _ in w0.tensors]
            for h in hs:
                w0.wait(h, timeout_s=30)
        finally:
            # Cancelled first: a worker that closes without finishing
            # leaves at once, and under FAIL that fails the job.
            self.client.cancel(job_id)
            w0.close()
            w1.close()

    def test_the_lowest_rank_left_leads(self):
        job_id, _ = self.client.submit(custom_spec(
            "leader", workers=2, extra="on_worker_failure: SHRINK\n"))
        w0, w1 = join_all(self.client, job_id, 2)
        try:
            self.assertEqual((w0.leads, w1.leads), (True, False))
            # Rank 0 leaves without finishing (close() unregisters it at
            # once); the job goes on with rank 1, which leads from its
            # next heartbeat.
            w0.close()
            deadline = time.monotonic() + 30.0
            while not w1.leads and time.monotonic() < deadline:
                time.sleep(0.05)
            self.assertTrue(w1.leads)
            status = self.client.status(job_id)
            self.assertEqual(status["state"], "RUNNING")
            self.assertIn("shrunk", status["reason"])
            w1.report(step=0, finished=True)
            self.assertEqual(self.client.status(job_id)["state"], "SUCCEEDED")
        finally:
            w0.close()
            w1.close()

    def test_close_leaves_at_once(self):
        job_id, _ = self.client.submit(custom_spec(
            "leave", workers=2, extra="on_worker_failure: SHRINK\n"))
        w0, w1 = join_all(self.client, job_id, 2)
        try:
            # Step 0 needs both pushes (BSP).
            t = threading.Thread(target=w1.push_pull, args=(0,))
            t.start()
            w0.push_pull(0)
            t.join()
            closed = time.monotonic()
            w1.close()
            # No wait: the coordinator dropped rank 1 within close(), not
            # after worker_timeout_ms (3 s here).
            status = self.client.status(job_id)
            self.assertLess(time.monotonic() - closed, 3.0)
            self.assertEqual(status["state"], "RUNNING")
            self.assertIn("left: after step 0 (the last counted), close()",
                          status["reason"])
            # Step 1's quorum is rank 0 alone now: it does not wait.
            w0.grads[:] = 1.0
            w0.push_pull(1)
            w0.report(step=2, finished=True)
            self.assertEqual(self.client.status(job_id)["state"], "SUCCEEDED")
        finally:
            w0.close()
            w1.close()

    def test_bad_requests_name_what_is_wrong(self):
        job_id, _ = self.client.submit(custom_spec("badreq"))
        with self.client.join(job_id) as w:
            with self.assertRaises(psclient.Error) as e:
                w.start("pull", 0, ["no/such"])
            self.assertIn("no/such", str(e.exception))
            self.assertEqual(e.exception.code, "NOT_FOUND")
            with self.assertRaises(psclient.Error) as e:
                w.start("shove", 0)
            self.assertIn("shove", str(e.exception))
            with self.assertRaises(psclient.ShapeError):
                w.start("pull", 0, [])
            with self.assertRaises(psclient.Error):
                w.wait(12345)
            w.close()
            w.close()  # idempotent
            with self.assertRaises(psclient.Error) as e:
                w.start("pull", 0)
            self.assertIn("closed", str(e.exception))

    def test_every_call_on_a_closed_worker_fails_at_once(self):
        """Issue 27: report() after close() waited and raised Timeout."""
        job_id, _ = self.client.submit(custom_spec("closedcalls"))
        w = self.client.join(job_id)
        h = w.start("pull", 0)
        w.close()
        calls = {"start": lambda: w.start("pull", 0),
                 "wait": lambda: w.wait(h),
                 "cancel": lambda: w.cancel(h),
                 "pull": lambda: w.pull(0),
                 "report": lambda: w.report(step=1)}
        for name, call in calls.items():
            start = time.monotonic()
            with self.assertRaises(psclient.Error, msg=name) as e:
                call()
            self.assertEqual(type(e.exception), psclient.Error, name)
            self.assertEqual(e.exception.code, "FAILED_PRECONDITION", name)
            self.assertIn(f"worker of job {job_id} is closed",
                          str(e.exception), name)
            self.assertLess(time.monotonic() - start, 1.0, name)

    def test_a_client_closes_and_is_a_context_manager(self):
        """Issue 27: Client had no close() nor `with`."""
        with psclient.connect(cluster=self.cluster.cluster_file) as c:
            self.assertEqual(c.coordinator, self.client.coordinator)
            c.jobs()
        calls = {"jobs": c.jobs, "coordinator": lambda: c.coordinator,
                 "status": lambda: c.status("job-000001"),
                 "submit": lambda: c.submit(custom_spec("never")),
                 "join": lambda: c.join("job-000001")}
        for name, call in calls.items():
            with self.assertRaises(psclient.Error, msg=name) as e:
                call()
            self.assertEqual(e.exception.code, "FAILED_PRECONDITION", name)
            self.assertIn("is closed", str(e.exception), name)
        c.close()  # idempotent

    def test_unmeasured_metrics_reach_the_job_store(self):
        """A report without a loss or train accuracy (NaN, as psclient.torch
        sends them) is stored by the coordinator's job store: before schema
        3 the store's NOT NULL refused the row and the report timed out."""
        job_id, _ = self.client.submit(custom_spec("unmeasured"))
        with self.client.join(job_id) as w:
            w.report(step=1)
            w.report(step=2, loss=0.5, finished=True)
        self.assertEqual(self.client.status(job_id)["state"], "SUCCEEDED")

    def test_cancelled_job_aborts_the_worker(self):
        job_id, _ = self.client.submit(custom_spec("cancelme"))
        with self.client.join(job_id) as w:
            w.pull(0)
            self.client.cancel(job_id)
            with self.assertRaises(psclient.JobAborted) as e:
                w.report(step=1)
            self.assertIn(job_id, str(e.exception))
            self.assertIsNotNone(w.aborted)


class NativeImportErrorTest(unittest.TestCase):
    def test_a_module_of_another_python_says_how_to_build_it(self):
        mine = "%d.%d" % sys.version_info[:2]
        for text in ("Python version mismatch: module was compiled for "
                     "Python 3.11, but the interpreter version is "
                     "incompatible: 3.12.1",
                     "/x/_native.so: undefined symbol: "
                     "_PyThreadState_UncheckedGet"):
            e = psclient.errors.native_import_error(ImportError(text))
            self.assertIn(f"python/build.sh --python={mine}", str(e))
            self.assertIn(text, str(e))
        other = ImportError("No module named 'numpy'")
        self.assertIs(psclient.errors.native_import_error(other), other)


class TokenTest(unittest.TestCase):
    """A cluster whose calls must carry a bearer token."""

    def test_token_from_the_cluster_file_or_the_caller(self):
        with LocalCluster(shards=1, token="s3cret-token") as cluster:
            c = psclient.connect(cluster=cluster.cluster_file)
            self.assertEqual(c.jobs(), [])
            address = cluster.address(0)
            with self.assertRaises(psclient.Error) as e:
                psclient.connect(coordinator=address, timeout_s=5.0)
            self.assertEqual(e.exception.code, "UNAUTHENTICATED")
            c = psclient.connect(coordinator=address, token="s3cret-token")
            self.assertEqual(c.coordinator, address)
            self.assertEqual(c.jobs(), [])


if __name__ == "__main__":
    unittest.main()
