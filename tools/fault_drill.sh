#!/usr/bin/env bash
# Fault drill: the demo job on a local cluster (2 psd, 2 workerd), first
# undisturbed, then with faults:
#   at ~40% of the steps, kill -9 psd shard 1 and restart it (it resumes from
#   its checkpoint; the workers ride through with retries);
#   at ~60%, kill -9 worker 1 and restart it (SHRINK: the other worker goes
#   on; the restarted one rejoins at the current step).
# Passes when the disturbed job SUCCEEDS with test accuracy within 1 point of
# the undisturbed run; prints both summaries and the shard statistics.
#
# --replicated: the replicated-shard drill instead (3 psd, 2 workerd, the job
# with replication: 2 and no checkpoints): at ~20% kill -9 psd 1 (shard 2
# takes its chunks over), restart it on a new port (it rejoins as a backup,
# copies its replicas in and catches up), then at once kill -9 psd 2 (shard
# 1 serves its chunks again from the copy). Passes when the job SUCCEEDS
# with the undisturbed run's test accuracy exactly.
#
# --replicated-ctr: the same drill on configs/jobs/ctr_synthetic.pbtxt (a
# sparse table and a dense MLP, BSP) cut to EPOCHS x 204,800 training
# examples (EPOCHS x 200 steps): the killed shards' table rows fail over
# and are copied in too. Passes when the job SUCCEEDS with the undisturbed
# run's test AUC and logloss exactly.
#
#   tools/fault_drill.sh [--replicated | --replicated-ctr] [EPOCHS]  (default 5)
set -euo pipefail
cd "$(dirname "$0")/.."
source tools/lib/daemons.sh
REPLICATED=0
CTR=0
if [[ ${1:-} == --replicated ]]; then REPLICATED=1; shift; fi
if [[ ${1:-} == --replicated-ctr ]]; then REPLICATED=1; CTR=1; shift; fi
# What the undisturbed and the disturbed run must agree on.
METRIC=test_accuracy
if ((CTR)); then METRIC=test_auc; fi
EPOCHS=${1:-5}
NPSD=$((REPLICATED ? 3 : 2))

bash tools/setup.sh >/dev/null
bazel build //server:psd //worker:workerd //tools/psctl:psctl 2>&1 | tail -n 1
BIN=$(bazel info bazel-bin 2>/dev/null)
DIR=$(mktemp -d /tmp/ps-drill.XXXXXX)
echo "drill: logs and configs in $DIR"

declare -A PID
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  stop_pids "${PID[@]}"
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

for ((i = 0; i < NPSD; i++)); do
  echo "shards { address_file: \"s$i.addr\" }"
done >"$DIR/cluster.pbtxt"
echo "coordinator_shard: 0" >>"$DIR/cluster.pbtxt"
for ((i = 0; i < NPSD; i++)); do
  cat >"$DIR/psd$i.pbtxt" <<EOT
cluster_file: "cluster.pbtxt"
shard_id: $i
address_file: "s$i.addr"
worker_timeout_ms: 3000
EOT
  if ((!REPLICATED)); then
    mkdir -p "$DIR/ckpt$i"
    echo "checkpoint_dir: \"ckpt$i\"" >>"$DIR/psd$i.pbtxt"
  fi
done
for i in 0 1; do
  cat >"$DIR/worker$i.pbtxt" <<EOT
cluster_file: "cluster.pbtxt"
name: "worker$i"
devices: "cpu:0"
heartbeat_interval_ms: 300
EOT
done
if ((CTR)); then
  sed -e "s/synthetic_train: [0-9]*/synthetic_train: $((EPOCHS * 204800))/" \
    -e "s/synthetic_test: [0-9]*/synthetic_test: 20000/" \
    configs/jobs/ctr_synthetic.pbtxt >"$DIR/job.pbtxt"
else
  sed -e "s/epochs: [0-9]*/epochs: $EPOCHS/" configs/jobs/fashion_mlp.pbtxt >"$DIR/job.pbtxt"
fi
if ((REPLICATED)); then
  cp "$DIR/job.pbtxt" "$DIR/job_base.pbtxt"
  echo "replication: 2" >>"$DIR/job.pbtxt"
  # More tries than the default 12 (backoff capped at 2 s) to outlast the
  # failovers.
  for i in 0 1; do echo "rpc_max_attempts: 30" >>"$DIR/worker$i.pbtxt"; done
else
  cat >>"$DIR/job.pbtxt" <<EOT
checkpoint { every_steps: 1 }
on_worker_failure: SHRINK
EOT
  cp "$DIR/job.pbtxt" "$DIR/job_base.pbtxt"
fi

PSCTL=("$BIN/tools/psctl/psctl" --cluster="$DIR/cluster.pbtxt")
start_psd() {
  "$BIN/server/psd" --config="$DIR/psd$1.pbtxt" >>"$DIR/psd$1.log" 2>&1 &
  PID[psd$1]=$!
}
start_worker() {
  "$BIN/worker/workerd" --config="$DIR/worker$1.pbtxt" >>"$DIR/worker$1.log" 2>&1 &
  PID[worker$1]=$!
}
# Waits (bounded) for shard $1 to write its address file after a (re)start.
wait_address() {
  for _ in $(seq 300); do [[ -s "$DIR/s$1.addr" ]] && return 0; sleep 0.1; done
  echo "drill: psd $1 did not start; see $DIR/psd$1.log" >&2
  return 1
}
field() { python3 -c "import json,sys; d=json.load(sys.stdin); print(d.get('progress',{}).get('$1',0))"; }
state() { python3 -c "import json,sys; print(json.load(sys.stdin)['state'])"; }
# Polls the job until its step reaches $2 (bounded: 600 s).
wait_step() {
  local job=$1 target=$2
  for _ in $(seq 6000); do
    local js step
    js=$("${PSCTL[@]}" status "$job" --json 2>/dev/null) || { sleep 0.1; continue; }
    [[ $(state <<<"$js") == RUNNING ]] || { echo "drill: job left RUNNING early" >&2; return 1; }
    step=$(field step <<<"$js")
    ((step >= target)) && return 0
    sleep 0.1
  done
  echo "drill: timed out waiting for step $target" >&2
  return 1
}

# Waits (bounded: 120 s) for psd 0 (the coordinator) to log $1.
wait_log() {
  for _ in $(seq 1200); do grep -qF "$1" "$DIR/psd0.log" && return 0; sleep 0.1; done
  echo "drill: psd 0 never logged \"$1\"; see $DIR/psd0.log" >&2
  return 1
}
# kill -9 psd $1 and wait for it.
kill_psd() {
  kill -KILL "${PID[psd$1]}"; wait "${PID[psd$1]}" 2>/dev/null || true
  unset "PID[psd$1]"
}
# Restarts psd $1 on a new port (the coordinator follows its address file).
restart_psd() {
  rm -f "$DIR/s$1.addr"; start_psd "$1"; wait_address "$1"
}

for ((i = 0; i < NPSD; i++)); do rm -f "$DIR/s$i.addr"; start_psd $i; done
for ((i = 0; i < NPSD; i++)); do wait_address $i; done
for i in 0 1; do start_worker $i; done

echo "drill: 1/2 undisturbed run"
"${PSCTL[@]}" submit "$DIR/job_base.pbtxt" --wait --timeout=1800 | tee "$DIR/baseline.out"
base_job=$(grep -o 'job-[0-9]*' "$DIR/baseline.out" | head -n 1)
# Both runs' figures from the same JSON field (full precision).
base_acc=$("${PSCTL[@]}" status "$base_job" --json | field "$METRIC")
base_logloss=$("${PSCTL[@]}" status "$base_job" --json | field test_logloss)

echo "drill: 2/2 run with faults"
job=$("${PSCTL[@]}" submit "$DIR/job.pbtxt" | grep -o 'job-[0-9]*')
total=0
for _ in $(seq 300); do
  total=$("${PSCTL[@]}" status "$job" --json | field total_steps)
  ((total > 0)) && break
  sleep 0.1
done
if ((REPLICATED)); then
  wait_step "$job" $((total * 20 / 100))
  echo "drill: kill -9 psd 1 at step $("${PSCTL[@]}" status "$job" --json | field step) of $total"
  t0=$(date +%s.%N)
  kill_psd 1
  wait_log "shard 1 failed over at epoch"
  restart_psd 1
  wait_log "shard 1 caught up: a backup again"
  t1=$(date +%s.%N)
  echo "drill: psd 1 restarted, rejoined as a backup and caught up $(python3 -c "print(round($t1 - $t0, 2))") s after the kill (step $("${PSCTL[@]}" status "$job" --json | field step))"
  "${PSCTL[@]}" stats | grep '^replicas:' || true
  # At once: a step takes a few ms, the whole job may last seconds.
  js=$("${PSCTL[@]}" status "$job" --json)
  [[ $(state <<<"$js") == RUNNING ]] \
    || { echo "drill: FAILED: the job ended before psd 2 was killed; use more epochs" >&2; exit 1; }
  echo "drill: kill -9 psd 2 at step $(field step <<<"$js")"
  kill_psd 2
  wait_log "shard 2 failed over at epoch"
fi
if ((!REPLICATED)); then
wait_step "$job" $((total * 40 / 100))
echo "drill: kill -9 psd 1 at step $("${PSCTL[@]}" status "$job" --json | field step) of $total"
kill -KILL "${PID[psd1]}"; wait "${PID[psd1]}" 2>/dev/null || true
# Workers and the coordinator keep the address they knew: the restarted
# shard listens on the same port (and resumes from its checkpoint).
addr1=$(cat "$DIR/s1.addr")
echo "listen_address: \"$addr1\"" >>"$DIR/psd1.pbtxt"
rm -f "$DIR/s1.addr"; start_psd 1; wait_address 1
echo "drill: psd 1 restarted"
wait_step "$job" $((total * 60 / 100))
echo "drill: kill -9 worker 1 at step $("${PSCTL[@]}" status "$job" --json | field step)"
kill -KILL "${PID[worker1]}"; wait "${PID[worker1]}" 2>/dev/null || true
start_worker 1
echo "drill: worker 1 restarted"
fi
set +e
for _ in $(seq 18000); do
  st=$("${PSCTL[@]}" status "$job" --json 2>/dev/null | state)
  [[ $st == RUNNING || $st == PENDING || -z $st ]] || break
  sleep 0.1
done
set -e
"${PSCTL[@]}" status "$job" | tee "$DIR/faults.out"
acc=$("${PSCTL[@]}" status "$job" --json | field "$METRIC")
logloss=$("${PSCTL[@]}" status "$job" --json | field test_logloss)
echo
echo "drill: shard statistics after the faults (a killed shard answers no stats)"
"${PSCTL[@]}" stats || true
"${PSCTL[@]}" stats --json 2>/dev/null | python3 -c "
import json,sys
for s in json.load(sys.stdin):
  for j in (s or {}).get('job_stats', []):
    print('shard', s.get('shard_id', 0), j['job_id'], 'restored_from_step', j.get('restored_from_step', '0'),
          'checkpoints', j.get('checkpoints', '0'), 'stale', j.get('stale_pushes', '0'),
          'duplicates', j.get('duplicates', '0'))" || true
echo
echo "drill: state=$st $METRIC=$acc baseline_$METRIC=$base_acc"
if ((CTR)); then
  echo "drill: test_logloss=$logloss baseline_test_logloss=$base_logloss"
  [[ $logloss == "$base_logloss" ]] \
    || { echo "drill: FAILED: the test logloss differs"; exit 1; }
fi
[[ $st == SUCCEEDED ]] || { echo "drill: FAILED: job ended $st"; exit 1; }
tolerance=$((REPLICATED ? 0 : 1))
python3 -c "import sys; a,b=float('$acc'),float('$base_acc'); sys.exit(0 if abs(a-b) <= $tolerance / 100 else 1)" \
  || { echo "drill: FAILED: $METRIC differs by more than $tolerance point(s)"; exit 1; }
echo "drill: PASSED"
