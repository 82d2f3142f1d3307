#!/usr/bin/env bash
# The GPU path on a real GPU, in one short run (docs/GPU.md).
#
#   tools/gpu_check.sh --pack DIR               # here: build, pack into DIR
#   tools/gpu_check.sh --out OUTDIR [--from DIR]  # there: run, summarise
#
# --pack builds (bazel) the gpu-tagged tests, the GPU benchmark, the
# 2-worker job's daemons (psd, workerd, psctl) and psclient's native module
# for each Python whose headers it finds, strips them and packs them
# with every shared library they need that is neither the CUDA toolkit's or
# driver's nor glibc's into DIR/gpu_pack.tar.xz, and copies the demo's data
# set (Fashion-MNIST) to DIR/data. DIR is meant to be a git-ignored folder of
# the checkout (.gpu/) that a GPU machine without bazel gets carried to.
#
# --out first looks for a GPU: without one (nvidia-smi missing, failing or
# listing none) it prints one line and exits 0, running and writing nothing.
# With one it takes the binaries from DIR (default .gpu/) when packed there,
# else builds them when bazel exists (the summary says which), then runs,
# each under its own timeout and all within TOTAL_BUDGET_S:
#   1. every gpu-tagged test binary;
#   2. the GPU benchmark (worker/backend/cuda/gpu_check_benchmark.cc): GPU
#      against CPU per call and per model, GEMM GFLOP/s against cuBLAS;
#   3. the 2-worker BSP jobs of JOBS (the demo's MLP, the built-in CNN, the
#      CNN with overlap on, a CTR job with a sparse table) on the local
#      cluster of configs/local, both workerd on devices: "gpu:0";
#   4. PyTorch's run of the same models on the same GPU
#      (tools/bench/torch_peer.py --device cuda, one process, the jobs'
#      global batch), the peer of step 3;
#   5. psclient.torch with a CUDA model (tools/lib/gpu_psclient.sh): its GPU
#      test and examples/torch_fmnist_cnn.py --device=cuda, where the pack
#      holds psclient's module for this machine's Python; else not run,
#      with the reason.
# It writes (tools/gpu_check_summary.py) OUTDIR/gpu_check.json,
# OUTDIR/gpu_check.md and
# OUTDIR/gpu_check_logs.tar.gz. Exit 0 when everything passed, 1 otherwise.
set -uo pipefail
# stop_pids (SIGTERM, 10 s, SIGKILL, reap). Plain bash: the no-GPU path runs
# with a bare PATH (see has_gpu).
[[ ${BASH_SOURCE[0]} == */* ]] && _tools=${BASH_SOURCE[0]%/*} || _tools=.
source "$_tools/lib/daemons.sh"
source "$_tools/lib/gpu_psclient.sh"

# ---- what to build and where it lands (labels; paths follow from them) ----
# Fix these when targets move; the script derives every path from them.
PSD_LABEL=//server:psd
WORKERD_LABEL=//worker:workerd
PSCTL_LABEL=//tools/psctl:psctl
BENCH_LABEL=//worker/backend/cuda:gpu_check_benchmark
# The C++ ones: //python:torch_cuda_test is a Python script, run by step 5
# with psclient's module for the GPU machine's Python.
GPU_TEST_QUERY='kind(cc_test, attr(tags, gpu, tests(//...)))'
# The jobs of step 3: name; peer model (mlp or cnn: the PyTorch peer's
# --model, run once per model; - for none); job file; the sed program that
# edits it (- for none); the metric judged and its target; learning rate
# (the peer's: the job's, the same mean over the same global batch);
# timeout; overlap (on: the workers' disable_overlap is set false, as a
# worker with cores to spare runs; off: configs/local's, set for 2 shared
# cores). The targets: the CPU runs' figures (MLP 0.8806 and CNN 0.9125
# test accuracy after 10 epochs, docs/BENCHMARKS.md; the CTR job on 1M/200k
# examples 0.7878 AUC, docs/SPARSE.md; each bitwise the same on every CPU
# run) less a seed's spread, as the GPU sums in another order.
# (no spaces: a JOBS line is split on them)
CTR_1M='s/synthetic_train:.*/synthetic_train:1000000/;s/synthetic_test:.*/synthetic_test:200000/'
JOBS=(
  "mlp mlp configs/jobs/fashion_mlp.pbtxt - test_accuracy 0.875 0.05 120 off"
  "cnn cnn configs/jobs/fashion_cnn.pbtxt - test_accuracy 0.905 0.02 200 off"
  "cnn_overlap cnn configs/jobs/fashion_cnn.pbtxt - test_accuracy 0.905 0.02 200 on"
  "ctr - configs/jobs/ctr_synthetic.pbtxt $CTR_1M test_auc 0.785 - 150 off"
)
LOCAL_CLUSTER=configs/local # cluster.pbtxt, psd{0,1}.pbtxt, worker{0,1}.pbtxt
DATA_SRC=/usr/share/datasets/fashion-mnist
PACK_BUDGET_MIB=55 # DIR travels with the working tree (64 MiB in all)
TOTAL_BUDGET_S=${GPU_CHECK_BUDGET_S:-450} # the whole --out run (env: GPU_CHECK_BUDGET_S)
TEST_TIMEOUT_S=60
BENCH_TIMEOUT_S=120
PEER_TIMEOUT_S=90

die() {
  echo "gpu_check: $*" >&2
  exit 1
}

usage() {
  echo "usage: $0 --pack DIR | --out OUTDIR [--from DIR]" >&2
  exit 2
}

# Plain bash only: the no-GPU answer must not depend on anything else.
has_gpu() {
  command -v nvidia-smi >/dev/null 2>&1 || return 1
  local list
  list=$(nvidia-smi -L 2>/dev/null) || return 1
  [[ $list == *"GPU "[0-9]* ]]
}

# //a/b:c -> a/b/c (its path under bazel-bin); //a/b:c -> c.
label_path() {
  local l=${1#//}
  echo "${l%%:*}/${l#*:}"
}
label_name() { echo "${1#*:}"; }

# Libraries the GPU machine brings itself: glibc's, the driver's, the CUDA
# toolkit's (NCCL included where it sits in the toolkit, as here).
is_system_lib() { # NAME PATH
  case $1 in
    linux-vdso.so* | ld-linux*.so* | libc.so* | libm.so* | libpthread.so* | \
      libdl.so* | librt.so* | libresolv.so* | libutil.so* | libmvec.so*)
      return 0 ;;
    libcuda.so* | libnvidia-*) return 0 ;;
  esac
  local cuda
  cuda=$(readlink -f "${CUDA_HOME:-/usr/local/cuda}")
  [[ $(readlink -f "$2") == "$cuda"/* || $2 == /usr/local/cuda* ]]
}

# Copies the built binaries (stripped) into STAGE/bin and the libraries they
# need into STAGE/lib: the system's (gRPC, Abseil, ...) and the project's own
# that Bazel links tests against dynamically (_solib_*); libstdc++ and
# libgcc_s go to STAGE/lib/compat, used only where the GPU machine's own are
# too old. Writes STAGE/MANIFEST.
stage_binaries() { # STAGE TEST_LABEL...
  local stage=$1 bin name f lib path
  shift
  bin=$(bazel info bazel-bin 2>/dev/null) || die "bazel info failed"
  mkdir -p "$stage/bin" "$stage/lib/compat"
  : >"$stage/ldd"
  for label in "$@" "$BENCH_LABEL" "$PSD_LABEL" "$WORKERD_LABEL" \
    "$PSCTL_LABEL"; do
    name=$(label_name "$label")
    f=$bin/$(label_path "$label")
    [[ -x $f ]] || die "$label: no binary at $f"
    [[ -e $stage/bin/$name ]] && die "two targets named $name"
    cp "$f" "$stage/bin/$name" && chmod u+w "$stage/bin/$name"
    strip --strip-all "$stage/bin/$name" || die "strip $name failed"
    ldd "$f" >>"$stage/ldd" # here, where its $ORIGIN rpaths resolve
  done
  local -a system=()
  while read -r lib path; do
    if is_system_lib "$lib" "$path"; then
      system+=("$lib")
    elif [[ $lib == libstdc++.so* || $lib == libgcc_s.so* ]]; then
      cp -L "$path" "$stage/lib/compat/$lib"
    else
      cp -L "$path" "$stage/lib/$lib" && chmod u+w "$stage/lib/$lib"
      strip --strip-unneeded "$stage/lib/$lib" || die "strip $lib failed"
    fi
  done < <(awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }' "$stage/ldd" |
    sort -u)
  grep 'not found' "$stage/ldd" | sort -u >&2
  rm -f "$stage/ldd"
  {
    echo "commit=$(git rev-parse HEAD 2>/dev/null || echo unknown)"
    echo "dirty=$(git status --porcelain 2>/dev/null | grep -q . && echo yes || echo no)"
    echo "built=$(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -n)"
    echo "glibc=$(ldd --version | head -1)"
    echo "tests=$(for l in "$@"; do label_name "$l"; done | tr '\n' ' ')"
    echo "test_labels=$*"
    echo "system_libs=$(printf '%s\n' "${system[@]}" | sort -u | tr '\n' ' ')"
  } >"$stage/MANIFEST"
}

gpu_test_labels() {
  bazel query --noshow_progress "$GPU_TEST_QUERY" 2>/dev/null | sort
}

build_all() { # TEST_LABEL...
  bazel build "$@" "$BENCH_LABEL" "$PSD_LABEL" "$WORKERD_LABEL" \
    "$PSCTL_LABEL" || die "bazel build failed (without CUDA in the build, \
$BENCH_LABEL does not exist)"
}

pack() { # DIR
  local dir=$1 start=$SECONDS stage
  command -v bazel >/dev/null || die "--pack needs bazel"
  local -a tests
  mapfile -t tests < <(gpu_test_labels)
  ((${#tests[@]})) || die "no gpu-tagged tests found ($GPU_TEST_QUERY)"
  build_all "${tests[@]}"
  stage=$(mktemp -d /tmp/gpu_pack.XXXXXX)
  # shellcheck disable=SC2064  # the folder is known now
  trap "rm -rf '$stage'" EXIT
  stage_binaries "$stage" "${tests[@]}"
  pack_psclient "$stage"
  mkdir -p "$dir/data"
  rm -f "$dir/gpu_pack.tar.xz"
  tar -C "$stage" -cf - . | xz -T2 -6 >"$dir/gpu_pack.tar.xz" ||
    die "packing failed"
  cp "$DATA_SRC"/*.gz "$dir/data/" || die "no data set at $DATA_SRC"
  local kib libs
  kib=$(du -sk "$dir" | cut -f1)
  libs=$(find "$stage/lib" -name '*.so*' | wc -l)
  echo "gpu_check: packed ${#tests[@]} tests + 4 binaries, psclient for Python \
$(ls "$stage/python" | tr '\n' ' ')and $libs libraries \
($(du -sh "$stage" | cut -f1) unpacked) into $dir: $((kib / 1024)) MiB in \
$((SECONDS - start)) s"
  ((kib <= PACK_BUDGET_MIB * 1024)) ||
    die "$dir is over its ${PACK_BUDGET_MIB} MiB budget"
}

# ---- the run on the GPU machine -------------------------------------------

# Seconds for the next step: its own limit, cut to what the budget has left.
step_timeout() { # LIMIT
  local left=$((DEADLINE - SECONDS - 15))
  ((left < $1)) && echo $((left > 5 ? left : 5)) || echo "$1"
}

# Unpacks python-free when xz is there, else with Python's tarfile.
unpack() { # ARCHIVE DEST
  if command -v xz >/dev/null; then
    tar -C "$2" -xJf "$1"
  else
    python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$1" "$2"
  fi
}

# Sets LD_LIBRARY_PATH: the packed libraries, the toolkit's, NCCL wherever
# it is (the toolkit, the system, PyTorch's wheel); libstdc++/libgcc_s from
# the pack only when the binaries do not load without them.
set_library_path() { # WORK
  local work=$1 cuda=${CUDA_HOME:-/usr/local/cuda} d nccl=""
  local -a dirs=("$cuda/lib64" /usr/lib/x86_64-linux-gnu /usr/local/lib)
  while read -r d; do dirs+=("$d/nvidia/nccl/lib"); done < <(python3 -c \
    'import site; print("\n".join(site.getsitepackages()))' 2>/dev/null)
  for d in "${dirs[@]}"; do
    [[ -e $d/libnccl.so.2 ]] && nccl=$d && break
  done
  export LD_LIBRARY_PATH="$work/lib:$cuda/lib64${nccl:+:$nccl}"
  echo "nccl=${nccl:-not found}" >>"$work/env"
  if ldd "$work"/bin/* 2>&1 | grep -q 'not found' &&
    [[ -n $(ls "$work/lib/compat" 2>/dev/null) ]]; then
    export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$work/lib/compat"
    echo "compat_libs=used" >>"$work/env"
  fi
  ldd "$work"/bin/* 2>&1 | grep 'not found' | sort -u >"$work/missing_libs"
}

# Puts the binaries under WORK (bin/, lib/, MANIFEST) from the pack in FROM,
# or by building; sets SOURCE and DATA_DIR.
get_binaries() { # WORK FROM
  local work=$1 from=$2
  if [[ -f $from/gpu_pack.tar.xz ]]; then
    unpack "$from/gpu_pack.tar.xz" "$work" || die "cannot unpack $from"
    SOURCE="carried: binaries packed by --pack in $from"
    DATA_DIR=$(cd "$from/data" && pwd)
  elif command -v bazel >/dev/null; then
    local -a tests
    mapfile -t tests < <(gpu_test_labels)
    build_all "${tests[@]}" >"$work/logs/build.log" 2>&1
    stage_binaries "$work" "${tests[@]}"
    pack_psclient "$work" >>"$work/logs/build.log" 2>&1
    SOURCE="built here with bazel (no pack in $from)"
    DATA_DIR=$DATA_SRC
  else
    die "no pack at $from/gpu_pack.tar.xz and no bazel to build with"
  fi
}

# Whether every skip in a gtest log says "needs N GPUs" (the tests of NCCL
# across devices), on a machine with fewer than N.
only_multi_gpu_skips() { # LOG
  local gpus reason n
  gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
  while read -r reason; do
    [[ $reason =~ ^needs\ ([0-9]+)\ GPUs ]] || return 1
    n=${BASH_REMATCH[1]}
    ((gpus < n)) || return 1
  done < <(grep -A1 ': Skipped$' "$1" | grep -v -e ': Skipped$' -e '^--$')
}

# Runs each packed test binary; one TSV line per test in WORK/tests.tsv:
# name, status (pass/fail/skipped/timeout), seconds, rc, gtest's counts.
run_tests() { # WORK
  local work=$1 t rc start secs status log
  local -a tests
  read -r -a tests < <(sed -n 's/^tests=//p' "$work/MANIFEST")
  for t in "${tests[@]}"; do
    log=$work/logs/$t.log
    mkdir -p "$work/tmp/$t"
    start=$EPOCHREALTIME
    TEST_TMPDIR=$work/tmp/$t timeout -k 5 "$(step_timeout $TEST_TIMEOUT_S)" \
      "$work/bin/$t" --gtest_output="xml:$work/logs/$t.xml" >"$log" 2>&1
    rc=$?
    secs=$(awk -v a="$start" -v b="$EPOCHREALTIME" 'BEGIN { print b - a }')
    local passed skipped failed
    passed=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' "$log")
    skipped=$(sed -n 's/^\[  SKIPPED \] \([0-9]*\) test.*/\1/p' "$log")
    failed=$(sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' "$log")
    if ((rc == 124 || rc == 137)); then
      status=timeout
    elif ((rc != 0)); then
      status=fail
    elif [[ -n $skipped && $skipped != 0 ]] && ! only_multi_gpu_skips "$log"; then
      status=skipped # on a GPU machine a skip is no pass...
    elif [[ -n $skipped && $skipped != 0 ]]; then
      status=pass # ...unless every skip asked for more GPUs than there are
    else
      status=pass
    fi
    printf '%s\t%s\t%.1f\t%s\t%s\t%s\t%s\n' "$t" "$status" "$secs" "$rc" \
      "${passed:-0}" "${skipped:-0}" "${failed:-0}" >>"$work/tests.tsv"
    echo "gpu_check: $t $status (${secs%.*} s)"
  done
}

run_benchmark() { # WORK
  local work=$1
  timeout -k 5 "$(step_timeout $BENCH_TIMEOUT_S)" "$work/bin/gpu_check_benchmark" \
    >"$work/bench.json" 2>"$work/logs/gpu_check_benchmark.log"
  echo $? >"$work/bench.rc"
  echo "gpu_check: benchmark rc=$(cat "$work/bench.rc")"
}

# One BSP job on a fresh local cluster with both workerd on "gpu:0": its
# logs in WORK/logs/NAME, its exit code and psctl's last line in
# WORK/job_NAME.{rc,line}.
run_job() { # WORK NAME JOB_FILE EDIT TIMEOUT OVERLAP
  local work=$1 name=$2 jd=$1/job_$2 logs=$1/logs/$2 i limit rc
  local disable=true job=$1/job_$2/job.pbtxt
  [[ $6 == on ]] && disable=false
  mkdir -p "$jd" "$logs"
  if [[ $4 == - ]]; then cp "$3" "$job"; else sed -e "$4" "$3" >"$job"; fi
  cp "$LOCAL_CLUSTER"/cluster.pbtxt "$LOCAL_CLUSTER"/psd[01].pbtxt "$jd/"
  for i in 0 1; do
    sed -e 's|^devices: .*|devices: "gpu:0"|' \
      -e "s|^data_dir: .*|data_dir: \"$DATA_DIR\"|" \
      -e "s|^disable_overlap: .*|disable_overlap: $disable|" \
      "$LOCAL_CLUSTER/worker$i.pbtxt" >"$jd/worker$i.pbtxt"
  done
  local -a pids=()
  for i in 0 1; do
    "$work/bin/psd" --config="$jd/psd$i.pbtxt" >"$logs/psd$i.log" 2>&1 &
    pids+=($!)
  done
  for i in 0 1; do
    "$work/bin/workerd" --config="$jd/worker$i.pbtxt" \
      >"$logs/workerd$i.log" 2>&1 &
    pids+=($!)
  done
  # shellcheck disable=SC2064  # the pids are known now
  trap "kill -KILL ${pids[*]} 2>/dev/null" EXIT
  limit=$(step_timeout "$5")
  timeout -k 5 "$limit" "$work/bin/psctl" --cluster="$jd/cluster.pbtxt" \
    submit "$job" --wait --timeout=$((limit - 5)) >"$logs/psctl.log" 2>&1
  rc=$?
  stop_pids "${pids[@]}"
  trap - EXIT
  echo "$rc" >"$work/job_$name.rc"
  grep -o 'job=.*' "$logs/psctl.log" | tail -1 >"$work/job_$name.line"
  echo "gpu_check: $name BSP job rc=$rc $(cut -c1-100 "$work/job_$name.line")"
}

# PyTorch on the same GPU, the same model, data, init and schedule as the
# jobs of MODEL, in one process at the jobs' global batch (2 workers x 64):
# its RESULT line in WORK/peer_MODEL.json.
run_peer() { # WORK MODEL LR
  local work=$1 model=$2 log=$1/logs/torch_peer_$2.log
  timeout -k 5 "$(step_timeout $PEER_TIMEOUT_S)" python3 \
    tools/bench/torch_peer.py --mode single --device cuda --model "$model" \
    --batch 128 --lr "$3" --epochs 10 --threads 4 --data-dir "$DATA_DIR" \
    >"$log" 2>&1
  echo "gpu_check: $model PyTorch peer rc=$?"
  sed -n 's/^RESULT //p' "$log" | tail -1 >"$work/peer_$model.json"
}

# Writes OUTDIR/gpu_check.json and .md from WORK's results; prints the table.
summarise() { # WORK OUTDIR
  local work=$1 out=$2
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader \
    >"$work/gpu" 2>/dev/null || nvidia-smi -L >"$work/gpu"
  local spec name
  for spec in "${JOBS[@]}"; do
    read -r name _ <<<"$spec"
    selected "$name" && echo "$spec"
  done >"$work/jobs"
  python3 tools/gpu_check_summary.py "$work" "$out" "$SOURCE" \
    "$(git rev-parse HEAD 2>/dev/null)" "$((SECONDS - START))"
}

# Whether job NAME runs: GPU_CHECK_JOBS="name ..." names the ones that do
# (default: every one).
selected() { # NAME
  [[ -z ${GPU_CHECK_JOBS:-} || " $GPU_CHECK_JOBS " == *" $1 "* ]]
}

# Each JOBS line has its nine fields (a sed program with a space would
# split): checked before anything runs.
check_jobs() {
  local spec n
  for spec in "${JOBS[@]}"; do
    n=$(wc -w <<<"$spec")
    ((n == 9)) || die "JOBS line with $n fields, want 9: $spec"
  done
}

run_check() { # OUTDIR FROM
  local out=$1 from=$2 work rc
  if ! has_gpu; then
    echo "gpu_check: no GPU here (nvidia-smi missing, failing or listing none): nothing run"
    exit 0
  fi
  command -v python3 >/dev/null || die "python3 is needed for the summary"
  check_jobs
  START=$SECONDS
  DEADLINE=$((SECONDS + TOTAL_BUDGET_S))
  mkdir -p "$out" || die "cannot create $out"
  out=$(cd "$out" && pwd)
  from=$(cd "$from" 2>/dev/null && pwd || echo "$from")
  cd "$ROOT" || die "cannot enter the checkout $ROOT"
  work=$(mktemp -d /tmp/gpu_check.XXXXXX)
  mkdir -p "$work/logs"
  get_binaries "$work" "$from"
  echo "gpu_check: $SOURCE"
  set_library_path "$work"
  run_tests "$work"
  run_benchmark "$work"
  local spec name model job edit lr limit overlap
  for spec in "${JOBS[@]}"; do
    read -r name model job edit _ _ lr limit overlap <<<"$spec"
    selected "$name" || continue
    run_job "$work" "$name" "$job" "$edit" "$limit" "$overlap"
    [[ $model == - || -s $work/peer_$model.json ]] ||
      run_peer "$work" "$model" "$lr"
  done
  run_psclient "$work"
  summarise "$work" "$out"
  rc=$?
  tar -C "$work" -czf "$out/gpu_check_logs.tar.gz" logs bench.json MANIFEST \
    2>/dev/null
  exit $rc
}

main() {
  local mode="" dir="" from=""
  while (($#)); do
    case $1 in
      --pack) mode=pack dir=${2:-} && shift ;;
      --out) mode=out dir=${2:-} && shift ;;
      --from) from=${2:-} && shift ;;
      *) usage ;;
    esac
    shift
  done
  [[ -n $mode && -n $dir ]] || usage
  # The checkout: this script's folder's parent (plain bash: see has_gpu).
  local self=${BASH_SOURCE[0]}
  [[ $self == */* ]] && ROOT=${self%/*}/.. || ROOT=..
  if [[ $mode == pack ]]; then
    mkdir -p "$dir" || die "cannot create $dir"
    dir=$(cd "$dir" && pwd)
    cd "$ROOT" || die "cannot enter the checkout $ROOT"
    pack "$dir"
  else
    run_check "$dir" "${from:-$ROOT/.gpu}"
  fi
}

main "$@"
