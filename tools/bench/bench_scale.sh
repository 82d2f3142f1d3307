#!/usr/bin/env bash
# Elastic jobs, measured (docs/OPERATIONS.md "Elastic jobs"): the demo's MLP
# job (configs/jobs/fashion_mlp.pbtxt with max_workers: 4 and
# on_worker_failure: SHRINK) on a local cluster of 2 psd shards and 4
# workerd, ports picked by the kernel. It starts on 2 workers; once it has
# run GROW_AT_S seconds, `psctl scale JOB --workers=4` adds the 2 idle
# workers; AFTER_S seconds later the job's curve (psctl curves, CSV) is
# written and the job cancelled. Prints the timeline: every curve point
# around the command (the leader's reports, about one a second) with its
# elapsed time relative to the command, the steps/s between points and the
# samples/s they mean (steps/s x active workers x batch; the curve's own
# samples_per_s column is the leader's cumulative pace scaled by the active
# ranks, so it jumps with the count by construction), and the means over
# AFTER_S before and after.
#
#   tools/bench/bench_scale.sh [GROW_AT_S=20] [AFTER_S=20]
#
# Needs the built binaries (bazel build //server:psd //worker:workerd
# //tools/psctl:psctl) and Fashion-MNIST in /usr/share/datasets/fashion-mnist.
# Logs, configs and curves.csv stay in the printed folder.
set -euo pipefail
cd "$(dirname "$0")/../.."
source tools/lib/daemons.sh
source tools/lib/bench_cluster.sh
GROW_AT_S=${1:-20}
AFTER_S=${2:-20}
for v in "$GROW_AT_S" "$AFTER_S"; do
  [[ $v =~ ^[1-9][0-9]*$ ]] || { echo "bench_scale: '$v' is not a whole number of seconds" >&2; exit 2; }
done
BIN=$(bazel info bazel-bin 2>/dev/null)
bench_binaries bench_scale "$BIN"
bench_dir bench_scale ps-scale

start_shards 2
start_workers 4 "$(grep -v -e '^name:' -e '^cluster_file:' configs/local/worker0.pbtxt)"
PSCTL=("$BIN/tools/psctl/psctl" --cluster="$DIR/cluster.pbtxt" --connect-timeout=30)
# 100 epochs: long enough to run past the command whatever the machine.
{ grep -v '^num_workers' configs/jobs/fashion_mlp.pbtxt | sed 's/epochs: [0-9]*/epochs: 100/'
  echo 'num_workers: 2'
  echo 'max_workers: 4'
  echo 'on_worker_failure: SHRINK'; } >"$DIR/job.pbtxt"
# Every workerd registered: the job starts on the first 2, 2 stay idle.
wait_log_line 'registered with' 60 "$DIR"/worker{0,1,2,3}.log
JOB=$("${PSCTL[@]}" submit "$DIR/job.pbtxt" | grep -o 'job-[0-9]*' | head -1)
echo "bench_scale: $JOB submitted; scaling to 4 workers after ${GROW_AT_S} s of training"
json_field() { grep -o "\"$1\": [0-9.e+-]*" | head -1 | awk '{print $2}'; }
while :; do
  "${PSCTL[@]}" status "$JOB" | grep -q RUNNING || { echo "bench_scale: $JOB is not running" >&2; exit 1; }
  elapsed=$("${PSCTL[@]}" status "$JOB" --json | json_field elapsed_s)
  [[ -n $elapsed ]] && awk -v e="$elapsed" -v g="$GROW_AT_S" 'BEGIN{exit !(e >= g)}' && break
  sleep 0.2
done
"${PSCTL[@]}" scale "$JOB" --workers=4
at=$("${PSCTL[@]}" status "$JOB" --json | json_field elapsed_s)
echo "bench_scale: scale command at job elapsed_s=$at"
sleep "$AFTER_S"
"${PSCTL[@]}" status "$JOB"
"${PSCTL[@]}" curves "$JOB" -o "$DIR/curves.csv"
"${PSCTL[@]}" cancel "$JOB" >/dev/null
reached=$("${PSCTL[@]}" status "$JOB" --json | python3 -c 'import json,sys; s=json.load(sys.stdin)["scale"]; print(s["reached_s"] - s["requested_s"] if s["reached_s"] else -1)')
echo "bench_scale: 4 workers active $reached s after the command (-1: not reached)"
echo "bench_scale: timeline (t = elapsed_s - $at; steps/s from consecutive points; samples/s = steps/s x workers x batch 64)"
python3 - "$DIR/curves.csv" "$at" "$AFTER_S" "$reached" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
at, win, reached = float(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
before, after = [], []
prev = None
for r in rows:
    t, step = float(r["elapsed_s"]) - at, int(r["step"])
    if prev is not None and t > prev[0]:
        rate = (step - prev[1]) / (t - prev[0])
        # A point's interval ran on 4 workers once the scale was reached.
        workers = 4 if reached >= 0 and prev[0] >= reached else 2
        sps = rate * workers * 64
        if -win <= t <= win:
            print(f"  t={t:+7.2f} s  step={step:>6}  steps/s={rate:7.1f}  "
                  f"workers={workers}  samples/s={sps:8.0f}")
        if -win <= prev[0] and t < 0:
            before.append(sps)
        elif prev[0] >= 0 and t <= win:
            after.append(sps)
    prev = (t, step)
mean = lambda v: sum(v) / len(v) if v else float("nan")
print(f"bench_scale: mean samples/s {mean(before):.0f} in the {win:.0f} s before "
      f"the command, {mean(after):.0f} in the {win:.0f} s after")
PY
