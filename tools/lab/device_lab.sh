#!/usr/bin/env bash
# The network lab's W = 8 rows (docs/SCALING.md) on a machine with cores to
# spare: the GPU machine of the `device` tool (16 cores), which has neither
# iproute2 nor iperf3 nor bazel.
#
#   tools/lab/device_lab.sh --pack DIR    # here, after tools/gpu_check.sh --pack DIR:
#                                         # ip, tc and iperf3 and the libraries
#                                         # they need into DIR/labtools
#   tools/lab/device_lab.sh --out OUT [--from DIR] [--paced] [RATE:PARAMS:STEPS...]
#                                         # there: for each row (default
#                                         # 1gbit:10M:15 1gbit:100M:5) a 16-host
#                                         # lab at RATE and tools/lab/scaling.py
#                                         # W = 8, S = 8, BSP and ASP, into
#                                         # OUT/w8-RATE-PARAMS/results.json
#
# The daemons come from gpu_check's pack (DIR/gpu_pack.tar.xz: psd, workerd,
# psctl and their libraries); the all-reduce peer is gloo in the machine's
# python3 (PyTorch). --paced runs the lab's recommended setting for a paced
# bandwidth-bound job (--pacing, 128 KiB partitions and requests, 2 requests
# in flight per shard) and only the parameter-server rows. The lab is taken
# down after each row, also on failure. Exit status: scaling.py's worst.
set -uo pipefail

die() { echo "device_lab: $*" >&2; exit 2; }
ROOT=$(cd "$(dirname "$0")/../.." && pwd)

pack() { # DIR
  local dir=$1/labtools tool lib
  [[ -f $1/gpu_pack.tar.xz ]] || die "no $1/gpu_pack.tar.xz: run tools/gpu_check.sh --pack $1 first"
  rm -rf "$dir" && mkdir -p "$dir/lib"
  for tool in ip tc iperf3; do
    command -v "$tool" >/dev/null || die "$tool is missing here (iproute2, iperf3)"
    cp "$(command -v "$tool")" "$dir/"
    ldd "$(command -v "$tool")" | awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }'
  done | sort -u | while read -r lib path; do
    case $lib in libc.so* | libm.so* | ld-linux*) continue ;; esac
    cp -L "$path" "$dir/lib/$lib"
  done
  local -a libs=("$dir"/lib/*)
  echo "device_lab: packed ip, tc, iperf3 and ${#libs[@]} libraries into $dir"
}

run() { # OUT FROM PACED ROWS...
  local out=$1 from=$2 paced=$3 work rc=0 row rate params steps
  shift 3
  local -a rows=("$@") extra=()
  ((${#rows[@]})) || rows=(1gbit:10M:15 1gbit:100M:5)
  [[ -f $from/gpu_pack.tar.xz && -x $from/labtools/ip ]] ||
    die "no pack in $from: run --pack $from here (after gpu_check's --pack)"
  mkdir -p "$out"
  work=$(mktemp -d /tmp/device_lab.XXXXXX)
  # shellcheck disable=SC2064  # expands now: work is local
  trap "rm -rf '$work'" EXIT
  tar -C "$work" -xJf "$from/gpu_pack.tar.xz" || die "cannot unpack $from/gpu_pack.tar.xz"
  mkdir -p "$work/bazel-bin/server" "$work/bazel-bin/worker" "$work/bazel-bin/tools/psctl"
  ln -s "$work/bin/psd" "$work/bazel-bin/server/psd"
  ln -s "$work/bin/workerd" "$work/bazel-bin/worker/workerd"
  ln -s "$work/bin/psctl" "$work/bazel-bin/tools/psctl/psctl"
  export PATH="$from/labtools:$PATH" PYTHON=${PYTHON:-$(command -v python3)}
  export LD_LIBRARY_PATH="$from/labtools/lib:$work/lib"
  ((paced)) && extra=(--pacing --partition-bytes=131072 --systems=ps --tcp-seconds=0
    "--worker-config=max_request_bytes: 131072 max_inflight_per_shard: 2")
  echo "device_lab: $(nproc) cores, $(uname -r), peer python $PYTHON"
  for row in "${rows[@]}"; do
    IFS=: read -r rate params steps <<<"$row"
    "$ROOT/tools/lab/netlab" up 16 --rate="$rate" || { rc=1; continue; }
    timeout 500 "$PYTHON" "$ROOT/tools/lab/scaling.py" --params="$params" --workers=8 \
      --shards=8 --modes="bsp asp" --steps="$steps" --bin="$work/bazel-bin" \
      --out="$out/w8-$rate-$params" "${extra[@]}" || rc=$((rc > 0 ? rc : 1))
    "$ROOT/tools/lab/netlab" down
  done
  return $rc
}

main() {
  local mode="" dir="" out="" from="$ROOT/.gpu" paced=0
  local -a rows=()
  while (($#)); do
    case $1 in
      --pack) mode=pack dir=${2:-} && shift ;;
      --out) mode=run out=${2:-} && shift ;;
      --from) from=${2:-} && shift ;;
      --paced) paced=1 ;;
      *:*:*)
        [[ $1 =~ ^[0-9.]+[kmg]bit:[0-9.]+[KMG]?:[1-9][0-9]*$ ]] ||
          die "bad row '$1' (RATE:PARAMS:STEPS, e.g. 1gbit:10M:15)"
        rows+=("$1") ;;
      *) die "unknown argument '$1' (see the head of $0)" ;;
    esac
    shift
  done
  [[ $(id -u) == 0 ]] || die "needs root (the lab's namespaces)"
  case $mode in
    pack) [[ -n $dir ]] || die "--pack DIR"; pack "$dir" ;;
    run) [[ -n $out ]] || die "--out OUT"; run "$out" "$from" "$paced" "${rows[@]}" ;;
    *) die "--pack DIR or --out OUT" ;;
  esac
}

main "$@"
