#!/usr/bin/env bash
# What Prometheus metrics cost the demo job: configs/jobs/fashion_mlp.pbtxt
# on a local cluster (2 psd, 2 workerd, configs/local's settings on free
# ports) with metrics off and on, alternating, N pairs in the same run; "on"
# = every daemon serves /metrics and a scraper fetches all four every
# second (Prometheus's default is 15 s: a harsher load). Prints each run's
# samples/s and the medians (docs/OBSERVABILITY.md, "Metrics").
# With --trace=A:B, "on" is a trace window instead: `psctl trace` of steps
# [A, B) of the run's job (job-000001 on the fresh cluster), and its JSON's
# size is printed too (docs/OBSERVABILITY.md, "Timeline").
#
#   tools/bench_metrics.sh [--pairs=N] [--job=FILE] [--trace=A:B] [--no-build]
set -euo pipefail
cd "$(dirname "$0")/.."
PAIRS=3
JOB=configs/jobs/fashion_mlp.pbtxt
BUILD=1
TRACE=""
for arg in "$@"; do
  case $arg in
    --trace=*) TRACE=${arg#*=} ;;
    --pairs=*) PAIRS=${arg#*=} ;;
    --job=*) JOB=${arg#*=} ;;
    --no-build) BUILD=0 ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    *) echo "bench_metrics: unknown argument '$arg'" >&2; exit 2 ;;
  esac
done
if ((BUILD)); then
  bazel build -c opt //server:psd //worker:workerd //tools:psctl >/dev/null
fi
BIN=$(bazel info -c opt bazel-bin 2>/dev/null)
WORK=$(mktemp -d /tmp/ps-bench-metrics.XXXXXX)
PIDS=()
stop_all() {
  if ((${#PIDS[@]})); then
    kill -TERM "${PIDS[@]}" 2>/dev/null || true
    wait "${PIDS[@]}" 2>/dev/null || true
  fi
  PIDS=()
}
trap 'stop_all; rm -rf "$WORK"' EXIT

# One run; $1 = on|off. Prints samples/s.
run() {
  local mode=$1 dir=$WORK/$1.$RANDOM
  mkdir -p "$dir"
  printf 'shards { address_file: "s0.addr" }\nshards { address_file: "s1.addr" }\ncoordinator_shard: 0\n' \
    >"$dir/cluster.pbtxt"
  local metrics="" with_metrics=0
  [[ $mode == on && -z $TRACE ]] && with_metrics=1
  for i in 0 1; do
    ((with_metrics)) && metrics="metrics_address: \"127.0.0.1:0\" metrics_address_file: \"ms$i.addr\""
    printf 'cluster_file: "cluster.pbtxt"\nshard_id: %d\naddress_file: "s%d.addr"\nmemory_budget_bytes: 2147483648\n%s\n' \
      "$i" "$i" "$metrics" >"$dir/psd$i.pbtxt"
    "$BIN/server/psd" --config="$dir/psd$i.pbtxt" >"$dir/psd$i.log" 2>&1 &
    PIDS+=($!)
  done
  for i in 0 1; do
    ((with_metrics)) && metrics="metrics_address: \"127.0.0.1:0\" metrics_address_file: \"mw$i.addr\""
    printf 'cluster_file: "cluster.pbtxt"\nname: "worker%d"\ndevices: "cpu:0"\nheartbeat_interval_ms: 500\ndisable_overlap: true\n%s\n' \
      "$i" "$metrics" >"$dir/worker$i.pbtxt"
    "$BIN/worker/workerd" --config="$dir/worker$i.pbtxt" >"$dir/worker$i.log" 2>&1 &
    PIDS+=($!)
  done
  for f in s0 s1; do
    for _ in $(seq 300); do [[ -s $dir/$f.addr ]] && break; sleep 0.1; done
  done
  if ((with_metrics)); then
    (
      for _ in $(seq 50); do [[ -s $dir/mw1.addr ]] && break; sleep 0.1; done
      while true; do
        for f in ms0 ms1 mw0 mw1; do
          curl -s -o /dev/null "http://$(cat "$dir/$f.addr")/metrics" || true
        done
        sleep 1
      done
    ) &
    PIDS+=($!)
  fi
  local out
  "$BIN/tools/psctl" --cluster="$dir/cluster.pbtxt" submit "$JOB" --wait \
    --timeout=1800 >"$dir/submit.out" 2>&1 &
  local submitter=$!
  if [[ $mode == on && -n $TRACE ]]; then
    # The job is job-000001 on this fresh cluster: once it runs, psctl trace
    # sets the window and waits for the uploads.
    for _ in $(seq 300); do
      "$BIN/tools/psctl" --cluster="$dir/cluster.pbtxt" status job-000001 \
        2>/dev/null | grep -q RUNNING && break
      sleep 0.1
    done
    "$BIN/tools/psctl" --cluster="$dir/cluster.pbtxt" trace job-000001 \
      --steps="$TRACE" -o "$dir/trace.json" --timeout=600 >"$dir/trace.log" 2>&1 ||
      { echo "bench_metrics: psctl trace failed:" >&2; cat "$dir/trace.log" >&2; }
    echo "trace: $(stat -c %s "$dir/trace.json" 2>/dev/null || echo 0) bytes" >&2
    if [[ -n ${KEEP_TRACE:-} ]]; then cp "$dir/trace.json" "$KEEP_TRACE"; fi
  fi
  wait "$submitter" || true
  out=$(cat "$dir/submit.out")
  stop_all
  sed -n 's/.*samples_per_s=\([0-9.]*\).*/\1/p' <<<"$out" | tail -1
}

off=() on=()
for p in $(seq "$PAIRS"); do
  # Alternate which goes first.
  if ((p % 2)); then order=(off on); else order=(on off); fi
  for m in "${order[@]}"; do
    v=$(run "$m")
    echo "pair $p ${TRACE:+trace }${TRACE:-metrics} $m: samples/s $v"
    if [[ $m == on ]]; then on+=("$v"); else off+=("$v"); fi
  done
done
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
mo=$(median "${off[@]}") mn=$(median "${on[@]}")
awk -v a="$mo" -v b="$mn" 'BEGIN {printf "median samples/s: off %.0f, on %.0f (%+.2f%%)\n", a, b, 100*(b-a)/a}'
