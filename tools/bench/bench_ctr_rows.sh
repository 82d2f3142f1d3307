#!/usr/bin/env bash
# A CTR job at table scale (docs/SPARSE.md "A 55M-row CTR job"): a local
# cluster of SHARDS psd (4 by default) and 2 workerd, ports picked by the
# kernel, trains JOB (configs/jobs/ctr_synthetic_55m_rows.pbtxt: about 55M
# distinct ids) to the end with psctl's progress, then prints the job's
# summary, the table's rows and bytes per shard (`psctl stats`: B/row), and
# each psd's peak resident memory (VmHWM) with the peak per row held, the
# honest figure beside the tables' own accounting.
#
#   tools/bench/bench_ctr_rows.sh [JOB.pbtxt] [SHARDS=4] [BUDGET_GIB=6]
#
# WORKER_CONFIG="disable_overlap: true" (say) adds WorkerdConfig lines to
# both workers' configs.
#
# Needs the built binaries (bazel build --config=opt //server:psd
# //worker:workerd //tools/psctl:psctl; BIN=... to use another folder) and
# about 3 GB of memory per shard for the default job. Logs and configs stay
# in the printed folder.
set -euo pipefail
cd "$(dirname "$0")/../.."
source tools/lib/daemons.sh
source tools/lib/bench_cluster.sh
JOB=${1:-configs/jobs/ctr_synthetic_55m_rows.pbtxt}
SHARDS=${2:-4}
BUDGET_GIB=${3:-6}
for v in "$SHARDS" "$BUDGET_GIB"; do
  [[ $v =~ ^[1-9][0-9]*$ ]] || { echo "bench_ctr_rows: '$v' is not a positive whole number" >&2; exit 2; }
done
[[ -f $JOB ]] || { echo "bench_ctr_rows: no job file '$JOB'" >&2; exit 2; }
BIN=${BIN:-$(bazel info --config=opt bazel-bin 2>/dev/null)}
bench_binaries bench_ctr_rows "$BIN"
bench_dir bench_ctr_rows ps-ctr-rows

start_shards "$SHARDS" "memory_budget_bytes: $((BUDGET_GIB << 30))"
start_workers 2 "$(printf 'devices: "cpu:0"\nthreads_per_device: 1\nheartbeat_interval_ms: 500\n%s' "${WORKER_CONFIG:-}")"
PSCTL=("$BIN/tools/psctl/psctl" --cluster="$DIR/cluster.pbtxt" --connect-timeout=60)
wait_log_line 'registered with' 60 "$DIR"/worker{0,1}.log
start=$(date +%s.%N)
set +e
"${PSCTL[@]}" submit "$JOB" --wait --timeout=7200
rc=$?
set -e
end=$(date +%s.%N)
echo
echo "bench_ctr_rows: submit to end $(awk -v a="$start" -v b="$end" 'BEGIN{printf "%.1f", b - a}') s (rc $rc)"
"${PSCTL[@]}" stats | tee "$DIR/stats.txt"
rows=$(awk '$2 == "emb" && $3 == "all" {print $4}' "$DIR/stats.txt" | head -1)
total_kib=0
for ((i = 0; i < SHARDS; i++)); do
  hwm=$(awk '/^VmHWM:/ {print $2}' "/proc/${PSD_PIDS[$i]}/status")
  echo "bench_ctr_rows: psd$i peak RSS $((hwm / 1024)) MiB"
  total_kib=$((total_kib + hwm))
done
if [[ $rows =~ ^[0-9]+$ ]] && ((rows > 0)); then
  awk -v k="$total_kib" -v r="$rows" 'BEGIN{printf "bench_ctr_rows: %d rows; the shards peaked at %.1f GiB, %.1f B per row held (whole processes: the MLP, buffers and all)\n", r, k / 1048576, k * 1024 / r}'
else
  echo "bench_ctr_rows: no row count for table emb in psctl stats" >&2
fi
exit $rc
