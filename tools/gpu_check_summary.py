#!/usr/bin/env python3
"""The summary of tools/gpu_check.sh --out: reads the run's folder WORK and
writes OUTDIR/gpu_check.json and OUTDIR/gpu_check.md, prints the latter, and
exits 0 when every test, the benchmark and every job passed.

  gpu_check_summary.py WORK OUTDIR SOURCE COMMIT SECONDS

WORK holds: MANIFEST (the pack's), tests.tsv, bench.json and bench.rc, jobs
(one "name model job_file edit metric target lr timeout overlap" line per
job),
job_NAME.rc, job_NAME.line (psctl's last job= line), peer_MODEL.json
(PyTorch's RESULT line), env, missing_libs, gpu and psclient.json
(tools/lib/gpu_psclient.sh: run=no and a reason, or the torch_cuda_test and
CNN example figures).
"""

import json
import os
import re
import sys


def read(work, name, default=""):
    p = os.path.join(work, name)
    return open(p).read().strip() if os.path.exists(p) else default


def key_values(text):
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def tests_of(work):
    tests = []
    for line in read(work, "tests.tsv").splitlines():
        n, st, s, rc, p, sk, f = line.split("\t")
        tests.append({"name": n, "status": st, "seconds": float(s), "rc": int(rc),
                      "passed": int(p), "skipped": int(sk), "failed": int(f)})
    return tests


def number(fields, key):
    try:
        return float(fields[key])
    except (KeyError, ValueError):
        return None


def job_of(work, spec):
    name, model, job_file, edit, metric, target, _lr, _limit, overlap = spec.split()
    line = read(work, f"job_{name}.line")
    fields = dict(re.findall(r'(\w+)=("[^"]*"|\S+)', line))
    value = number(fields, metric)
    job_text = job_file if edit == "-" else f"{job_file} (sed '{edit}')"
    job = {"name": name, "job": f"{job_text}, 2 workerd on gpu:0, BSP, overlap {overlap}",
           "rc": int(read(work, f"job_{name}.rc", "-1")),
           "state": fields.get("state", "none"), "metric": metric, "value": value,
           "target": float(target), "wall_s": number(fields, "wall_s"),
           "samples_per_s": number(fields, "samples_per_s"), "summary": line}
    job["pass"] = (job["state"] == "SUCCEEDED" and value is not None
                   and value >= float(target))
    try:
        peer = None if model == "-" else json.loads(read(work, f"peer_{model}.json", "null"))
    except ValueError:
        peer = None
    job["torch_peer"] = peer
    if peer and job["samples_per_s"]:
        job["ratio_to_torch"] = round(job["samples_per_s"] / peer["samples_per_s"], 3)
    return job


def psclient_of(work, peer):
    """psclient.torch with a CUDA model (step 5): passes when not run (the
    reason says why) or when the test passed and the example reached its
    target."""
    try:
        p = json.loads(read(work, "psclient.json", "null")) or {}
    except ValueError:
        p = {}
    if p.get("run") != "yes":
        return {"run": False, "pass": True,
                "reason": p.get("reason", "not run: no psclient.json")}
    fields = dict(re.findall(r"(\w+) (\S+)", p.get("last_epoch", "")))
    r = {"run": True, "python": p.get("python"),
         "test_rc": int(p.get("test_rc", -1)), "test_summary": p.get("test_summary", ""),
         "max_param_diff": number(p, "max_param_diff"),
         "example_rc": int(p.get("example_rc", -1)), "epochs": int(p.get("epochs", 0)),
         "test_accuracy": number(fields, "test_accuracy"),
         "samples_per_s": number(fields, "samples_per_s"),
         "target": float(p.get("target", 1))}
    r["pass"] = (r["test_rc"] == 0 and r["test_summary"].startswith("OK")
                 and "skipped" not in r["test_summary"] and r["example_rc"] == 0
                 and r["test_accuracy"] is not None
                 and r["test_accuracy"] >= r["target"])
    if peer and r["samples_per_s"]:
        r["ratio_to_torch"] = round(r["samples_per_s"] / peer["samples_per_s"], 3)
    return r


def psclient_markdown(p):
    if not p["run"]:
        return [p["reason"], ""]
    return [f"python {p['python']}: python/torch_cuda_test.py rc {p['test_rc']} "
            f"({p['test_summary']}; largest CPU-GPU parameter difference "
            f"{p['max_param_diff']}); examples/torch_fmnist_cnn.py --device=cuda, "
            f"2 workers, {p['epochs']} epochs: rc {p['example_rc']}, test accuracy "
            f"{fmt(p['test_accuracy'])} (>= {p['target']}), "
            f"{fmt(p['samples_per_s'], '.0f')} samples/s "
            f"({p.get('ratio_to_torch', '-')} of PyTorch's CNN above): "
            f"{'pass' if p['pass'] else 'FAIL'}", ""]


def fmt(x, spec=".4f"):
    return "-" if x is None else format(x, spec)


def markdown(summary, source, secs):
    tests, bench = summary["tests"], summary["benchmark"]
    md = [f"# GPU check: {'PASS' if summary['pass'] else 'FAIL'}", "",
          f"- GPU: {summary['gpu']}", f"- commit: {summary['commit']}",
          f"- binaries: {source}; NCCL: {summary['nccl']}; run took {secs} s", "",
          "## gpu-tagged tests", "",
          "| test | status | seconds | passed | skipped | failed |",
          "| --- | --- | ---: | ---: | ---: | ---: |"]
    md += [f"| {t['name']} | {t['status']} | {t['seconds']:.1f} | {t['passed']} "
           f"| {t['skipped']} | {t['failed']} |" for t in tests]
    md += ["", f"## Benchmark (rc {summary['benchmark_rc']})", ""]
    if isinstance(bench, dict) and ("ops" in bench or "models" in bench):
        md += ["| group | what | max rel. diff | tolerance | pass |",
               "| --- | --- | ---: | ---: | --- |"]
        for g in ("ops", "models"):
            md += [f"| {g} | {c['name']} | {c['max_rel_diff']} | {c['tolerance']} "
                   f"| {c['pass']} |" for c in bench.get(g, [])]
        md += ["", "| GEMM | m x n x k | backend GFLOP/s | cuBLAS GFLOP/s | ratio | pass |",
               "| --- | --- | ---: | ---: | ---: | --- |"]
        md += [f"| {g['name']} | {g['m']}x{g['n']}x{g['k']} | {g['backend_gflops']} "
               f"| {g['cublas_gflops']} | {g['ratio']} | {g['pass']} |"
               for g in bench.get("gemm", [])]
        md += ["", "| step, batch 64 | parameters | host in/out ms (staged) "
               "| pinned in/out ms | resident ms |", "| --- | ---: | ---: | ---: | ---: |"]
        md += [f"| {t['model']} | {t['parameters']} | {t['host_io_ms']} "
               f"| {t.get('pinned_io_ms', '-')} | {t['resident_ms']} |"
               for t in bench.get("steps", [])]
    else:
        md += ["```", json.dumps(bench), "```"]
    md += ["", "## 2-worker BSP jobs on gpu:0, against PyTorch on the same GPU", "",
           "| job | state | metric (target) | samples/s | wall s "
           "| PyTorch samples/s | PyTorch accuracy | ratio | pass |",
           "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | --- |"]
    for j in summary["bsp_jobs"]:
        peer = j["torch_peer"] or {}
        md.append(
            f"| {j['name']} | {j['state']} | {j['metric']} {fmt(j['value'])} (>= {j['target']}) "
            f"| {fmt(j['samples_per_s'], '.0f')} | {fmt(j['wall_s'], '.2f')} "
            f"| {fmt(peer.get('samples_per_s'), '.0f')} "
            f"| {fmt(peer.get('test_accuracy'))} | {j.get('ratio_to_torch', '-')} "
            f"| {'pass' if j['pass'] else 'FAIL'} |")
    md += ["", "PyTorch: tools/bench/torch_peer.py --mode single --device cuda, "
           "batch 128 (the jobs' global batch), 10 epochs; its ratio does not "
           "decide pass.", "", "## psclient.torch with a CUDA model", ""]
    md += psclient_markdown(summary["psclient_torch_cuda"])
    return "\n".join(md)


def main():
    work, out, source, tree_commit, secs = sys.argv[1:6]
    manifest = key_values(read(work, "MANIFEST"))
    tests = tests_of(work)
    try:
        bench = json.loads(read(work, "bench.json", "null"))
    except ValueError:
        bench = {"error": "unreadable output", "raw": read(work, "bench.json")[:2000]}
    bench_rc = int(read(work, "bench.rc", "-1"))
    jobs = [job_of(work, spec) for spec in read(work, "jobs").splitlines()]
    bench_pass = bench_rc == 0 and isinstance(bench, dict) and bench.get("pass") is True
    env = key_values(read(work, "env"))
    try:
        cnn_peer = json.loads(read(work, "peer_cnn.json", "null"))
    except ValueError:
        cnn_peer = None
    psclient = psclient_of(work, cnn_peer)
    summary = {
        # The pack's commit names the binaries; the tree's may be a stale
        # copy's (a device machine's working tree need not carry .git's HEAD).
        "gpu": read(work, "gpu"), "commit": manifest.get("commit") or tree_commit or "unknown",
        "pack": {k: manifest.get(k) for k in ("commit", "dirty", "built", "glibc")},
        "binaries": source, "nccl": env.get("nccl"),
        "compat_libs": env.get("compat_libs", "not used"),
        "missing_libs": read(work, "missing_libs").splitlines(),
        "tests": tests, "benchmark": bench, "benchmark_rc": bench_rc, "bsp_jobs": jobs,
        "psclient_torch_cuda": psclient, "seconds": int(secs),
        "pass": (bool(tests) and all(t["status"] == "pass" for t in tests)
                 and bench_pass and bool(jobs) and all(j["pass"] for j in jobs)
                 and psclient["pass"]),
    }
    with open(os.path.join(out, "gpu_check.json"), "w") as f:
        json.dump(summary, f, indent=2)
        f.write("\n")
    md = markdown(summary, source, secs)
    with open(os.path.join(out, "gpu_check.md"), "w") as f:
        f.write(md)
    print(md)
    return 0 if summary["pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
