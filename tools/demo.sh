#!/usr/bin/env bash
# The main job: a local cluster (2 psd shards, 2 workerd) trains an MLP on
# Fashion-MNIST. Builds what is needed, starts the daemons with their logs in
# a temporary folder (printed), submits configs/jobs/fashion_mlp.pbtxt with
# --wait, prints the summary and the shard statistics, and stops every daemon
# it started, also on Ctrl-C or failure. The coordinator keeps its jobs in
# configs/local/state (psd0.pbtxt's state_dir): each run's job gets the next
# id, and `psctl list` shows the earlier runs' jobs too.
#
# Given a Python training script instead (examples/torch_mlp.py,
# examples/torch_fmnist_cnn.py), it starts the 2 shards alone and runs the
# script as 2 workers with `python3 -m psclient.run` (docs/PYTHON.md); the
# script's further arguments follow it.
#
#   tools/demo.sh [JOB.pbtxt]
#   tools/demo.sh SCRIPT.py [ARGS...]
set -euo pipefail
cd "$(dirname "$0")/.."
source tools/lib/daemons.sh
JOB=${1:-configs/jobs/fashion_mlp.pbtxt}
SCRIPT_ARGS=("${@:2}")
PYTHON=0
[[ $JOB == *.py ]] && PYTHON=1

if ((PYTHON)); then
  bash tools/setup.sh --torch
else
  bash tools/setup.sh
fi
LOGS=$(mktemp -d /tmp/ps-demo.XXXXXX)
echo "demo: logs in $LOGS"
echo "demo: building (the first time takes several minutes)"
TARGETS=(//server:psd //worker:workerd //tools/psctl:psctl)
((PYTHON)) && TARGETS+=(//python/psclient:_native.so)
if ! bazel build "${TARGETS[@]}" >"$LOGS/build.log" 2>&1; then
  cat "$LOGS/build.log"
  echo "demo: build failed" >&2
  exit 1
fi
BIN=$(bazel info bazel-bin 2>/dev/null)
if ((PYTHON)); then
  install -m 755 "$BIN/python/psclient/_native.so" python/psclient/_native.so
fi
PIDS=()
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  if ((${#PIDS[@]})); then
    stop_pids "${PIDS[@]}"
  fi
  echo "demo: stopped all daemons (logs in $LOGS)"
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

PSCTL=("$BIN/tools/psctl/psctl" --cluster=configs/local/cluster.pbtxt)
for i in 0 1; do
  "$BIN/server/psd" --config=configs/local/psd$i.pbtxt >"$LOGS/psd$i.log" 2>&1 &
  PIDS+=($!)
done
if ((PYTHON)); then
  echo "demo: started psd x2 (pids ${PIDS[*]}); running $JOB as 2 workers"
  set +e
  PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}" /usr/bin/python3 \
    -m psclient.run --cluster=configs/local/cluster.pbtxt --workers=2 \
    --timeout=3600 "$JOB" "${SCRIPT_ARGS[@]}"
  rc=$?
  set -e
  echo
  echo "demo: the job"
  "${PSCTL[@]}" list || true
else
  for i in 0 1; do
    "$BIN/worker/workerd" --config=configs/local/worker$i.pbtxt >"$LOGS/worker$i.log" 2>&1 &
    PIDS+=($!)
  done
  echo "demo: started psd x2, workerd x2 (pids ${PIDS[*]})"
  # The coordinator reloads its job store (configs/local/state): the workers
  # of an earlier run come back idle, and a job submitted before worker0 and
  # worker1 register again (replacing them) could be given to them. Submit
  # once both have registered (at most 30 s; psctl waits for the rest).
  wait_log_line 'registered with the coordinator' 30 "$LOGS"/worker{0,1}.log
  set +e
  "${PSCTL[@]}" submit "$JOB" --wait --timeout=1800
  rc=$?
  set -e
fi
echo
echo "demo: shard statistics"
"${PSCTL[@]}" stats || true
exit $rc
