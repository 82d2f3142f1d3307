# Sourced by the scripts that start daemons (tools/demo.sh, tools/fault_drill.sh,
# tools/gpu_check.sh, tools/bench/*.sh):
#
#   source "$(dirname "$0")/lib/daemons.sh"
#   wait_log_line 'registered with' 60 "$DIR"/worker{0,1}.log
#   stop_pids "${PIDS[@]}"
#
# stop_pids PID...: SIGTERM every PID (the daemons drain and exit cleanly on
# it), wait up to 10 s for all of them, SIGKILL whatever is left, then reap
# them. PIDs must be children of the calling shell for the reaping; others
# are still stopped. Returns 0.
stop_pids() {
  (($# == 0)) && return 0
  kill -TERM "$@" 2>/dev/null || true
  local alive p i
  for ((i = 0; i < 100; i++)); do
    alive=0
    for p in "$@"; do kill -0 "$p" 2>/dev/null && alive=1; done
    ((alive)) || break
    sleep 0.1
  done
  kill -KILL "$@" 2>/dev/null || true
  for p in "$@"; do wait "$p" 2>/dev/null || true; done
  return 0
}

# wait_log_line PATTERN SECONDS FILE...: polls each FILE every 0.1 s, up to
# SECONDS per file, until it holds a line matching PATTERN (grep). Returns 0
# either way: what follows (psctl, which waits itself) reports a daemon that
# never got there.
wait_log_line() {
  local pattern=$1 tenths=$(($2 * 10)) f i
  shift 2
  for f in "$@"; do
    for ((i = 0; i < tenths; i++)); do
      grep -q "$pattern" "$f" 2>/dev/null && break
      sleep 0.1
    done
  done
  return 0
}
