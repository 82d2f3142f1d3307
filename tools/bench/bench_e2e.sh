#!/usr/bin/env bash
# End-to-end training benchmark: this parameter server against PyTorch, the
# same MLP (784-256-128-10), data, init, optimizer and epochs (GitHub issue 6).
#
#   tools/bench/bench_e2e.sh [--epochs=E] [--batches="64 256"] [--rows="a b c d e"]
#                      [--lr64=0.025] [--lr256=0.025] [--target=0.85]
#                      [--partition-bytes=N] [--row-timeout=S] [--repeat=N] [--seed=S]
#                      [--json=FILE] [--logs=DIR] [--no-build] [--output-base=DIR]
#                      [--psd-extra=TEXT] [--workerd-extra=TEXT]
#                      [--daemon-env=NAME=VALUE]... [--nice=N]
#                      [--torch-blas-threads=N] [--worker-cores="0 1"]
#                      [--psd-cores="2 3"] [--model=mlp|cnn] [--steps=N]
#
# --model=cnn runs every row on the built-in CNN of
# configs/jobs/fashion_cnn.pbtxt instead (tools/bench/torch_peer.py --model cnn
# for rows d and e). --steps=N caps each epoch at N steps for a fixed-step
# throughput run: the job trains on the first 2BN images
# (data.max_train_examples; rows b and e: N steps of B per worker) and
# PyTorch gets --steps-per-epoch N. docs/BENCHMARKS.md, "Built-in CNN".
# The environment passes to every process: where workerd warns that OpenBLAS
# runs kernels below the CPU (CpuBackend::BlasCoreAdvice), run this script
# with the OPENBLAS_CORETYPE it names; Debian's torch then gets the same
# kernels for its Linear layers.
#
# Rows, for each B in --batches (B = examples per compute replica per step,
# so every row trains on a GLOBAL batch of 2B per step and takes the same
# number of steps per epoch, floor(30000 / B)):
#   a  this system: 1 workerd with devices "cpu:0","cpu:1" (1 BLAS thread
#      each), job batch_size 2B split across them; 2 psd shards; BSP.
#   b  this system: 2 workerd x 1 device, job batch_size B each; 2 shards; BSP.
#   c  as b, ASP (each push applied on arrival: 2x the updates per epoch, each
#      from B examples).
#   d  PyTorch, one process, torch.set_num_threads(2), batch 2B.
#   e  PyTorch DistributedDataParallel, gloo on 127.0.0.1, 2 processes x 1
#      thread, batch B each (gradients averaged: global batch 2B).
#   (d, e: OpenBLAS, which Debian's torch runs Linear on, gets the same
#   thread count as torch, unless --torch-blas-threads=N; 0 leaves
#   OpenBLAS's own default of one busy-waiting thread per core per process,
#   which is sometimes faster for DDP here; see tools/bench/torch_peer.py.)
# Pinning: every process runs under `taskset -c`, the same cores for the
# same role in every row. Compute: core W0 runs worker 0 (rows b, c) and
# DDP rank 0 (e), core W1 worker 1 and rank 1; the one process of rows a
# (workerd, 2 devices) and d (PyTorch, 2 threads) gets W0,W1. psd shard i
# runs on core Pi, psctl on P0,P1. --worker-cores (default: the first two
# cores this script may use) and --psd-cores (default: the next two when
# there are 4 or more, else the worker cores again, shared as on any
# 2-core machine) pick them.
# Every row: SGD momentum 0.9 with the SAME lr for a given B (--lr64,
# --lr256; other B use --lr256), seed 42 (--seed), test accuracy after every
# epoch.
# The default lr 0.025 is the largest of {0.1, 0.05, 0.025} at which ASP (c)
# still trains: at 0.05 its momentum plus staleness stall it near 0.65 test
# accuracy after 3 epochs at B=64, while BSP and PyTorch reach ~0.875 at
# 0.025 after 5 epochs at both batch sizes.
#
# Columns: samples/s = examples trained / step-loop time (evaluation
# excluded; for our rows the trainer's own figure from rank 0, as `psctl`
# prints it); "s to 0.85" = wall time from the first step to the end of the
# first evaluation reaching --target (evaluations included; "-" = never);
# test acc = after the last epoch; vs (e) = samples/s / row e's at the same
# B; psd / workerd cpu s = CPU seconds those processes used (from /proc,
# start-up and data loading included), to see what bounds each figure;
# other load: below. The JSON also has the job's wall time (PyTorch: process
# start to exit), rank 0's data/compute/comm split and every evaluation.
#
# Our rows run the real daemons from `bazel build --config=opt` with configs
# written into a temporary folder (port 0 + address files, as
# tests/local_cluster.cc does), submit with `psctl submit --wait` and parse
# its summary line; the per-epoch accuracy and time come from rank 0's
# "eval ..." log lines (worker/trainer/trainer.cc). Each row starts a fresh
# cluster and stops it before the next row. Every process this script starts
# is stopped on exit, failure or Ctrl-C; each row is bounded by --row-timeout
# (default 900 s). Output: a plain table, the same as Markdown (for
# docs/BENCHMARKS.md), and with --json=FILE one JSON object per row and run.
# --repeat=N runs every row N times, interleaved (all rows, then again);
# every column is the median of the runs with their spread [min-max] (no
# single run is singled out); vs (e) is the median of each run's ratio to
# row e of the same run.
# --psd-extra / --workerd-extra append text-format fields to every generated
# PsdConfig / WorkerdConfig (e.g. --psd-extra='max_message_bytes: 8388608'); --daemon-env
# sets an environment variable for psd and workerd only (diagnostics, e.g.
# glibc malloc tunables; not how the system is meant to be configured).
# The machine is shared: each row records "other load", the CPU (in cores)
# that processes not started by this script used during the row (from
# /proc/stat); rerun when it is not ~0, and compare rows of one run.
# --nice=N reruns this script in a session of its own and sets that
# session's scheduling group (/proc/self/autogroup) to nice N. Linux shares
# the CPU between sessions first (each bazel server is one), so a run with 4
# busy processes gets only 1/(k+1) of the cores against k busy builds
# whatever their count; as root, N=-20 gives the rows the CPU ahead of other
# users' work (which slows down for the length of the run): the way to take
# near-quiet figures on a busy shared machine. "other load" still says how
# much CPU others got.
# Rows d and e need PyTorch in /usr/bin/python3 (PYTHON=PATH picks another
# interpreter): without it they are skipped, with one line saying so.
set -euo pipefail
cd "$(dirname "$0")/../.."
source tools/lib/daemons.sh

EPOCHS=5
BATCHES="64 256"
ROWS="a b c d e"
LR64=0.025
LR256=0.025
TARGET=0.85
PARTITION_BYTES=262144
ROW_TIMEOUT=900
REPEAT=1
SEED=42
JSON=""
LOGS=""
BUILD=1
OUTPUT_BASE=${BAZEL_OUTPUT_BASE:-}
PSD_EXTRA=""
WORKERD_EXTRA=""
DAEMON_ENV=()
NICE=""
TORCH_BLAS=""
WORKER_CORES=""
PSD_CORES=""
PY=${PYTHON:-/usr/bin/python3}
DATA_DIR=/usr/share/datasets/fashion-mnist
MODEL=mlp
STEPS=0

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }
for arg in "$@"; do
  case "$arg" in
    --epochs=*) EPOCHS=${arg#*=} ;;
    --batches=*) BATCHES=${arg#*=} ;;
    --rows=*) ROWS=${arg#*=} ;;
    --lr64=*) LR64=${arg#*=} ;;
    --lr256=*) LR256=${arg#*=} ;;
    --target=*) TARGET=${arg#*=} ;;
    --partition-bytes=*) PARTITION_BYTES=${arg#*=} ;;
    --row-timeout=*) ROW_TIMEOUT=${arg#*=} ;;
    --repeat=*) REPEAT=${arg#*=} ;;
    --seed=*) SEED=${arg#*=} ;;
    --json=*) JSON=${arg#*=} ;;
    --logs=*) LOGS=${arg#*=} ;;
    --no-build) BUILD=0 ;;
    --psd-extra=*) PSD_EXTRA=${arg#*=} ;;
    --workerd-extra=*) WORKERD_EXTRA=${arg#*=} ;;
    --daemon-env=*) DAEMON_ENV+=("${arg#*=}") ;;
    --nice=*) NICE=${arg#*=} ;;
    --torch-blas-threads=*) TORCH_BLAS=${arg#*=} ;;
    --worker-cores=*) WORKER_CORES=${arg#*=} ;;
    --psd-cores=*) PSD_CORES=${arg#*=} ;;
    --output-base=*) OUTPUT_BASE=${arg#*=} ;;
    --model=mlp | --model=cnn) MODEL=${arg#*=} ;;
    --steps=*) STEPS=${arg#*=} ;;
    -h | --help) usage; exit 0 ;;
    *) echo "bench_e2e: unknown argument $arg (see --help)" >&2; exit 2 ;;
  esac
done
[[ "$EPOCHS" =~ ^[1-9][0-9]*$ ]] || { echo "bench_e2e: --epochs: need a positive integer" >&2; exit 2; }
[[ "$SEED" =~ ^[0-9]+$ ]] || { echo "bench_e2e: --seed: need a non-negative integer" >&2; exit 2; }
[[ "$REPEAT" =~ ^[1-9][0-9]*$ ]] || { echo "bench_e2e: --repeat: need a positive integer" >&2; exit 2; }
[[ "$ROW_TIMEOUT" =~ ^[1-9][0-9]*$ ]] || { echo "bench_e2e: --row-timeout: need a positive integer" >&2; exit 2; }
for b in $BATCHES; do
  [[ "$b" =~ ^[1-9][0-9]*$ ]] || { echo "bench_e2e: --batches: $b is not a positive integer" >&2; exit 2; }
done
[[ -z "$TORCH_BLAS" || "$TORCH_BLAS" =~ ^[0-9]+$ ]] || { echo "bench_e2e: --torch-blas-threads: need a non-negative integer" >&2; exit 2; }
[[ -z "$NICE" || "$NICE" =~ ^-?[0-9]+$ ]] || { echo "bench_e2e: --nice: need an integer" >&2; exit 2; }
if [[ -n "$NICE" && -z "${BENCH_E2E_SESSION:-}" ]]; then
  # The run goes on in a new session (its own autogroup); this process only
  # forwards Ctrl-C / TERM to it and waits for its cleanup.
  BENCH_E2E_SESSION=1 setsid "$0" "$@" &
  inner=$!
  trap 'kill -TERM "$inner" 2>/dev/null || true' INT TERM
  rc=0
  while kill -0 "$inner" 2>/dev/null; do
    wait "$inner" && rc=0 || rc=$?
  done
  exit "$rc"
fi
if [[ -n "$NICE" ]]; then
  if [[ "$(ps -o sid= -p $$ | tr -d ' ')" == "$$" ]] && echo "$NICE" >/proc/self/autogroup 2>/dev/null; then
    echo "bench_e2e: scheduling group $(cat /proc/self/autogroup)" >&2
  else
    echo "bench_e2e: --nice=$NICE not applied (no session of its own, or no permission)" >&2
  fi
fi
for r in $ROWS; do
  [[ "$r" =~ ^[abcde]$ ]] || { echo "bench_e2e: --rows: unknown row $r (a..e)" >&2; exit 2; }
done
# Rows d and e (PyTorch): checked once, skipped when torch is missing.
if [[ " $ROWS " =~ \ [de]\  ]] && ! "$PY" -c 'import torch' 2>/dev/null; then
  echo "bench_e2e: skipping rows d and e: $PY cannot import torch (install it with tools/setup.sh --torch)" >&2
  kept=""
  for r in $ROWS; do [[ $r == [de] ]] || kept+="$r "; done
  ROWS=$kept
  [[ -n "$ROWS" ]] || { echo "bench_e2e: no row left to run (--rows)" >&2; exit 2; }
fi

# Cores: two for the compute role (W), two for the shards (P).
mapfile -t ALLOWED < <("$PY" -c 'import os; print(*sorted(os.sched_getaffinity(0)), sep="\n")')
((${#ALLOWED[@]} >= 2)) || { echo "bench_e2e: needs 2 cores, may use ${#ALLOWED[*]}" >&2; exit 2; }
[[ -n "$WORKER_CORES" ]] || WORKER_CORES="${ALLOWED[0]} ${ALLOWED[1]}"
if [[ -z "$PSD_CORES" ]]; then
  if ((${#ALLOWED[@]} >= 4)); then PSD_CORES="${ALLOWED[2]} ${ALLOWED[3]}"; else PSD_CORES=$WORKER_CORES; fi
fi
read -r -a W <<<"$WORKER_CORES"
read -r -a P <<<"$PSD_CORES"
for c in "${W[@]}" "${P[@]}"; do
  [[ " ${ALLOWED[*]} " == *" $c "* ]] ||
    { echo "bench_e2e: core $c is not one this script may use (${ALLOWED[*]})" >&2; exit 2; }
done
((${#W[@]} == 2)) || { echo "bench_e2e: --worker-cores: need 2 cores" >&2; exit 2; }
((${#P[@]} == 2)) || { echo "bench_e2e: --psd-cores: need 2 cores" >&2; exit 2; }
PINNING="workers / PyTorch ranks on cores ${W[0]} and ${W[1]} (one process of 2: ${W[0]},${W[1]}), psd on ${P[0]} and ${P[1]}"
echo "bench_e2e: pinned with taskset: $PINNING" >&2

BAZEL=(bazel)
[[ -n "$OUTPUT_BASE" ]] && BAZEL=(bazel "--output_base=$OUTPUT_BASE")
if ((BUILD)); then
  echo "bench_e2e: building (bazel build --config=opt)" >&2
  "${BAZEL[@]}" build --config=opt //server:psd //worker:workerd //tools/psctl:psctl 2>&1 | tail -n 2 >&2
fi
BIN=$("${BAZEL[@]}" info --config=opt bazel-bin 2>/dev/null)
for b in server/psd worker/workerd tools/psctl/psctl; do
  [[ -x "$BIN/$b" ]] || { echo "bench_e2e: $BIN/$b missing (drop --no-build)" >&2; exit 2; }
done

if [[ -z "$LOGS" ]]; then LOGS=$(mktemp -d /tmp/ps-bench-e2e.XXXXXX); fi
mkdir -p "$LOGS"
RESULTS="$LOGS/results.jsonl"
: >"$RESULTS"
echo "bench_e2e: logs in $LOGS" >&2

# Every process started, for cleanup; ROW_PIDS: those of the current row.
PIDS=()
ROW_PIDS=()
PSD_PIDS=()
stop_and_forget() {  # tools/lib/daemons.sh's stop_pids, then forget them
  stop_pids "$@"
  forget "$@"
}
forget() {  # forget PID...: reaped, so never signalled again (pids get reused)
  local keep=() q
  for q in "${PIDS[@]}"; do [[ " $* " == *" $q "* ]] || keep+=("$q"); done
  PIDS=("${keep[@]}")
  keep=()
  for q in "${PSD_PIDS[@]}"; do [[ " $* " == *" $q "* ]] || keep+=("$q"); done
  PSD_PIDS=("${keep[@]}")
}
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  # Workers (and clients) first: a workerd whose shards are gone retries
  # its RPCs for seconds before it exits.
  local first=() p
  for p in "${PIDS[@]}"; do [[ " ${PSD_PIDS[*]} " == *" $p "* ]] || first+=("$p"); done
  if ((${#first[@]})); then stop_and_forget "${first[@]}"; fi
  if ((${#PSD_PIDS[@]})); then stop_and_forget "${PSD_PIDS[@]}"; fi
  exit $rc
}
trap cleanup EXIT
trap 'echo "bench_e2e: interrupted" >&2; exit 130' INT TERM

start() {  # start LOG CMD...: background process, pid in $STARTED
  local log=$1
  shift
  "$@" >"$log" 2>&1 &
  STARTED=$!
  PIDS+=("$STARTED")
  ROW_PIDS+=("$STARTED")
}

wait_file() {  # wait_file PATH SECONDS
  local deadline=$((SECONDS + $2))
  until [[ -s "$1" ]]; do
    ((SECONDS < deadline)) || { echo "bench_e2e: $1 not written within $2 s" >&2; return 1; }
    sleep 0.1
  done
}

cpu_s() {  # user+system CPU seconds of a live process (and its waited children)
  awk -v hz="$(getconf CLK_TCK)" '{ sub(/^.*\) /, ""); print ($12 + $13 + $14 + $15) / hz }' \
    "/proc/$1/stat" 2>/dev/null || echo 0
}

# Machine-wide busy CPU seconds, and the CPU seconds of this script's
# waited-for children (every process a row starts is waited for): their
# difference over a row is the CPU other users took meanwhile.
busy_s() {
  awk -v hz="$(getconf CLK_TCK)" '/^cpu /{ print ($2 + $3 + $4 + $7 + $8 + $9) / hz; exit }' /proc/stat
}
children_s() {
  awk -v hz="$(getconf CLK_TCK)" '{ sub(/^.*\) /, ""); print ($14 + $15) / hz }' "/proc/$$/stat"
}
row_begin() {
  ROW_T0=$(date +%s.%N)
  ROW_BUSY0=$(busy_s)
  ROW_OURS0=$(children_s)
}
row_end() {  # adds other_cores (CPU others used, in cores) to the last result
  local t1 busy1 ours1
  t1=$(date +%s.%N)
  busy1=$(busy_s)
  ours1=$(children_s)
  "$PY" - "$RESULTS" "$REP" "$SEED" "$PINNING" "$ROW_T0" "$t1" "$ROW_BUSY0" "$busy1" "$ROW_OURS0" \
    "$ours1" <<'EOF'
import json, sys
path, rep, seed, pinning = sys.argv[1:5]
t0, t1, b0, b1, o0, o1 = map(float, sys.argv[5:])
lines = open(path).read().splitlines()
r = json.loads(lines[-1])
r["rep"] = int(rep)
r["seed"] = int(seed)
r["pinning"] = pinning
r["row_s"] = round(t1 - t0, 2)
r["our_cpu_s"] = round(o1 - o0, 2)
r["other_cores"] = round(max(0.0, (b1 - b0) - (o1 - o0)) / max(t1 - t0, 1e-9), 2)
lines[-1] = json.dumps(r)
open(path, "w").write("\n".join(lines) + "\n")
EOF
}

lr_for() { if (($1 == 64)); then echo "$LR64"; else echo "$LR256"; fi; }

free_port() {
  "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# ours ROW B: rows a, b, c on real daemons.
ours() {
  local row=$1 B=$2 lr dir workers devices batch mode spe
  lr=$(lr_for "$B")
  dir="$LOGS/run$REP/$row-b$B"
  rm -rf "$dir"
  mkdir -p "$dir"
  spe=$((30000 / B))
  ((STEPS > 0)) && spe=$STEPS
  local cores=()  # workerd i runs on cores[i]
  case $row in
    a) workers=1; devices='devices: "cpu:0" devices: "cpu:1"'; batch=$((2 * B)); mode=BSP
       cores=("${W[0]},${W[1]}") ;;
    b) workers=2; devices='devices: "cpu:0"'; batch=$B; mode=BSP; cores=("${W[@]}") ;;
    c) workers=2; devices='devices: "cpu:0"'; batch=$B; mode=ASP; cores=("${W[@]}") ;;
  esac
  printf 'shards { address_file: "s0.addr" }\nshards { address_file: "s1.addr" }\ncoordinator_shard: 0\n' \
    >"$dir/cluster.pbtxt"
  ROW_PIDS=()
  local psd_pids=() worker_pids=()
  for i in 0 1; do
    printf 'listen_address: "127.0.0.1:0"\nshard_id: %d\ncluster_file: "cluster.pbtxt"\naddress_file: "s%d.addr"\nworker_timeout_ms: 10000\n%s\n' \
      "$i" "$i" "$PSD_EXTRA" >"$dir/psd$i.pbtxt"
    start "$dir/psd$i.log" taskset -c "${P[$i]}" env "${DAEMON_ENV[@]}" "$BIN/server/psd" \
      "--config=$dir/psd$i.pbtxt"
    psd_pids+=("$STARTED")
    PSD_PIDS+=("$STARTED")
  done
  for i in 0 1; do wait_file "$dir/s$i.addr" 30; done
  for ((i = 0; i < workers; i++)); do
    printf 'cluster_file: "cluster.pbtxt"\nname: "worker%d"\n%s\nthreads_per_device: 1\ndata_dir: "%s"\nloader_threads: 1\nprefetch_batches: 4\nheartbeat_interval_ms: 500\n%s\n' \
      "$i" "$devices" "$DATA_DIR" "$WORKERD_EXTRA" >"$dir/worker$i.pbtxt"
    start "$dir/worker$i.log" taskset -c "${cores[$i]}" env "${DAEMON_ENV[@]}" \
      "$BIN/worker/workerd" "--config=$dir/worker$i.pbtxt"
    worker_pids+=("$STARTED")
  done
  local model_text='mlp { input_dim: 784 hidden: 256 hidden: 128 num_classes: 10 }'
  if [[ $MODEL == cnn ]]; then
    model_text='cnn { height: 28 width: 28 channels: 1 conv { filters: 32 kernel: 5 } conv { filters: 64 kernel: 5 } hidden: 1024 num_classes: 10 }'
  fi
  local limit=""
  ((STEPS > 0)) && limit="max_train_examples: $((2 * B * STEPS))"
  cat >"$dir/job.pbtxt" <<EOF
name: "bench-$row-b$B"
model { $model_text }
data { dataset: "fashion-mnist" batch_size: $batch epochs: $EPOCHS $limit }
optimizer { kind: SGD learning_rate: $lr momentum: 0.9 }
consistency { mode: $mode step_deadline_ms: 60000 }
num_workers: $workers
partition_bytes: $PARTITION_BYTES
seed: $SEED
eval_every: $spe
EOF
  local rc=0
  # In the background: bash runs a trap (Ctrl-C) only once the foreground
  # command ends, but `wait` returns at once.
  start "$dir/submit.out" taskset -c "${P[0]},${P[1]}" \
    timeout --signal=TERM "$((ROW_TIMEOUT + 30))" "$BIN/tools/psctl/psctl" \
    "--cluster=$dir/cluster.pbtxt" --connect-timeout=30 submit "$dir/job.pbtxt" --wait \
    "--timeout=$ROW_TIMEOUT"
  wait "$STARTED" || rc=$?
  forget "$STARTED"
  local psd_cpu=0 worker_cpu=0 p
  for p in "${psd_pids[@]}"; do psd_cpu=$(awk -v a="$psd_cpu" -v b="$(cpu_s "$p")" 'BEGIN{print a+b}'); done
  for p in "${worker_pids[@]}"; do worker_cpu=$(awk -v a="$worker_cpu" -v b="$(cpu_s "$p")" 'BEGIN{print a+b}'); done
  taskset -c "${P[0]},${P[1]}" "$BIN/tools/psctl/psctl" "--cluster=$dir/cluster.pbtxt" stats >"$dir/stats.out" 2>&1 || true
  local others=()
  for p in "${ROW_PIDS[@]}"; do [[ " ${psd_pids[*]} " == *" $p "* ]] || others+=("$p"); done
  stop_and_forget "${others[@]}"
  stop_and_forget "${psd_pids[@]}"
  ROW_PIDS=()
  local rank0
  rank0=$(grep -l "rank 0 of" "$dir"/worker*.log 2>/dev/null | head -n 1 || true)
  "$PY" - "$row" "$B" "$lr" "$rc" "$dir/submit.out" "${rank0:-/dev/null}" "$TARGET" \
    "$psd_cpu" "$worker_cpu" "$EPOCHS" >>"$RESULTS" <<'EOF'
import json, re, sys
row, B, lr, rc, submit, rank0, target, psd_cpu, worker_cpu, epochs = sys.argv[1:]
out = open(submit).read()
summary = [l for l in out.splitlines() if l.startswith("job=")]
fields = dict(re.findall(r'(\w+)=("[^"]*"|\S+)', summary[-1])) if summary else {}
evals = [dict(re.findall(r"(\w+)=(\S+)", l.split("eval ", 1)[1]))
         for l in open(rank0) if "] eval job=" in l]
to_target = next((float(e["elapsed_s"]) for e in evals
                  if float(e["test_accuracy"]) >= float(target)), None)
r = {"row": row, "batch": int(B), "lr": float(lr), "epochs": int(epochs),
     "ok": rc == "0" and fields.get("state") == "SUCCEEDED",
     "samples_per_s": float(fields.get("samples_per_s", "nan")),
     "time_to_target_s": to_target,
     "test_accuracy": float(fields.get("test_accuracy", "nan")),
     "wall_s": float(fields.get("wall_s", "nan")),
     "train_s": float(fields.get("train_s", "nan")),
     "data_s": float(fields.get("data_s", "nan")),
     "compute_s": float(fields.get("compute_s", "nan")),
     "comm_s": float(fields.get("comm_s", "nan")),
     "psd_cpu_s": float(psd_cpu), "workerd_cpu_s": float(worker_cpu),
     "evals": [[int(e["epoch"]), float(e["test_accuracy"]), float(e["elapsed_s"])]
               for e in evals]}
if not r["ok"]:
    r["error"] = (summary[-1] if summary else out[-400:]).strip()
print(json.dumps(r))
EOF
}

# torch ROW B: rows d and e.
torch_row() {
  local row=$1 B=$2 lr dir rc=0
  lr=$(lr_for "$B")
  dir="$LOGS/run$REP/$row-b$B"
  rm -rf "$dir"
  mkdir -p "$dir"
  ROW_PIDS=()
  local common=(--epochs "$EPOCHS" --lr "$lr" --target "$TARGET" --data-dir "$DATA_DIR"
    --seed "$SEED" --model "$MODEL" --steps-per-epoch "$STEPS")
  [[ -n "$TORCH_BLAS" ]] && common+=(--blas-threads "$TORCH_BLAS")
  local t0=$SECONDS
  if [[ $row == d ]]; then
    start "$dir/rank0.log" taskset -c "${W[0]},${W[1]}" \
      timeout "$ROW_TIMEOUT" "$PY" tools/bench/torch_peer.py --mode single \
      --batch $((2 * B)) --threads 2 "${common[@]}"
    local p0=$STARTED
    wait "$p0" || rc=$?
    forget "$p0"
  else
    local port
    port=$(free_port)
    start "$dir/rank0.log" taskset -c "${W[0]}" \
      timeout "$ROW_TIMEOUT" "$PY" tools/bench/torch_peer.py --mode ddp --rank 0 \
      --world 2 --port "$port" --batch "$B" --threads 1 "${common[@]}"
    local p0=$STARTED
    start "$dir/rank1.log" taskset -c "${W[1]}" \
      timeout "$ROW_TIMEOUT" "$PY" tools/bench/torch_peer.py --mode ddp --rank 1 \
      --world 2 --port "$port" --batch "$B" --threads 1 "${common[@]}"
    local p1=$STARTED
    wait "$p0" || rc=$?
    wait "$p1" || rc=$?
    forget "$p0" "$p1"
  fi
  ROW_PIDS=()
  "$PY" - "$row" "$B" "$lr" "$rc" "$dir/rank0.log" "$((SECONDS - t0))" "$EPOCHS" >>"$RESULTS" <<'EOF'
import json, re, sys
row, B, lr, rc, log, wall, epochs = sys.argv[1:]
text = open(log).read()
res = [l for l in text.splitlines() if l.startswith("RESULT ")]
r = {"row": row, "batch": int(B), "lr": float(lr), "epochs": int(epochs),
     "ok": rc == "0" and bool(res)}
if res:
    j = json.loads(res[-1][7:])
    r.update({k: j[k] for k in ("samples_per_s", "time_to_target_s", "test_accuracy",
                                "train_s")})
    r["wall_s"] = float(wall)  # process start to exit, data loading included
    r["evals"] = [[int(e), float(a), float(t)] for e, a, t in
                  re.findall(r"eval epoch=(\d+) test_accuracy=(\S+) elapsed_s=(\S+)", text)]
else:
    r["error"] = text[-400:].strip()
print(json.dumps(r))
EOF
}

echo "bench_e2e: $(nproc) cores, $(uptime | sed 's/.*load/load/')" >&2
for ((REP = 1; REP <= REPEAT; REP++)); do
  for B in $BATCHES; do
    for row in $ROWS; do
      echo "bench_e2e: run $REP/$REPEAT, row $row, B=$B, lr=$(lr_for "$B"), $EPOCHS epochs" >&2
      row_begin
      case $row in
        a | b | c) ours "$row" "$B" ;;
        d | e) torch_row "$row" "$B" ;;
      esac
      row_end
      tail -n 1 "$RESULTS" | cut -c1-300 >&2
    done
  done
done
echo "bench_e2e: done, $(uptime | sed 's/.*load/load/')" >&2

"$PY" - "$RESULTS" "$TARGET" "$EPOCHS" "$PINNING" <<'EOF'
import json, statistics, sys
path, target, epochs, pinning = sys.argv[1:5]
runs = [json.loads(l) for l in open(path) if l.strip()]
names = {"a": "ours: 1 worker x 2 cpu devices, BSP",
         "b": "ours: 2 workers x 1 device, BSP",
         "c": "ours: 2 workers x 1 device, ASP",
         "d": "PyTorch 1 process, 2 threads, batch 2B",
         "e": "PyTorch DDP gloo, 2 x 1 thread"}
ref = {(r["rep"], r["batch"]): r["samples_per_s"] for r in runs if r["row"] == "e" and r["ok"]}
groups = {}
for r in runs:
    groups.setdefault((r["batch"], r["row"]), []).append(r)
def f(v, fmt):
    return "-" if v is None or v != v else fmt.format(v)
def spread(rs, key, fmt):  # median, and [min-max] over several runs
    v = [r[key] for r in rs if r.get(key) is not None and r[key] == r[key]]
    if not v:
        return "-"
    m = fmt.format(statistics.median(v))
    lo, hi = fmt.format(min(v)), fmt.format(max(v))
    return m if lo == hi else f"{m} [{lo}-{hi}]"
reps = len({r["rep"] for r in runs})
head = ["row", "setup", "B", "lr", "samples/s", f"s to {target}", f"test acc @{epochs} ep",
        "vs (e)", "psd cpu s", "workerd cpu s", "other load"]
lines = []
for (batch, row), rs in groups.items():
    ok = [r for r in rs if r["ok"]]
    for r in ok:
        if (r["rep"], batch) in ref:
            r["vs_e"] = r["samples_per_s"] / ref[(r["rep"], batch)]
    failed = len(rs) - len(ok)
    lines.append([row, names[row] + (f" ({failed} FAILED)" if failed else ""), str(batch),
                  f(rs[0].get("lr"), "{:g}"),
                  spread(ok, "samples_per_s", "{:.0f}"),
                  spread(ok, "time_to_target_s", "{:.1f}"),
                  spread(ok, "test_accuracy", "{:.4f}"),
                  spread(ok, "vs_e", "{:.2f}x"),
                  spread(ok, "psd_cpu_s", "{:.1f}"), spread(ok, "workerd_cpu_s", "{:.1f}"),
                  f(max((r.get("other_cores", 0) for r in rs), default=None), "{:.2f}")])
w = [max(len(x) for x in col) for col in zip(head, *lines)]
print()
print(f"Pinned with taskset: {pinning}.")
if reps > 1:
    print(f"{reps} runs per row: median [min-max]; vs (e) pairs each run with row e of the same run; "
          "other load: the largest.")
for l in [head] + lines:
    print("  ".join(x.ljust(n) for x, n in zip(l, w)))
print()
print("| " + " | ".join(head) + " |")
print("|" + "|".join("---" for _ in head) + "|")
for l in lines:
    print("| " + " | ".join(l) + " |")
for r in runs:
    if not r["ok"]:
        print(f"\nrow {r['row']} B={r['batch']} run {r['rep']} failed: {r.get('error', '')}")
EOF
if [[ -n "$JSON" ]]; then cp "$RESULTS" "$JSON"; fi
