# shellcheck shell=bash
# psclient.torch with a CUDA model: step 5 of tools/gpu_check.sh (sourced by
# it; docs/GPU.md).
#
#   pack_psclient STAGE   (--pack) psclient's native module built for every
#                         Python of PSCLIENT_PYTHONS whose headers this
#                         machine has, into STAGE/python/X.Y/_native.so
#   run_psclient WORK     (--out) with the module of this python3's X.Y and a
#                         torch that sees the GPU: python/torch_cuda_test.py,
#                         then examples/torch_fmnist_cnn.py --device=cuda on
#                         2 psd (configs/local) for PSCLIENT_EPOCHS epochs;
#                         writes WORK/psclient.json (always: a reason when
#                         not run), which gpu_check_summary.py judges
#
# The module is a CPython extension, built against one Python's headers
# (tools/lib/python_headers.sh); the GPU machine's Python need not be the
# build machine's (Debian 12's is 3.11, the H200 image's 3.12), so --pack
# builds one per version, the WORKSPACE's own last so bazel-bin keeps it.

source "${BASH_SOURCE[0]%/*}/python_headers.sh"
PSCLIENT_PYTHONS=${PSCLIENT_PYTHONS:-"3.12 3.13 3.11"}
PSCLIENT_EPOCHS=${PSCLIENT_EPOCHS:-3}
PSCLIENT_TARGET=0.875 # test accuracy after 3 epochs: 0.9026 on the H200
PSCLIENT_TIMEOUT_S=150

pack_psclient() { # STAGE
  local stage=$1 v ws bin
  ws=$(workspace_python)
  bin=$(bazel info bazel-bin 2>/dev/null) || die "bazel info failed"
  for v in $PSCLIENT_PYTHONS; do
    [[ $v == "$ws" || -z $(python_headers "$v") ]] && continue
    build_psclient "$v" || die "psclient's module for Python $v failed"
    stage_module "$stage" "$v" "$bin"
  done
  build_psclient "$ws" || die "psclient's module failed"
  stage_module "$stage" "$ws" "$bin"
}

stage_module() { # STAGE X.Y BAZEL_BIN
  mkdir -p "$1/python/$2"
  cp "$3/python/psclient/_native.so" "$1/python/$2/" &&
    chmod u+w "$1/python/$2/_native.so" &&
    strip --strip-unneeded "$1/python/$2/_native.so" ||
    die "cannot stage psclient's module for Python $2"
}

# Writes WORK/psclient.json from the logs (python: the JSON; bash: the
# figures only).
psclient_result() { # WORK JSON_FIELDS...
  local work=$1
  shift
  python3 -c 'import json, sys
print(json.dumps(dict(a.split("=", 1) for a in sys.argv[1:])))' "$@" \
    >"$work/psclient.json"
}

run_psclient() { # WORK
  local work=$1 py have logs=$1/logs/psclient
  py=$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)
  have=$(cd "$work/python" 2>/dev/null && ls | tr '\n' ' ')
  if [[ ! -f $work/python/$py/_native.so ]]; then
    psclient_result "$work" run=no "python=$py" "reason=not run: psclient's \
native module is packed for Python ${have:-none} and this machine's python3 \
is ${py:-missing} (tools/lib/gpu_psclient.sh: PSCLIENT_PYTHONS)"
    return
  fi
  if ! python3 -c 'import torch, sys; sys.exit(not torch.cuda.is_available())' \
    2>/dev/null; then
    psclient_result "$work" run=no "python=$py" "reason=not run: this \
python3's torch does not see the GPU (torch.cuda.is_available() is false)"
    return
  fi
  # The CNN's PyTorch peer (step 4) for the example's ratio, when no job of
  # step 3 ran it.
  [[ -s $work/peer_cnn.json ]] || run_peer "$work" cnn 0.02
  mkdir -p "$logs" "$work/py" "$work/bindir/server"
  cp -r python/psclient python/torch_cuda_test.py "$work/py/" &&
    cp "$work/python/$py/_native.so" "$work/py/psclient/" &&
    ln -sf "$work/bin/psd" "$work/bindir/server/psd" || die "cannot stage psclient"
  PS_BIN_DIR=$work/bindir timeout -k 5 "$(step_timeout 60)" \
    python3 "$work/py/torch_cuda_test.py" -v >"$logs/torch_cuda_test.log" 2>&1
  local test_rc=$? rc
  run_psclient_example "$work" "$logs"
  rc=$?
  psclient_result "$work" run=yes "python=$py" "test_rc=$test_rc" \
    "test_summary=$(grep -E '^(OK|FAILED)' "$logs/torch_cuda_test.log" | tail -1)" \
    "max_param_diff=$(sed -n 's/.*parameter difference: //p' "$logs/torch_cuda_test.log" | tail -1)" \
    "example_rc=$rc" "epochs=$PSCLIENT_EPOCHS" "target=$PSCLIENT_TARGET" \
    "last_epoch=$(grep -o 'rank 0 epoch .*' "$logs/example.log" | tail -1)"
  echo "gpu_check: psclient.torch on cuda: test rc=$test_rc, example rc=$rc"
}

# examples/torch_fmnist_cnn.py, 2 workers on cuda, on 2 psd of configs/local.
run_psclient_example() { # WORK LOGS
  local work=$1 logs=$2 dir=$1/psclient_cluster i rc
  mkdir -p "$dir"
  cp "$LOCAL_CLUSTER"/cluster.pbtxt "$LOCAL_CLUSTER"/psd[01].pbtxt "$dir/"
  local -a pids=()
  for i in 0 1; do
    (cd "$dir" && exec "$work/bin/psd" --config="$dir/psd$i.pbtxt") \
      >"$logs/psd$i.log" 2>&1 &
    pids+=($!)
  done
  # shellcheck disable=SC2064  # the pids are known now
  trap "kill -KILL ${pids[*]} 2>/dev/null" EXIT
  PYTHONPATH=$work/py FMNIST_DIR=$DATA_DIR timeout -k 5 \
    "$(step_timeout $PSCLIENT_TIMEOUT_S)" python3 -m psclient.run \
    --cluster="$dir/cluster.pbtxt" --workers=2 examples/torch_fmnist_cnn.py \
    --device=cuda --epochs="$PSCLIENT_EPOCHS" >"$logs/example.log" 2>&1
  rc=$?
  stop_pids "${pids[@]}"
  trap - EXIT
  return "$rc"
}
