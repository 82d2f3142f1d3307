#!/usr/bin/env bash
# What Prometheus metrics and step traces cost the demo job
# (configs/jobs/fashion_mlp.pbtxt) on a local cluster: 2 psd and 2 workerd,
# configs/local's settings on free ports. Runs with the feature off and on
# alternate, N pairs in the same run; each run is a fresh cluster. "On":
#   --on=metrics  every daemon serves /metrics and a scraper (one python3
#                 process) fetches all four every second (Prometheus's
#                 default is every 15 s: harsher);
#   --on=trace    `psctl trace` of steps A:B of the run's job (the window);
#   --on=both     both at once;
#   --on=idle     every daemon serves /metrics, psd 0 the status page, and
#                 tools/bench/http_idle_bench.py holds 500 idle connections
#                 to each of the five (reopened as the servers close them)
#                 while probing them in turn, 10 GETs a second (issue 27:
#                 idle clients must not slow training by more than 5%).
# Each run prints three figures:
#   job       samples/s of the whole job (its final report);
#   window    samples/s over steps [A, B) only, from the job's curve
#             (psctl curves: the leader's reports, one a second), the steps
#             a trace records;
#   cpu       CPU time of the four daemons per step, in microseconds
#             (utime + stime from /proc), the cost with the noise of a
#             shared machine's scheduling taken out.
# With --pin (default) psd i and workerd i run on core i (taskset), so both
# modes see the same placement; --no-pin leaves it to the scheduler.
# With --perf, every run is also sampled by `perf record -a` and a fourth
# figure is the share of the machine's busy CPU samples in the feature's
# code: symbols of ps::*Trace* / ps::*Metric* / prometheus::, the clock
# reads, and the helper processes (psctl for a trace, the scraper);
# the off runs give the baseline of the same symbols (the clock, the
# submitting psctl), so on - off is what the feature costs.
# Then the medians and each pair's on/off ratio (docs/OBSERVABILITY.md).
#
#   tools/bench/bench_metrics.sh [--on=metrics|trace|both|idle] [--pairs=N] [--job=FILE]
#                          [--steps=A:B] [--no-pin] [--perf] [--no-build]
set -euo pipefail
cd "$(dirname "$0")/../.."
PAIRS=5
JOB=configs/jobs/fashion_mlp.pbtxt
BUILD=1
ON=metrics
STEPS=1000:2000
PIN=1
PERF=0
for arg in "$@"; do
  case $arg in
    --on=metrics | --on=trace | --on=both | --on=idle) ON=${arg#*=} ;;
    --steps=*:*) STEPS=${arg#*=} ;;
    --pairs=*) PAIRS=${arg#*=} ;;
    --job=*) JOB=${arg#*=} ;;
    --pin) PIN=1 ;;
    --no-pin) PIN=0 ;;
    --perf) PERF=1 ;;
    --no-build) BUILD=0 ;;
    -h | --help) sed -n '2,37p' "$0"; exit 0 ;;
    *) echo "bench_metrics: unknown argument '$arg'" >&2; exit 2 ;;
  esac
done
A=${STEPS%%:*} B=${STEPS##*:}
# Samples per step: the batch of every worker.
PER_STEP=$(($(sed -n 's/.*batch_size: *\([0-9]*\).*/\1/p' "$JOB" | head -1) *
  $(sed -n 's/^num_workers: *\([0-9]*\).*/\1/p' "$JOB" | head -1)))
[[ $ON == trace || $ON == both ]] && TRACE=1 || TRACE=0
[[ $ON != trace ]] && METRICS=1 || METRICS=0
[[ $ON == idle ]] && IDLE=1 || IDLE=0
# 500 idle connections to each of five servers: 2500 sockets in the holder,
# 1000 in psd 0.
((IDLE)) && { ulimit -n 8192 2>/dev/null || ulimit -n "$(ulimit -Hn)"; }
if ((BUILD)); then
  bazel build -c opt //server:psd //worker:workerd //tools/psctl:psctl >/dev/null
fi
BIN=$(bazel info -c opt bazel-bin 2>/dev/null)
HZ=$(getconf CLK_TCK)
WORK=$(mktemp -d /tmp/ps-bench-metrics.XXXXXX)
DAEMONS=() HELPERS=()
stop_all() {
  local p
  for p in "${HELPERS[@]}" "${DAEMONS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${HELPERS[@]}" "${DAEMONS[@]}"; do wait "$p" 2>/dev/null || true; done
  DAEMONS=() HELPERS=()
}
trap 'stop_all; rm -rf "$WORK"' EXIT

# Starts "$@" on core $1 (with --pin) in the background.
start_on() {
  local core=$1
  shift
  if ((PIN)); then taskset -c "$core" "$@" & else "$@" & fi
}

# Percent of the busy (non-idle) CPU samples in perf data $1 that are the
# feature's: its symbols, clock reads, helper processes.
feature_share() {
  perf report -i "$1" --no-children -F sample,comm,sym --stdio \
    --field-separator=';' 2>/dev/null | grep -v '^#' | awk -F';' -v on="$ON" '
    NF < 3 { next }
    { n = $1 + 0; comm = $2; sym = $3 }
    comm ~ /^swapper/ { next }
    { busy += n }
    sym ~ /GetCurrentTimeNanos|clock_gettime/ { mine += n; next }
    on != "metrics" && (comm ~ /^psctl/ ||
      (sym ~ /ps::[A-Za-z_:]*Trac/ && sym !~ /CallbackMethod|grpc_core/)) { mine += n; next }
    on != "trace" && (comm ~ /^python3/ || sym ~ /ps::[A-Za-z_:]*Metric|prometheus::/) { mine += n; next }
    END { printf "%.3f\n", (busy > 0 ? 100 * mine / busy : 0) }'
}

# One run; $1 = on|off. Prints "JOB_SAMPLES_S WINDOW_SAMPLES_S CPU_US_PER_STEP
# [PERF_SHARE_PERCENT]".
run() {
  local mode=$1 dir=$WORK/$1.$RANDOM i f metrics=""
  mkdir -p "$dir"
  local psctl=("$BIN/tools/psctl/psctl" --cluster="$dir/cluster.pbtxt")
  printf 'shards { address_file: "s0.addr" }\nshards { address_file: "s1.addr" }\ncoordinator_shard: 0\n' \
    >"$dir/cluster.pbtxt"
  for i in 0 1; do
    [[ $mode == on ]] && ((METRICS)) &&
      metrics="metrics_address: \"127.0.0.1:0\" metrics_address_file: \"ms$i.addr\""
    [[ $mode == on ]] && ((IDLE)) && ((i == 0)) &&
      metrics+=" status_address: \"127.0.0.1:0\" status_address_file: \"status.addr\""
    printf 'cluster_file: "cluster.pbtxt"\nshard_id: %d\naddress_file: "s%d.addr"\nmemory_budget_bytes: 2147483648\n%s\n' \
      "$i" "$i" "$metrics" >"$dir/psd$i.pbtxt"
    start_on "$i" "$BIN/server/psd" --config="$dir/psd$i.pbtxt" >"$dir/psd$i.log" 2>&1
    DAEMONS+=($!)
  done
  for i in 0 1; do
    [[ $mode == on ]] && ((METRICS)) &&
      metrics="metrics_address: \"127.0.0.1:0\" metrics_address_file: \"mw$i.addr\""
    printf 'cluster_file: "cluster.pbtxt"\nname: "worker%d"\ndevices: "cpu:0"\nheartbeat_interval_ms: 500\ndisable_overlap: true\n%s\n' \
      "$i" "$metrics" >"$dir/worker$i.pbtxt"
    start_on "$i" "$BIN/worker/workerd" --config="$dir/worker$i.pbtxt" >"$dir/worker$i.log" 2>&1
    DAEMONS+=($!)
  done
  for f in s0 s1; do
    for _ in $(seq 300); do [[ -s $dir/$f.addr ]] && break; sleep 0.1; done
  done
  if [[ $mode == on ]] && ((METRICS)); then
    local urls=() f
    for f in ms0 ms1 mw0 mw1; do
      for _ in $(seq 50); do [[ -s $dir/$f.addr ]] && break; sleep 0.1; done
      urls+=("http://$(cat "$dir/$f.addr")/metrics")
    done
    if ((IDLE)); then
      for _ in $(seq 50); do [[ -s $dir/status.addr ]] && break; sleep 0.1; done
      urls+=("http://$(cat "$dir/status.addr")/api/jobs")
      python3 tools/bench/http_idle_bench.py --idle 500 --interval-ms 100 \
        --until-signal "${urls[@]/#/--url=}" >"$dir/idle.out" 2>&1 &
      HELPERS+=($!)
      for _ in $(seq 300); do grep -q '^holding' "$dir/idle.out" && break; sleep 0.1; done
      grep -q '^holding' "$dir/idle.out" ||
        { echo "bench_metrics: the idle holder did not start:" >&2; cat "$dir/idle.out" >&2; }
    else
    # One process that stays up, as Prometheus does, fetching the four every
    # second.
    python3 -c '
import sys, time, urllib.request
while True:
    for url in sys.argv[1:]:
        try:
            urllib.request.urlopen(url, timeout=5).read()
        except OSError:
            pass
    time.sleep(1)
' "${urls[@]}" &
    HELPERS+=($!)
    fi
  fi
  local perf=()
  ((PERF)) && perf=(perf record -q -a -F 999 -o "$dir/perf.data" --)
  "${perf[@]}" "${psctl[@]}" submit "$JOB" --wait --timeout=1800 >"$dir/submit.out" 2>&1 &
  local submitter=$!
  if [[ $mode == on ]] && ((TRACE)); then
    # The job is job-000001 on this fresh cluster: once it runs, psctl trace
    # sets the window and waits for the uploads.
    for _ in $(seq 300); do
      "${psctl[@]}" status job-000001 2>/dev/null | grep -q RUNNING && break
      sleep 0.1
    done
    "${psctl[@]}" trace job-000001 --steps="$A:$B" -o "$dir/trace.json" \
      --timeout=600 >"$dir/trace.log" 2>&1 ||
      { echo "bench_metrics: psctl trace failed:" >&2; cat "$dir/trace.log" >&2; }
    echo "trace: $(stat -c %s "$dir/trace.json" 2>/dev/null || echo 0) bytes" >&2
    if [[ -n ${KEEP_TRACE:-} ]]; then cp "$dir/trace.json" "$KEEP_TRACE"; fi
  fi
  wait "$submitter" || { echo "bench_metrics: the job failed:" >&2; cat "$dir/submit.out" >&2; }
  local ticks=0 t
  for i in "${DAEMONS[@]}"; do
    t=$(awk '{print $14 + $15}' "/proc/$i/stat")
    ticks=$((ticks + t))
  done
  "${psctl[@]}" curves job-000001 -o "$dir/curves.csv" >/dev/null
  stop_all
  if [[ $mode == on ]] && ((IDLE)); then
    # What the holder saw: connections held at the end, probe latencies.
    grep -v '^\[' "$dir/idle.out" | grep -v '^holding' | sed 's/^/  idle: /' >&2
  fi
  local share=""
  ((PERF)) && share=$(feature_share "$dir/perf.data")
  local job_rate
  job_rate=$(sed -n 's/.*samples_per_s=\([0-9.]*\).*/\1/p' "$dir/submit.out" | tail -1)
  # Window rate: between the first report at or after step A and the last at
  # or before step B.
  awk -F, -v a="$A" -v b="$B" -v ticks="$ticks" -v hz="$HZ" -v job="$job_rate" \
    -v per_step="$PER_STEP" -v share="$share" '
    NR == 1 { next }
    { step = $3; el = $12
      if (step >= a && s1 == "") { s1 = step; e1 = el }
      if (step <= b) { s2 = step; e2 = el }
      last = step }
    END {
      w = (s2 > s1 && e2 > e1) ? per_step * (s2 - s1) / (e2 - e1) : 0
      printf "%.0f %.0f %.1f %s\n", job, w, 1e6 * ticks / hz / last, share
    }' "$dir/curves.csv"
}

declare -a job_off job_on win_off win_on cpu_off cpu_on perf_off perf_on
for p in $(seq "$PAIRS"); do
  # Alternate which goes first.
  if ((p % 2)); then order=(off on); else order=(on off); fi
  for m in "${order[@]}"; do
    read -r jr wr cpu share < <(run "$m")
    printf 'pair %d %s %-3s: job %s samples/s, window %s samples/s, cpu %s us/step%s\n' \
      "$p" "$ON" "$m" "$jr" "$wr" "$cpu" "${share:+, perf $share% of busy CPU}"
    if [[ $m == on ]]; then
      job_on+=("$jr") win_on+=("$wr") cpu_on+=("$cpu") perf_on+=("$share")
    else
      job_off+=("$jr") win_off+=("$wr") cpu_off+=("$cpu") perf_off+=("$share")
    fi
  done
done
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
summary() {  # name, then off values, "--", on values
  local name=$1 off=() on=() r=() i
  shift
  while [[ $1 != -- ]]; do off+=("$1"); shift; done
  shift
  on=("$@")
  for i in "${!off[@]}"; do r+=("$(awk -v a="${off[$i]}" -v b="${on[$i]}" 'BEGIN {printf "%.3f", b/a}')"); done
  awk -v n="$name" -v a="$(median "${off[@]}")" -v b="$(median "${on[@]}")" \
    -v r="${r[*]}" -v m="$(median "${r[@]}")" \
    'BEGIN {printf "%-6s median off %.1f, on %.1f (%+.2f%%); on/off by pair: %s (median %s)\n", n, a, b, 100*(b-a)/a, r, m}'
}
summary job "${job_off[@]}" -- "${job_on[@]}"
summary window "${win_off[@]}" -- "${win_on[@]}"
summary cpu "${cpu_off[@]}" -- "${cpu_on[@]}"
if ((PERF)); then
  awk -v a="$(median "${perf_off[@]}")" -v b="$(median "${perf_on[@]}")" \
    'BEGIN {printf "perf   median share of busy CPU in the feature'"'"'s code: off %.3f%%, on %.3f%% (on - off %.3f%%)\n", a, b, b - a}'
fi
