# Sourced by tools/bench/bench_scale.sh, bench_reshard.sh and
# bench_ctr_rows.sh (after tools/lib/daemons.sh): a local cluster for a
# benchmark, ports picked by the kernel, stopped when the script exits.
#
#   source tools/lib/daemons.sh
#   source tools/lib/bench_cluster.sh
#   bench_binaries bench_x "$BIN"           # exit 2 naming a missing binary
#   bench_dir bench_x ps-x                  # DIR, PIDS=(), the EXIT trap
#   start_shards 3 'memory_budget_bytes: 1' # cluster.pbtxt + 3 psd (PSD_PIDS)
#   start_workers 2 "$(grep -v '^name:' configs/local/worker0.pbtxt)"
#   PSCTL=("$BIN/tools/psctl/psctl" --cluster="$DIR/cluster.pbtxt" ...)
#
# Each psd's config is cluster_file, shard_id and address_file (s<i>.addr),
# then the extra lines given; each workerd's is the lines given, then
# cluster_file and its name (worker<i>). Logs: $DIR/psd<i>.log and
# $DIR/worker<i>.log.

# bench_binaries NAME BIN: exits 2 unless BIN holds psd, workerd and psctl.
bench_binaries() {
  local b
  for b in server/psd worker/workerd tools/psctl/psctl; do
    [[ -x $2/$b ]] || {
      echo "$1: $2/$b missing: bazel build it first" >&2
      exit 2
    }
  done
}

# bench_dir NAME PREFIX: DIR (a new /tmp/PREFIX.XXXXXX, printed), PIDS and
# PSD_PIDS empty, and the traps that stop every PID when the script exits.
bench_dir() {
  DIR=$(mktemp -d "/tmp/$2.XXXXXX")
  echo "$1: logs in $DIR"
  PIDS=()
  PSD_PIDS=()
  trap bench_cleanup EXIT
  trap 'exit 130' INT TERM
}

bench_cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  stop_pids "${PIDS[@]}"
  exit $rc
}

# start_shards N [LINES]: $DIR/cluster.pbtxt with N shards (shard 0 the
# coordinator) and N psd started on it.
start_shards() {
  local i
  for ((i = 0; i < $1; i++)); do
    printf 'shards { address_file: "s%d.addr" }\n' "$i"
  done >"$DIR/cluster.pbtxt"
  echo 'coordinator_shard: 0' >>"$DIR/cluster.pbtxt"
  for ((i = 0; i < $1; i++)); do
    {
      printf 'cluster_file: "cluster.pbtxt"\nshard_id: %d\naddress_file: "s%d.addr"\n' "$i" "$i"
      [[ -n ${2:-} ]] && echo "$2"
    } >"$DIR/psd$i.pbtxt"
    "$BIN/server/psd" --config="$DIR/psd$i.pbtxt" >"$DIR/psd$i.log" 2>&1 &
    PIDS+=($!)
    PSD_PIDS+=($!)
  done
}

# start_workers N LINES: N workerd, each with LINES (WorkerdConfig fields),
# the cluster file and its name.
start_workers() {
  local i
  for ((i = 0; i < $1; i++)); do
    {
      echo "$2"
      printf 'cluster_file: "cluster.pbtxt"\nname: "worker%d"\n' "$i"
    } >"$DIR/worker$i.pbtxt"
    "$BIN/worker/workerd" --config="$DIR/worker$i.pbtxt" >"$DIR/worker$i.log" 2>&1 &
    PIDS+=($!)
  done
}
