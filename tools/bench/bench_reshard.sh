#!/usr/bin/env bash
# Live re-placement, measured (docs/OPERATIONS.md "Elastic jobs": psctl
# scale --shards): a BSP job on a local cluster of max(3, FROM, TO) psd
# shards and 2
# workerd, ports picked by the kernel, submitted on `shards: FROM`. Once it
# has run AT_S seconds, `psctl scale JOB --shards=TO`; AFTER_S seconds later
# the job's status (its "shards:" line: chunks and MB moved, the pause step,
# how long after the command the move was committed everywhere, and the
# pause: from the last shard reaching the pause step to the last commit)
# and its curve around the command (steps/s between the leader's reports)
# are printed, and the job cancelled.
#
#   tools/bench/bench_reshard.sh [JOB=mlp|lab100m|ctr] [FROM=2] [TO=3] [AT_S=15] [AFTER_S=15]
#
# mlp: configs/jobs/fashion_mlp.pbtxt (the demo's job, 100 epochs);
# ctr: configs/jobs/ctr_synthetic.pbtxt (a sparse table and an MLP; its
# rows move with the chunks; a test set of 100k examples);
# lab100m: the lab workload with 100M parameters (400 MB; 3 -> 4 shards moves
# about a quarter of it), plain SGD, 5 ms of compute per step.
# Needs the built binaries (bazel build -c opt //server:psd //worker:workerd
# //tools/psctl:psctl) and, for mlp, Fashion-MNIST in
# /usr/share/datasets/fashion-mnist. Logs and curves.csv stay in the printed
# folder.
set -euo pipefail
cd "$(dirname "$0")/../.."
source tools/lib/daemons.sh
source tools/lib/bench_cluster.sh
JOB_KIND=${1:-mlp}
FROM=${2:-2}
TO=${3:-3}
AT_S=${4:-15}
AFTER_S=${5:-15}
for v in "$FROM" "$TO" "$AT_S" "$AFTER_S"; do
  [[ $v =~ ^[1-9][0-9]*$ ]] || { echo "bench_reshard: '$v' is not a whole number" >&2; exit 2; }
done
BIN=$(bazel info bazel-bin 2>/dev/null)
bench_binaries bench_reshard "$BIN"
bench_dir bench_reshard ps-reshard

NSHARDS=$(( FROM > TO ? FROM : TO )); (( NSHARDS < 3 )) && NSHARDS=3
start_shards "$NSHARDS"
start_workers 2 "$(grep -v -e '^name:' -e '^cluster_file:' configs/local/worker0.pbtxt)"
PSCTL=("$BIN/tools/psctl/psctl" --cluster="$DIR/cluster.pbtxt" --connect-timeout=30)
case $JOB_KIND in
  mlp) sed 's/epochs: [0-9]*/epochs: 100/' configs/jobs/fashion_mlp.pbtxt >"$DIR/job.pbtxt" ;;
  lab100m)
    sed -e 's/parameters: 10000000/parameters: 100000000/' \
        -e 's/steps_per_epoch: 50/steps_per_epoch: 100000/' -e 's/^num_workers: 4/num_workers: 2/' \
        configs/jobs/lab_10m.pbtxt >"$DIR/job.pbtxt" ;;
  ctr) sed 's/synthetic_test: [0-9]*/synthetic_test: 100000/' configs/jobs/ctr_synthetic.pbtxt >"$DIR/job.pbtxt" ;;
  *) echo "bench_reshard: JOB is mlp, lab100m or ctr, not '$JOB_KIND'" >&2; exit 2 ;;
esac
echo "shards: $FROM" >>"$DIR/job.pbtxt"
wait_log_line 'registered with' 60 "$DIR"/worker{0,1}.log
JOB=$("${PSCTL[@]}" submit "$DIR/job.pbtxt" | grep -o 'job-[0-9]*' | head -1)
echo "bench_reshard: $JOB ($JOB_KIND) on $FROM shards; re-placing on $TO after ${AT_S} s of training"
json_field() { grep -o "\"$1\": [0-9.e+-]*" | head -1 | awk '{print $2}'; }
while :; do
  "${PSCTL[@]}" status "$JOB" | grep -q RUNNING || { echo "bench_reshard: $JOB is not running" >&2; exit 1; }
  elapsed=$("${PSCTL[@]}" status "$JOB" --json | json_field elapsed_s)
  [[ -n $elapsed ]] && awk -v e="$elapsed" -v g="$AT_S" 'BEGIN{exit !(e >= g)}' && break
  sleep 0.2
done
"${PSCTL[@]}" scale "$JOB" --shards="$TO"
at=$("${PSCTL[@]}" status "$JOB" --json | json_field elapsed_s)
echo "bench_reshard: scale command at job elapsed_s=$at"
sleep "$AFTER_S"
"${PSCTL[@]}" status "$JOB"
"${PSCTL[@]}" curves "$JOB" -o "$DIR/curves.csv"
"${PSCTL[@]}" cancel "$JOB" >/dev/null
grep -h 're-placed\|committed placement\|prepared epoch' "$DIR"/psd*.log "$DIR"/worker*.log | sed 's/^/  /' || true
echo "bench_reshard: timeline (t = elapsed_s - $at; steps/s from consecutive points)"
python3 - "$DIR/curves.csv" "$at" "$AFTER_S" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
at, win = float(sys.argv[2]), float(sys.argv[3])
before, after, prev = [], [], None
for r in rows:
    t, step = float(r["elapsed_s"]) - at, int(r["step"])
    if prev is not None and t > prev[0]:
        rate = (step - prev[1]) / (t - prev[0])
        if -win <= t <= win:
            print(f"  t={t:+7.2f} s  step={step:>7}  steps/s={rate:8.1f}")
        if -win <= prev[0] and t < 0:
            before.append(rate)
        elif prev[0] >= 0 and t <= win:
            after.append(rate)
    prev = (t, step)
mean = lambda v: sum(v) / len(v) if v else float("nan")
print(f"bench_reshard: mean steps/s {mean(before):.1f} in the {win:.0f} s before "
      f"the command, {mean(after):.1f} in the {win:.0f} s after")
PY
