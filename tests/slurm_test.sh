#!/bin/bash
# tools/slurm/ps_job.sbatch against a real Slurm on this one machine (GitHub
# issue 17): starts munged, slurmctld and 3 slurmd (nodes n1..n3, all on
# 127.0.0.1 with ports the kernel picked free), everything under one
# temporary directory with its own slurm.conf (SLURM_CONF) and munge socket.
#   1. A heterogeneous job (1 shard node, 2 worker nodes) trains softmax on
#      Fashion-MNIST: Slurm records COMPLETED (exit 0:0) for both
#      components and psctl reports SUCCEEDED with test accuracy >= 0.78.
#   2. A worker node is taken away mid-job (its workerd killed with SIGKILL,
#      the node drained with a reason): the job (on_worker_failure: SHRINK)
#      SUCCEEDS on the other worker (the coordinator logs the loss), Slurm
#      records COMPLETED for the batch script, the lost task (signal 9) in
#      component 1's DerivedExitCode (its jobcomp record), srun's report
#      of n3's task, and n3 drained with the reason. (Marking the node DOWN instead makes
#      Slurm 22.05 end the whole heterogeneous job, NODE_FAIL, even with
#      --no-kill on every component: docs/SLURM.md.)
#   4. scancel mid-job (run before 3): every daemon of the job exits within
#      Slurm's KillWait, psd stops cleanly on the SIGTERM and writes its last
#      checkpoint, Slurm records CANCELLED.
#   5. (run before 3) A worker node added to a running elastic job by a
#      second sbatch (tools/slurm/ps_workers.sbatch), then the job scaled
#      back with psctl scale: the added Slurm job ends COMPLETED 0:0 while
#      the training job runs on, and the training job SUCCEEDS.
#   6. (run before 3) A server node drained with the job going on: two shard
#      nodes, `psctl scale --drain=1` moves the job's chunks off shard 1,
#      then n2's psd is stopped and n2 drained; the job SUCCEEDS.
#   3. Bad input: the script outside Slurm, and with a node list scontrol
#      cannot expand, exits 2 naming the variable and writes nothing.
# Every daemon, process and file it started is removed on exit, pass or
# fail; the test fails if a process holding files in its directory is left.
# SLURM_TEST_KEEP=1 keeps the directory (logs, job files) for debugging.
# Skips (exit 0, "SKIPPED: ...") without Slurm and munge, or without root.
set -u
export PATH="/usr/sbin:/sbin:$PATH"

skip() { echo "SKIPPED: $*"; exit 0; }
if [[ -n ${TEST_SRCDIR:-} ]]; then
  HOME_DIR="$TEST_SRCDIR/$TEST_WORKSPACE"
else  # outside Bazel: PS_BIN names the built binaries
  HOME_DIR="$(cd "$(dirname "$0")/.." && pwd)"
fi
BIN=${PS_BIN:-$HOME_DIR}
DATA=/usr/share/datasets/fashion-mnist
for c in sbatch scontrol squeue sinfo slurmctld slurmd munged mungekey; do
  command -v "$c" >/dev/null ||
    skip "no '$c': Slurm and munge are not installed (tools/setup.sh --test installs them)"
done
[[ $(id -u) -eq 0 ]] || skip "slurm_test runs slurmd as root; running as uid $(id -u)"
[[ -d $DATA ]] || skip "no Fashion-MNIST in $DATA (tools/setup.sh installs it)"

# A short path: the munge socket name must fit in sockaddr_un.
TMP=$(mktemp -d /tmp/pss.XXXXXX)
chmod 755 "$TMP"  # munged wants its socket directory open to all
FAILS=0
DAEMONS=()
fail() { echo "FAIL: $*"; FAILS=$((FAILS + 1)); }
now_ms() { date +%s%3N; }

# Processes whose working directory or an open file lies under $TMP: the
# daemons, slurmstepd (its log), the job's tasks (their output).
ours() {
  local p
  for p in /proc/[0-9]*; do
    [[ ${p#/proc/} == "$$" ]] && continue
    if [[ $(readlink "$p/cwd" 2>/dev/null) == "$TMP"* ]] ||
      ls -l "$p/fd" 2>/dev/null | grep -q -- "-> $TMP/"; then
      echo "${p#/proc/}"
    fi
  done
}
cleanup() {
  trap - EXIT INT TERM
  local left i deadline
  cd / || true  # this shell is not one of ours()
  # Jobs first (their steps end through slurmd), then slurmd, slurmctld
  # and munged, in the reverse order of their start.
  if [[ -n ${SLURM_CONF:-} ]] && [[ -S $TMP/run/munge.sock ]]; then
    scancel --user=root --partition=pstest >/dev/null 2>&1
    deadline=$(($(now_ms) + 20000))
    while [[ -n $(squeue -h 2>/dev/null) ]] && (($(now_ms) < deadline)); do
      sleep 0.1  # polls: the jobs end through slurmctld
    done
  fi
  for ((i = ${#DAEMONS[@]} - 1; i >= 0; --i)); do
    kill -TERM "${DAEMONS[i]}" 2>/dev/null
    deadline=$(($(now_ms) + 10000))
    while kill -0 "${DAEMONS[i]}" 2>/dev/null && (($(now_ms) < deadline)); do
      sleep 0.1  # polls: each daemon exits on SIGTERM
    done
  done
  deadline=$(($(now_ms) + 10000))
  while [[ -n $(ours) ]] && (($(now_ms) < deadline)); do
    sleep 0.1  # polls: orphaned slurmstepd exit on their own
  done
  left=$(ours)
  if [[ -n $left ]]; then
    echo "FAIL: processes left running, killed: $(ps -o pid=,args= -p $(echo $left | tr ' ' ,) 2>/dev/null)"
    kill -KILL $left 2>/dev/null
    FAILS=$((FAILS + 1))
  fi
  wait 2>/dev/null
  if ((FAILS)); then
    echo "--- logs"
    tail -n 20 "$TMP"/log/slurmctld.log "$TMP"/work/slurm-*.out "$TMP"/work/ps-*/*.log 2>/dev/null
  fi
  if [[ -n ${SLURM_TEST_KEEP:-} ]]; then  # for debugging: keep the files
    echo "slurm_test: files kept in $TMP"
  else
    rm -rf "$TMP"
  fi
  echo "slurm_test: $FAILS failure(s)"
  exit $((FAILS > 0))
}
trap cleanup EXIT
trap 'exit 1' INT TERM

# wait_for DESCRIPTION SECONDS CMD...: polls CMD every 0.1 s until it
# succeeds; false after SECONDS.
wait_for() {
  local what=$1 deadline=$(($(now_ms) + $2 * 1000))
  shift 2
  until "$@" >/dev/null 2>&1; do
    if (($(now_ms) >= deadline)); then
      fail "timed out waiting for $what"
      return 1
    fi
    sleep 0.1
  done
}
free_port() {
  /usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# --- munge and Slurm.
mkdir -p "$TMP"/{run,log,state,work}
chmod 755 "$TMP/run"
mungekey -c -k "$TMP/munge.key" || exit 1
munged -F --socket="$TMP/run/munge.sock" --key-file="$TMP/munge.key" \
  --log-file="$TMP/log/munged.log" --pid-file="$TMP/run/munged.pid" \
  --seed-file="$TMP/munged.seed" >"$TMP/log/munged.out" 2>&1 &
DAEMONS+=($!)
wait_for "munged" 10 test -S "$TMP/run/munge.sock" || exit 1

HOST=$(hostname)
export SLURM_CONF="$TMP/slurm.conf"
{
  echo "ClusterName=pstest"
  echo "SlurmctldHost=$HOST(127.0.0.1)"
  echo "SlurmctldPort=$(free_port)"
  echo "SlurmUser=root"
  echo "AuthType=auth/munge"
  echo "CredType=cred/munge"
  echo "AuthInfo=socket=$TMP/run/munge.sock"
  echo "ProctrackType=proctrack/linuxproc"
  echo "TaskPlugin=task/none"
  echo "SelectType=select/cons_tres"
  echo "SelectTypeParameters=CR_CPU"
  echo "SlurmdParameters=config_overrides"
  # Heterogeneous jobs start from the backfill scheduler (default 30 s).
  echo "SchedulerParameters=bf_interval=1"
  echo "MpiDefault=none"
  echo "ReturnToService=2"
  echo "KillWait=5"
  echo "StateSaveLocation=$TMP/state"
  echo "SlurmdSpoolDir=$TMP/spool%n"
  echo "SlurmctldPidFile=$TMP/run/slurmctld.pid"
  echo "SlurmdPidFile=$TMP/run/slurmd%n.pid"
  echo "SlurmctldLogFile=$TMP/log/slurmctld.log"
  echo "SlurmdLogFile=$TMP/log/slurmd%n.log"
  echo "JobCompType=jobcomp/filetxt"
  echo "JobCompLoc=$TMP/log/jobcomp.txt"
  for n in 1 2 3; do
    echo "NodeName=n$n NodeHostname=$HOST NodeAddr=127.0.0.1 Port=$(free_port) CPUs=2 RealMemory=4000"
  done
  echo "PartitionName=pstest Nodes=n[1-3] Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4"
} >"$SLURM_CONF"
slurmctld -D -i -f "$SLURM_CONF" >"$TMP/log/slurmctld.out" 2>&1 &
DAEMONS+=($!)
for n in 1 2 3; do
  slurmd -D -N "n$n" -f "$SLURM_CONF" >"$TMP/log/slurmd-n$n.out" 2>&1 &
  DAEMONS+=($!)
done
three_idle() { [[ $(sinfo -h -N -o "%N %t" | grep -c " idle$") == 3 ]]; }
wait_for "3 idle nodes (sinfo)" 60 three_idle || exit 1
echo "slurm_test: Slurm up: $(sinfo -h -N -o '%N:%t' | tr '\n' ' ')"

export PS_HOME=$HOME_DIR PS_BIN=$BIN
SBATCH="$HOME_DIR/tools/slurm/ps_job.sbatch"
cd "$TMP/work" || exit 1
printf 'worker_timeout_ms: 3000\n' >psd_extra.pbtxt
printf 'heartbeat_interval_ms: 200\n' >workerd_extra.pbtxt

# submit JOB.pbtxt: sbatch it, prints the Slurm job id.
submit() {
  sbatch --parsable --output="$TMP/work/slurm-%j.out" "$SBATCH" "$1" \
    --psd-config=psd_extra.pbtxt --workerd-config=workerd_extra.pbtxt \
    --address-timeout=60 --timeout=300
}
# field JOBID OFFSET KEY: KEY's value in `scontrol show job` of component
# OFFSET of heterogeneous job JOBID.
field() {
  scontrol show job "$1+$2" 2>/dev/null | grep -o "\b$3=[^ ]*" | head -n 1 | cut -d= -f2
}
# jobcomp JOBID OFFSET KEY: KEY's value in Slurm's completion record
# (JobCompType=jobcomp/filetxt) of component OFFSET of JOBID; it has
# DerivedExitCode, the worst exit of the component's steps, which scontrol
# show job does not (it is sacct's, and there is no accounting database).
jobcomp() {
  grep " HetJobId=$1 HetJobOffset=$2 " "$TMP/log/jobcomp.txt" 2>/dev/null |
    tail -n 1 | tr ' ' '\n' | grep "^$3=" | cut -d= -f2
}
ended() {
  [[ $(field "$1" 0 JobState) =~ ^(COMPLETED|FAILED|CANCELLED|NODE_FAIL|TIMEOUT)$ ]]
}
# summary JOBID KEY: KEY's value in the summary line psctl printed.
summary() {
  grep "^job=" "$TMP/work/slurm-$1.out" | tail -n 1 | tr ' ' '\n' | grep "^$2=" | cut -d= -f2
}

# --- Case 1: a job that completes.
cat >softmax.pbtxt <<'EOF'
name: "slurm-softmax"
model { softmax { input_dim: 784 num_classes: 10 } }
data { dataset: "fashion-mnist" batch_size: 128 epochs: 1 }
optimizer { kind: ADAM learning_rate: 0.001 }
consistency { mode: BSP }
num_workers: 2
seed: 7
EOF
start=$(now_ms)
id=$(submit softmax.pbtxt) || fail "sbatch failed"
if [[ -n ${id:-} ]] && wait_for "job $id to end" 180 ended "$id"; then
  echo "slurm_test: case 1: job $id ended in $(($(now_ms) - start)) ms"
  for c in 0 1; do
    [[ $(field "$id" $c JobState) == COMPLETED ]] ||
      fail "case 1: component $c JobState=$(field "$id" $c JobState), want COMPLETED"
    [[ $(field "$id" $c ExitCode) == 0:0 ]] ||
      fail "case 1: component $c ExitCode=$(field "$id" $c ExitCode), want 0:0"
  done
  [[ $(summary "$id" state) == SUCCEEDED ]] || fail "case 1: psctl state=$(summary "$id" state)"
  acc=$(summary "$id" test_accuracy)
  /usr/bin/python3 -c "import sys; sys.exit(not float('${acc:-0}') >= 0.78)" ||
    fail "case 1: test_accuracy=${acc:-none}, want >= 0.78"
  echo "slurm_test: case 1: COMPLETED, test_accuracy=$acc"
  grep -q "signal 15: shutting down" "ps-$id/psd0.log" ||
    fail "case 1: psd did not stop on SIGTERM"
fi

# --- Case 2: a worker node taken away mid-job.
cat >shrink.pbtxt <<'EOF'
name: "slurm-shrink"
model { mlp { input_dim: 784 hidden: 64 num_classes: 10 } }
data { dataset: "fashion-mnist" batch_size: 64 epochs: 8 }
optimizer { kind: SGD learning_rate: 0.05 momentum: 0.9 }
consistency { mode: BSP }
num_workers: 2
seed: 42
on_worker_failure: SHRINK
EOF
id=$(submit shrink.pbtxt) || fail "sbatch failed"
training() {  # the job has taken steps
  "$BIN/tools/psctl/psctl" --cluster="ps-$1/cluster.pbtxt" status job-000001 |
    grep -q "RUNNING step [1-9]"
}
if [[ -n ${id:-} ]] && wait_for "job $id to train" 120 training "$id"; then
  # The task of n3: the workerd whose config names n3. pgrep, not a scan of
  # every process's open files (ours): the job trains for only seconds, and
  # on a busy machine that scan outlasted it.
  victim=""
  for p in $(pgrep -f -- "ps-$id/workerd-n3.pbtxt"); do
    [[ $(readlink "/proc/$p/cwd" 2>/dev/null) == "$TMP"* ]] && victim=$p
  done
  if [[ -z $victim ]]; then
    fail "case 2: no workerd of n3 found"
  else
    kill -KILL "$victim"
    scontrol update NodeName=n3 State=DRAIN Reason="slurm_test: worker node lost"
    echo "slurm_test: case 2: killed n3's workerd (pid $victim), drained n3"
  fi
  if wait_for "job $id to end" 180 ended "$id"; then
    [[ $(field "$id" 0 JobState) == COMPLETED ]] ||
      fail "case 2: JobState=$(field "$id" 0 JobState), want COMPLETED"
    [[ $(summary "$id" state) == SUCCEEDED ]] || fail "case 2: psctl state=$(summary "$id" state)"
    [[ $(jobcomp "$id" 1 DerivedExitCode) == 0:9 ]] ||
      fail "case 2: component 1 DerivedExitCode=$(jobcomp "$id" 1 DerivedExitCode), want 0:9 (the killed task)"
    grep -q "n3: task 1: Killed" "slurm-$id.out" || fail "case 2: srun did not report n3's task"
    grep -q "(rank [01], n3) lost: .*; continuing with ranks" "ps-$id/psd0.log" ||
      fail "case 2: the coordinator did not shrink the job to the other worker"
    node=$(scontrol show node n3)
    [[ $node =~ State=[A-Z+]*DRAIN && $node =~ "Reason=slurm_test: worker node lost" ]] ||
      fail "case 2: n3 is not drained with the reason: $node"
    echo "slurm_test: case 2: COMPLETED, test_accuracy=$(summary "$id" test_accuracy)," \
      "component 1 DerivedExitCode=$(jobcomp "$id" 1 DerivedExitCode)"
  fi
fi

# --- Case 4 (before 3, on the same cluster): scancel mid-job.
cat >ckpt.pbtxt <<'EOF'
name: "slurm-scancel"
model { mlp { input_dim: 784 hidden: 64 num_classes: 10 } }
data { dataset: "fashion-mnist" batch_size: 64 epochs: 20 }
optimizer { kind: SGD learning_rate: 0.05 momentum: 0.9 }
consistency { mode: BSP }
num_workers: 2
seed: 42
checkpoint { every_seconds: 3600 }
EOF
daemons_of() {  # the psd and workerd processes of Slurm job $1
  local p
  for p in $(ours); do
    tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | grep -q -- "--config=$TMP/work/ps-$1/" &&
      echo "$p"
  done
}
none_left() { [[ -z $(daemons_of "$1") ]]; }
scontrol update NodeName=n3 State=RESUME  # back from case 2
wait_for "3 idle nodes after case 2" 60 three_idle
id=$(submit ckpt.pbtxt) || fail "sbatch failed"
if [[ -n ${id:-} ]] && wait_for "job $id to train" 120 training "$id"; then
  start=$(now_ms)
  scancel "$id"
  # KillWait=5: Slurm's SIGKILL comes 5 s after the SIGTERM.
  if wait_for "job $id's daemons to exit after scancel" 15 none_left "$id"; then
    echo "slurm_test: case 4: daemons gone $(($(now_ms) - start)) ms after scancel"
  fi
  wait_for "job $id to end" 30 ended "$id"
  [[ $(field "$id" 0 JobState) == CANCELLED ]] ||
    fail "case 4: JobState=$(field "$id" 0 JobState), want CANCELLED"
  grep -q "shard 0 stopped" "ps-$id/psd0.log" || fail "case 4: psd did not stop cleanly on SIGTERM"
  # The registration checkpoint, then the last one psd wrote as it stopped.
  n=$(ls "ps-$id/checkpoints" 2>/dev/null | grep -c "shard0\..*\.ckpt")
  [[ $n -ge 2 ]] || fail "case 4: $n checkpoint(s), want the last one written at SIGTERM too"
fi

# --- Case 5 (before 3): a worker node added to a running job by a second
# sbatch (tools/slurm/ps_workers.sbatch), then scaled away again while the
# job goes on.
# Case 2's job, longer, with a third rank slot.
{
  sed 's/"slurm-shrink"/"slurm-grow"/; s/epochs: 8/epochs: 12/' shrink.pbtxt
  echo "max_workers: 3"
} >grow.pbtxt
wait_for "3 idle nodes after case 4" 60 three_idle
id=$(submit grow.pbtxt) || fail "sbatch failed"
psctl5() { "$BIN/tools/psctl/psctl" --cluster="ps-$id/cluster.pbtxt" "$@"; }
active_workers() { # psctl status's scale line: "scale: F -> T workers, N active"
  psctl5 status job-000001 2>/dev/null | grep -q "scale: .* $1 active"
}
running() { psctl5 status job-000001 2>/dev/null | grep -q "RUNNING"; }
job_state() { scontrol show job "$1" 2>/dev/null | grep -o "JobState=[A-Z_]*"; }
add_ended() { [[ $(job_state "$1") =~ =(COMPLETED|FAILED|CANCELLED|TIMEOUT)$ ]]; }
if [[ -n ${id:-} ]] && wait_for "job $id to train" 120 training "$id"; then
  add=$(sbatch --parsable -N1 --output="$TMP/work/slurm-%j.out" \
    "$HOME_DIR/tools/slurm/ps_workers.sbatch" "ps-$id" job-000001 3 \
    --workerd-config=workerd_extra.pbtxt) || fail "case 5: sbatch ps_workers.sbatch failed"
  if [[ -n ${add:-} ]] && wait_for "job $id to reach 3 workers" 120 active_workers 3; then
    echo "slurm_test: case 5: Slurm job $add added a worker: $(psctl5 status job-000001 | grep scale:)"
    psctl5 scale job-000001 --workers=2 || fail "case 5: psctl scale --workers=2 refused"
    if wait_for "the added Slurm job $add to end" 120 add_ended "$add"; then
      running || fail "case 5: job $id no longer ran once the added worker had left"
      code=$(scontrol show job "$add" | grep -o "\bExitCode=[0-9:]*")
      [[ $(job_state "$add") == JobState=COMPLETED && $code == ExitCode=0:0 ]] ||
        fail "case 5: the added Slurm job ended $(job_state "$add") $code, want COMPLETED 0:0"
      echo "slurm_test: case 5: the added worker left; Slurm job $add $(job_state "$add") $code"
    fi
  fi
  if wait_for "job $id to end" 240 ended "$id"; then
    [[ $(summary "$id" state) == SUCCEEDED ]] || fail "case 5: psctl state=$(summary "$id" state)"
    for line in "scaling from 2 to 3 workers" "worker [^ ]* (rank 2, [^)]*) joined at step" \
      "scaling from 3 to 2 workers"; do
      grep -q "job-000001: $line" "ps-$id/psd0.log" || fail "case 5: psd0.log has no '$line'"
    done
    echo "slurm_test: case 5: job $id $(summary "$id" state)," \
      "test_accuracy=$(summary "$id" test_accuracy)"
  fi
fi

# --- Case 6 (before 3): a server node drained with the job going on. Two
# shard nodes (n1, n2) and one worker node (n3); mid-job the job's chunks
# leave shard 1 (psctl scale --drain=1), then n2's psd is stopped and n2
# drained in Slurm, and the job SUCCEEDS on shard 0.
{
  sed 's/"slurm-shrink"/"slurm-drain"/; s/num_workers: 2/num_workers: 1/; s/epochs: 8/epochs: 6/' shrink.pbtxt
} >drain.pbtxt
scontrol update NodeName=n3 State=RESUME 2>/dev/null  # whatever case 5 left
wait_for "3 idle nodes after case 5" 60 three_idle
id=$(sbatch --parsable --output="$TMP/work/slurm-%j.out" -N2 --ntasks-per-node=1 : \
  -N1 --ntasks-per-node=1 "$SBATCH" drain.pbtxt --psd-config=psd_extra.pbtxt \
  --workerd-config=workerd_extra.pbtxt --address-timeout=60 --timeout=300) ||
  fail "case 6: sbatch failed"
psctl6() { "$BIN/tools/psctl/psctl" --cluster="ps-$id/cluster.pbtxt" "$@"; }
drained() { psctl6 status job-000001 2>/dev/null | grep -q "shards: 2 -> 1, done"; }
if [[ -n ${id:-} ]] && wait_for "job $id to train" 120 training "$id"; then
  psctl6 scale job-000001 --drain=1 || fail "case 6: psctl scale --drain=1 refused"
  if wait_for "job $id to leave shard 1" 60 drained; then
    victim=""
    for p in $(pgrep -f -- "ps-$id/psd1.pbtxt"); do
      [[ $(readlink "/proc/$p/cwd" 2>/dev/null) == "$TMP"* ]] && victim=$p
    done
    [[ -n $victim ]] || fail "case 6: no psd of shard 1 found"
    [[ -n $victim ]] && kill -TERM "$victim"
    scontrol update NodeName=n2 State=DRAIN Reason="slurm_test: server maintenance"
    echo "slurm_test: case 6: shard 1 drained ($(psctl6 status job-000001 | grep shards:)); stopped its psd (pid $victim), drained n2"
  fi
  if wait_for "job $id to end" 240 ended "$id"; then
    [[ $(summary "$id" state) == SUCCEEDED ]] || fail "case 6: psctl state=$(summary "$id" state)"
    grep -q "job-000001: re-placing from shards \[0, 1\] to \[0\]" "ps-$id/psd0.log" ||
      fail "case 6: psd0.log has no re-placement off shard 1"
    echo "slurm_test: case 6: job $id $(summary "$id" state)," \
      "test_accuracy=$(summary "$id" test_accuracy)"
  fi
fi
scontrol update NodeName=n2 State=RESUME 2>/dev/null

# --- Case 3: bad input exits 2, names the variable, writes nothing.
mkdir bad && cd bad || exit 1
out=$(bash "$SBATCH" ../softmax.pbtxt 2>&1)
rc=$?
[[ $rc == 2 && $out == *"SLURM_JOB_ID is not set"* ]] ||
  fail "case 3: outside Slurm: exit $rc, '$out'"
out=$(env SLURM_JOB_ID=9 SLURM_JOB_ID_HET_GROUP_0=9 SLURM_JOB_ID_HET_GROUP_1=10 \
  SLURM_JOB_NODELIST_HET_GROUP_0='n[1-' SLURM_JOB_NUM_NODES_HET_GROUP_0=1 \
  bash "$SBATCH" ../softmax.pbtxt 2>&1)
rc=$?
[[ $rc == 2 && $out == *"SLURM_JOB_NODELIST_HET_GROUP_0='n[1-'"* ]] ||
  fail "case 3: bad node list: exit $rc, '$out'"
[[ -z $(ls -A) ]] || fail "case 3: bad input left files: $(ls -A)"
cd .. || exit 1
