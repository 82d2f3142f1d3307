#!/bin/bash
# The network lab at CI size (GitHub issue 13): tools/lab/netlab refuses bad
# input with exit 2 naming the bad value, removes a half-built lab on SIGINT,
# and a 3-host lab at 50 Mbit/s really shapes: iperf3 goodput from one host
# to another, and from two hosts into one, lies within [0.7, 1.05] x the cap;
# `shape 2 --rate=25mbit` (a straggler) caps host 2 at 25 Mbit/s both ways
# at once, and `shape 2` restores the lab's rate on both ends of its link.
# A psd started in host 1 on its lab address serves psctl in hosts 2 and 3
# and is out of reach of the root namespace; with a workerd in each of hosts
# 2 and 3 it runs a small lab job (ModelSpec.lab, 1M parameters, BSP) that
# psctl in host 2 submits: the job SUCCEEDS with all its steps, the workers
# exit after it, and it takes at least the time the cap allows for the bytes
# it moves (the shaping applies to the parameter-server traffic too).
# Every namespace, interface and process it makes is removed on exit, pass or
# fail, and the test fails if a namespace with its prefixes is left.
# Skips (exit 0, "SKIPPED: ...") without root, `ip netns` or iperf3.
set -u

skip() { echo "SKIPPED: $*"; exit 0; }
if [[ -n ${TEST_SRCDIR:-} ]]; then
  NETLAB="$TEST_SRCDIR/$TEST_WORKSPACE/tools/lab/netlab"
  PSD="$TEST_SRCDIR/$TEST_WORKSPACE/server/psd"
  PSCTL="$TEST_SRCDIR/$TEST_WORKSPACE/tools/psctl/psctl"
  WORKERD="$TEST_SRCDIR/$TEST_WORKSPACE/worker/workerd"
else
  NETLAB="$(cd "$(dirname "$0")/.." && pwd)/tools/lab/netlab"
  # outside Bazel: set PSD, PSCTL (and WORKERD) to run those parts
  PSD=${PSD:-} PSCTL=${PSCTL:-} WORKERD=${WORKERD:-}
fi
psd_pid=""
TMP=${TEST_TMPDIR:-$(mktemp -d)}
export PATH="/usr/sbin:/sbin:$PATH"

[[ $(id -u) -eq 0 ]] || skip "netlab_test needs root (network namespaces); running as uid $(id -u)"
command -v ip >/dev/null || skip "no 'ip' command (iproute2)"
command -v tc >/dev/null || skip "no 'tc' command (iproute2)"
command -v iperf3 >/dev/null || skip "no iperf3"
# Every name below starts with nl$$ (at most 9 characters: netlab prefixes
# are at most 10).
P="nl$$"
PROBE="${P}p"
ip netns add "$PROBE" 2>/dev/null || skip "cannot create a network namespace here ('ip netns add' failed)"
ip netns del "$PROBE"

FAILS=0
PIDS=()
fail() { echo "FAIL: $*"; FAILS=$((FAILS + 1)); }

# running PID: PID exists and is not a zombie.
running() {
  local st
  st=$(ps -o stat= -p "$1" 2>/dev/null)
  [[ -n $st && $st != Z* ]]
}

# describe PID: what a stuck process is doing (state, kernel wait channel,
# its children), for a failure message.
describe() {
  local c
  echo "pid $1: $(ps -o stat=,wchan:32=,args= -p "$1" 2>/dev/null)"
  for c in $(pgrep -P "$1"); do echo "  child $(ps -o pid=,stat=,wchan:32=,args= -p "$c" 2>/dev/null)"; done
}

# stop_within SECONDS PID: waits for our child PID to exit, at most SECONDS,
# and reaps it (its exit status in STOP_RC). One still running then is
# described and killed with its process group (a job started under `set -m`)
# and the function returns 1.
STOP_RC=0
stop_within() {
  local deadline=$((SECONDS + $1)) pid=$2
  while running "$pid" && ((SECONDS < deadline)); do
    sleep 0.05 # polls for another process's exit
  done
  if running "$pid"; then
    echo "still running after $1 s, killing: $(describe "$pid")"
    kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    STOP_RC=$?
    return 1
  fi
  wait "$pid" 2>/dev/null
  STOP_RC=$?
}

cleanup() {
  local rc=$? pid p
  # Stop our processes and wait for them, at most 8 s each (Bazel's timeout
  # leaves 15 s); what is left then is killed, so a stuck child can neither
  # hang the test past Bazel's timeout nor keep netlab's lock from the
  # `down`s below.
  for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null; done
  for pid in "${PIDS[@]}"; do stop_within 8 "$pid"; done
  for p in "$P" "${P}c" "${P}i"; do "$NETLAB" down --prefix="$p" >/dev/null 2>&1; done
  ip netns del "${P}c-h9" 2>/dev/null
  local left
  left=$(ip netns list | awk '{ print $1 }' | grep -E "^$P" || true)
  if [[ -n $left ]]; then
    echo "FAIL: namespaces left behind: $left"
    for p in $left; do ip netns del "$p"; done
    FAILS=$((FAILS + 1))
  fi
  if ip -o link show | grep -qE ": $P"; then
    echo "FAIL: interfaces left behind: $(ip -o link show | grep -oE ": ${P}[^:@]*" | tr -d ':')"
    FAILS=$((FAILS + 1))
  fi
  if ((FAILS == 0 && rc != 0)); then
    echo "netlab_test: stopped early (exit $rc)"
    exit "$rc"
  elif ((FAILS == 0)); then
    echo "netlab_test: passed"
  else
    echo "netlab_test: $FAILS failure(s)"
    exit 1
  fi
}
trap cleanup EXIT
trap 'exit 143' TERM # Bazel's timeout: still clean up
trap 'exit 130' INT

# expect_refused WANT_TEXT ARGS...: netlab ARGS exits 2 and says WANT_TEXT.
expect_refused() {
  local want=$1 rc
  shift
  "$NETLAB" "$@" >"$TMP/out" 2>&1
  rc=$?
  if [[ $rc -ne 2 ]]; then
    fail "netlab $* exited $rc, want 2: $(cat "$TMP/out")"
  elif ! grep -qF -- "$want" "$TMP/out"; then
    fail "netlab $*: message does not name '$want': $(cat "$TMP/out")"
  fi
}

# --- bad input ---------------------------------------------------------------
expect_refused "fast" up 3 --rate=fast --prefix="$P"
expect_refused "50mbps" up 3 --rate=50mbps --prefix="$P"
expect_refused "'0'" up 0 --rate=50mbit --prefix="$P"
expect_refused "'201'" up 201 --rate=50mbit --prefix="$P"
expect_refused "'x'" up x --rate=50mbit --prefix="$P"
expect_refused "--rate" up 3 --prefix="$P"
expect_refused "Bad" up 3 --rate=50mbit --prefix=Bad
expect_refused "frob" frob --prefix="$P"
if command -v setpriv >/dev/null; then
  # A copy that uid 65534 can read (the runfiles may sit under root's home).
  NOBODY_DIR=$(mktemp -d /tmp/netlab_test.XXXXXX)
  chmod 755 "$NOBODY_DIR"
  cp "$NETLAB" "$NOBODY_DIR/netlab" && chmod 755 "$NOBODY_DIR/netlab"
  setpriv --reuid=65534 --regid=65534 --clear-groups "$NOBODY_DIR/netlab" up 3 \
    --rate=50mbit --prefix="$P" >"$TMP/out" 2>&1
  rc=$?
  rm -rf "$NOBODY_DIR"
  [[ $rc -eq 2 ]] || fail "netlab as uid 65534 exited $rc, want 2"
  grep -q "root" "$TMP/out" || fail "netlab as uid 65534 does not say it needs root: $(cat "$TMP/out")"
fi
# A prefix whose namespaces exist (not made by netlab): refused, left alone.
ip netns add "${P}c-h9"
expect_refused "${P}c-h9" up 2 --rate=50mbit --prefix="${P}c"
[[ -e /run/netns/${P}c-h9 ]] || fail "the colliding namespace ${P}c-h9 was removed"
[[ ! -e /run/netlab/${P}c.state ]] || fail "a refused up left a state file"
ip netns del "${P}c-h9"
if ip netns list | grep -qE "^$P"; then fail "refused commands created namespaces"; fi

# --- SIGINT during up removes the partial lab ---------------------------------
# (job control on, so the background job does not ignore SIGINT)
set -m
"$NETLAB" up 100 --rate=50mbit --prefix="${P}i" >"$TMP/int.out" 2>&1 &
up_pid=$!
PIDS+=("$up_pid")
deadline=$((SECONDS + 60))
until grep -q "netns ${P}i-h2$" "/run/netlab/${P}i.state" 2>/dev/null; do
  if ((SECONDS > deadline)) || ! kill -0 "$up_pid" 2>/dev/null; then break; fi
  sleep 0.02 # polls for a file written by another process
done
# Ctrl-C signals the whole foreground process group (the `ip` that up is
# running too), not only the shell; do the same. Within 60 s up must have
# removed what it made and exited 130.
kill -INT -- "-$up_pid"
if ! stop_within 60 "$up_pid"; then
  fail "up still running 60 s after SIGINT (killed, see above): $(cat "$TMP/int.out")"
  "$NETLAB" down --prefix="${P}i" >/dev/null 2>&1
fi
rc=$STOP_RC
PIDS=() # reaped
set +m
if [[ $rc -ne 130 ]]; then
  fail "up interrupted by SIGINT exited $rc, want 130: $(cat "$TMP/int.out")"
fi
if ip netns list | grep -qE "^${P}i-"; then fail "SIGINT during up left namespaces"; fi
if ip -o link show | grep -qE ": ${P}i-"; then fail "SIGINT during up left interfaces"; fi
[[ ! -e /run/netlab/${P}i.state ]] || fail "SIGINT during up left its state file"

# --- a 3-host lab at 50 Mbit/s --------------------------------------------------
CAP=50000000
"$NETLAB" up 3 --rate=50mbit --prefix="$P" >"$TMP/out" 2>&1 || {
  fail "up 3 --rate=50mbit: $(cat "$TMP/out")"
  exit 1
}
expect_refused "already up" up 3 --rate=50mbit --prefix="$P"
expect_refused "'4'" --prefix="$P" exec 4 true
A1=$("$NETLAB" addr 1 --prefix="$P")
[[ $A1 =~ ^10\.213\.0\.1$ ]] || fail "addr 1: '$A1'"
[[ $("$NETLAB" list --prefix="$P" | wc -l) -eq 3 ]] || fail "list: want 3 hosts"
if ip route | grep -q "10.213.0"; then fail "the lab added a route to the root namespace"; fi

lab() { "$NETLAB" --prefix="$P" "$@"; }

# wait_listen HOST PORT: until something listens on PORT in HOST (<= 10 s).
wait_listen() {
  local deadline=$((SECONDS + 10))
  until lab exec "$1" ss -Hltn "sport = :$2" | grep -q .; do
    ((SECONDS < deadline)) || { fail "nothing listens on port $2 in host $1"; return 1; }
    sleep 0.05 # polls another process's listening socket
  done
}

# iperf_server HOST PORT: a one-shot iperf3 server, listening when this returns.
iperf_server() {
  lab exec "$1" iperf3 -s -1 -B "$A1" -p "$2" >"$TMP/server$2.out" 2>&1 &
  PIDS+=("$!")
  wait_listen "$1" "$2"
}

# goodput JSON_FILE [SUFFIX] -> received bits per second (integer); SUFFIX
# _bidir_reverse picks the reverse direction of a --bidir run.
goodput() {
  sed -n "/\"sum_received${2:-}\"/,/}/s/.*\"bits_per_second\":[[:space:]]*\\([0-9.e+]*\\).*/\\1/p" "$1" |
    head -1 | awk '{ printf "%.0f", $1 }'
}

# check_cap WHAT BPS [CAP_BPS]: BPS within [0.7, 1.05] x the cap (default CAP).
check_cap() {
  local cap=${3:-$CAP}
  echo "$1: $(awk -v b="$2" -v c="$cap" 'BEGIN { printf "%.1f Mbit/s (%.3f x cap)", b / 1e6, b / c }')"
  awk -v b="$2" -v c="$cap" 'BEGIN { exit !(b >= 0.7 * c && b <= 1.05 * c) }' ||
    fail "$1: $2 bit/s outside [0.7, 1.05] x $cap"
}

# One flow, host 2 -> host 1, 3 s.
if ! iperf_server 1 5201 ||
  ! lab exec 2 iperf3 -c "$A1" -p 5201 -t 3 -J >"$TMP/one.json" 2>&1; then
  fail "iperf3 host 2 -> host 1: $(cat "$TMP/one.json" 2>/dev/null)"
fi
check_cap "host 2 -> host 1" "$(goodput "$TMP/one.json")"

# Two flows into host 1 at once (hosts 2 and 3): the cap is per host, so
# together they get one cap's worth.
iperf_server 1 5202 && iperf_server 1 5203 && {
  lab exec 2 iperf3 -c "$A1" -p 5202 -t 3 -J >"$TMP/in2.json" 2>&1 &
  c2=$!
  lab exec 3 iperf3 -c "$A1" -p 5203 -t 3 -J >"$TMP/in3.json" 2>&1
  wait "$c2"
}
g2=$(goodput "$TMP/in2.json")
g3=$(goodput "$TMP/in3.json")
[[ -n $g2 && -n $g3 ]] || fail "iperf3 into host 1: $(cat "$TMP/in2.json" "$TMP/in3.json")"
check_cap "hosts 2 + 3 -> host 1" "$((${g2:-0} + ${g3:-0}))"

# A straggler: `shape 2 --rate=25mbit` re-caps both ends of host 2's link, so
# host 2 sends and receives at half the lab's rate at once (iperf3 --bidir
# with host 1); `shape 2` alone puts the lab's rate back on both ends.
expect_refused "'4'" --prefix="$P" shape 4 --rate=25mbit
expect_refused "25mbps" --prefix="$P" shape 2 --rate=25mbps
expect_refused "shape HOST" --prefix="$P" shape
SLOW=25000000
if ! lab shape 2 --rate=25mbit >"$TMP/shape.out" 2>&1; then
  fail "shape 2 --rate=25mbit: $(cat "$TMP/shape.out")"
elif iperf_server 1 5204 &&
  lab exec 2 iperf3 -c "$A1" -p 5204 -t 3 --bidir -J >"$TMP/slow.json" 2>&1; then
  check_cap "straggler host 2 -> host 1" "$(goodput "$TMP/slow.json")" "$SLOW"
  check_cap "host 1 -> straggler host 2" "$(goodput "$TMP/slow.json" _bidir_reverse)" "$SLOW"
else
  fail "iperf3 --bidir with the straggler: $(cat "$TMP/slow.json" 2>/dev/null)"
fi
lab shape 2 >"$TMP/shape.out" 2>&1 || fail "shape 2 (restore): $(cat "$TMP/shape.out")"
out=$(lab exec 2 tc qdisc show dev eth0)
[[ $out == *"rate 50Mbit"* ]] || fail "shape 2 left host 2's eth0 at: $out"
out=$(tc qdisc show dev "$P-v2")
[[ $out == *"rate 50Mbit"* ]] || fail "shape 2 left the bridge side $P-v2 at: $out"

# run_lab_job: with the psd of host 1 up, a workerd in hosts 2 and 3 each
# (max_jobs: 1, so they exit after the job) and a lab job submitted from host
# 2. Every pull reply leaves host 1 through its capped link, 4 MB (1M
# floats) each. While rank 0 runs (its train_s), rank 0 gets STEPS + 1 of
# them and rank 1 at least STEPS - 1 (BSP: rank 0's next step waits for rank
# 1's push, which waits for its reply), so train_s >= 2 * STEPS * 4 MB / cap.
LAB_STEPS=3
run_lab_job() {
  local fails_before=$FAILS h pid wpids=() deadline
  for h in 2 3; do
    cat >"$TMP/worker$h.pbtxt" <<PBTXT
cluster_file: "cluster.pbtxt"
name: "lab-worker$h"
devices: "cpu:0"
heartbeat_interval_ms: 200
max_jobs: 1
PBTXT
    lab exec "$h" "$WORKERD" --config="$TMP/worker$h.pbtxt" >"$TMP/worker$h.log" 2>&1 &
    PIDS+=("$!")
    wpids+=("$!")
  done
  cat >"$TMP/labjob.pbtxt" <<PBTXT
name: "netlab-lab"
model { lab { parameters: 1000000 layers: 4 compute_ms: 1 steps_per_epoch: $LAB_STEPS } }
data { batch_size: 32 epochs: 1 }
optimizer { kind: SGD learning_rate: 0.5 }
consistency { mode: BSP step_deadline_ms: 30000 }
num_workers: 2
PBTXT
  lab exec 2 "$PSCTL" submit "$TMP/labjob.pbtxt" --wait --timeout=40 \
    --cluster="$TMP/cluster.pbtxt" >"$TMP/labjob.out" 2>&1 ||
    fail "lab job: psctl submit --wait: $(cat "$TMP/labjob.out" "$TMP/worker2.log")"
  local summary
  summary=$(grep -o 'job=.*' "$TMP/labjob.out" | tail -1)
  [[ $summary == *"state=SUCCEEDED"* ]] || fail "lab job did not succeed: $summary"
  [[ $summary == *" steps=$LAB_STEPS "* ]] || fail "lab job: want steps=$LAB_STEPS: $summary"
  local train_s
  train_s=$(sed -n 's/.* train_s=\([0-9.]*\).*/\1/p' <<<"$summary")
  local bound
  bound=$(awk -v s="$LAB_STEPS" -v c="$CAP" 'BEGIN { printf "%.2f", 2 * s * 4e6 * 8 / c }')
  awk -v t="${train_s:-0}" -v b="$bound" 'BEGIN { exit !(t >= 0.9 * b) }' ||
    fail "lab job took ${train_s:-?} s, less than 0.9 x the cap's bound of $bound s"
  # The workers leave after their one job, exit code 0.
  for pid in "${wpids[@]}"; do
    deadline=$((SECONDS + 15))
    while running "$pid" && ((SECONDS < deadline)); do
      sleep 0.1 # polls for another process's exit
    done
    if running "$pid"; then
      fail "workerd $pid still running 15 s after its job"
    elif ! wait "$pid"; then
      fail "workerd $pid exited non-zero: $(cat "$TMP/worker2.log" "$TMP/worker3.log")"
    fi
  done
  ((FAILS > fails_before)) ||
    echo "lab job in hosts 1-3: SUCCEEDED, $LAB_STEPS steps in $train_s s (cap bound $bound s)"
}

# --- a psd in host 1, psctl from hosts 2 and 3 ----------------------------------
# The shard binds port 0 on host 1's lab address and writes the address it
# bound to a file that the cluster file names; psctl in the other hosts reads
# it, and the root namespace, which has no route into the lab, cannot connect.
if [[ -x $PSD && -x $PSCTL ]]; then
  fails_before=$FAILS
  cat >"$TMP/cluster.pbtxt" <<'PBTXT'
shards { address_file: "psd0.addr" }
coordinator_shard: 0
PBTXT
  cat >"$TMP/psd0.pbtxt" <<PBTXT
listen_address: "$A1:0"
shard_id: 0
cluster_file: "cluster.pbtxt"
address_file: "psd0.addr"
memory_budget_bytes: 268435456
PBTXT
  lab exec 1 "$PSD" --config="$TMP/psd0.pbtxt" >"$TMP/psd.log" 2>&1 &
  psd_pid=$!
  PIDS+=("$psd_pid")
  deadline=$((SECONDS + 20))
  until [[ -s $TMP/psd0.addr ]]; do
    if ((SECONDS > deadline)) || ! kill -0 "$psd_pid" 2>/dev/null; then
      fail "psd did not write its address: $(cat "$TMP/psd.log")"
      break
    fi
    sleep 0.05 # polls for a file written by psd
  done
  psd_addr=$(cat "$TMP/psd0.addr" 2>/dev/null)
  [[ $psd_addr == "$A1":* ]] || fail "psd address '$psd_addr', want $A1:PORT"
  for h in 2 3; do
    lab exec "$h" "$PSCTL" stats --cluster="$TMP/cluster.pbtxt" >"$TMP/stats$h.out" 2>&1 ||
      fail "psctl stats from host $h: $(cat "$TMP/stats$h.out")"
    grep -qF "$psd_addr" "$TMP/stats$h.out" || fail "psctl stats from host $h does not show $psd_addr"
  done
  "$PSCTL" list --cluster="$TMP/cluster.pbtxt" --connect-timeout=1 >"$TMP/root.out" 2>&1 &&
    fail "psctl in the root namespace reached the lab: $(cat "$TMP/root.out")"
  ((FAILS > fails_before)) ||
    echo "psd on $psd_addr (host 1): psctl stats from hosts 2 and 3 ok, root namespace cut off"
  if [[ -z $psd_addr ]]; then
    : # no psd: reported above
  elif [[ -x $WORKERD ]]; then
    run_lab_job
  elif [[ -n ${TEST_SRCDIR:-} ]]; then
    fail "no workerd in the runfiles ($WORKERD)"
  else
    echo "note: WORKERD not set; the lab job did not run"
  fi
elif [[ -n ${TEST_SRCDIR:-} ]]; then
  fail "no psd or psctl in the runfiles ($PSD, $PSCTL)"
else
  echo "note: PSD and PSCTL not set; the psd-in-the-lab check did not run"
fi

lab down
if [[ -n $psd_pid ]]; then
  # Gone or a zombie (our child, not yet reaped): down stopped it.
  state=$(ps -o stat= -p "$psd_pid" 2>/dev/null)
  [[ -z $state || $state == Z* ]] || fail "down left psd running (state $state)"
  wait "$psd_pid" 2>/dev/null
fi
[[ ! -e /run/netlab/$P.state ]] || fail "down left its state file"
lab down || fail "a second down failed"
