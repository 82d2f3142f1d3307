#!/usr/bin/env bash
# One task of a Slurm parameter-server job: tools/slurm/ps_job.sbatch starts
# it with `srun --het-group=...` on every node of a component; not meant to be
# run by hand.
#
#   ps_task.sh psd     JOBDIR PSD_BINARY      [EXTRA_PSD_CONFIG]
#   ps_task.sh workerd JOBDIR WORKERD_BINARY  [EXTRA_WORKERD_CONFIG]
#
# psd: shard SLURM_PROCID of component 0. Writes JOBDIR/psd<ID>.pbtxt
# (listen on this node's Slurm NodeAddr, port 0; the bound address into
# JOBDIR/shard<ID>.addr, which the cluster file names; checkpoints under
# JOBDIR/checkpoints) and execs psd, so the SIGTERM of scancel or of the
# batch script reaches psd itself, which then writes its last checkpoints.
# workerd: the worker of this node. Devices from the allocation: the GPUs
# Slurm gave this task (SLURM_GPUS_ON_NODE, CUDA_VISIBLE_DEVICES renumbers
# them from 0), else one CPU device with SLURM_CPUS_PER_TASK OpenBLAS
# threads (default 1); max_jobs: 1, so it exits once the job ended.
# EXTRA_*_CONFIG: a text-proto fragment appended to the generated config
# (fields the script sets must not be repeated there).
# PS_LISTEN_HOST: the address psd binds and publishes, instead of NodeAddr.
#
# Exit codes: the daemon's own once it started; 2 for bad input (a missing
# Slurm variable, an unknown role, a missing file), naming it.
set -euo pipefail
shopt -s inherit_errexit  # checks inside $(...) exit too

die() {
  echo "ps_task: $*" >&2
  exit 2
}
need() {  # need VAR: the value of Slurm variable VAR, or exit 2 naming it
  [[ -n ${!1:-} ]] || die "$1 is not set (run under srun, from ps_job.sbatch)"
  printf '%s' "${!1}"
}

(($# == 3 || $# == 4)) || die "usage: ps_task.sh psd|workerd JOBDIR BINARY [EXTRA_CONFIG]"
role=$1 jobdir=$2 binary=$3 extra=${4:-}
[[ -d $jobdir ]] || die "JOBDIR $jobdir is not a directory"
[[ -x $binary ]] || die "$role binary $binary is not executable"
extra_text=""
if [[ -n $extra ]]; then
  [[ -r $extra ]] || die "extra config $extra is not readable"
  extra_text=$(<"$extra")
fi
node=$(need SLURMD_NODENAME)

case $role in
  psd)
    id=$(need SLURM_PROCID)
    [[ $id =~ ^[0-9]+$ ]] || die "SLURM_PROCID '$id' is not a task number"
    host=${PS_LISTEN_HOST:-}
    if [[ -z $host ]]; then
      host=$(scontrol show node "$node" -o | grep -o 'NodeAddr=[^ ]*' | cut -d= -f2) ||
        true
      [[ -n $host ]] || die "no NodeAddr for SLURMD_NODENAME=$node in 'scontrol show node'"
    fi
    [[ $host == *:* ]] && host="[$host]"  # an IPv6 address
    config="$jobdir/psd$id.pbtxt"
    printf '%s\n' "# psd shard $id on $node (written by tools/slurm/ps_task.sh)" \
      "listen_address: \"$host:0\"" "shard_id: $id" \
      'cluster_file: "cluster.pbtxt"' "address_file: \"shard$id.addr\"" \
      'checkpoint_dir: "checkpoints"' "$extra_text" >"$config.tmp"
    mv "$config.tmp" "$config"
    exec "$binary" --config="$config"
    ;;
  workerd)
    devices=() threads=1
    gpus=${SLURM_GPUS_ON_NODE:-0}
    [[ $gpus =~ ^[0-9]+$ ]] || die "SLURM_GPUS_ON_NODE '$gpus' is not a count"
    if ((gpus > 0)); then
      for ((g = 0; g < gpus; ++g)); do devices+=("gpu:$g"); done
    else
      devices=("cpu:0")
      threads=${SLURM_CPUS_PER_TASK:-1}
      [[ $threads =~ ^[1-9][0-9]*$ ]] || die "SLURM_CPUS_PER_TASK '$threads' is not a count"
    fi
    config="$jobdir/workerd-$node.pbtxt"
    {
      echo "# workerd on $node (written by tools/slurm/ps_task.sh)"
      echo 'cluster_file: "cluster.pbtxt"'
      echo "name: \"$node\""
      for d in "${devices[@]}"; do echo "devices: \"$d\""; done
      echo "threads_per_device: $threads"
      echo "max_jobs: 1  # this allocation's job; then the step ends"
      echo "$extra_text"
    } >"$config.tmp"
    mv "$config.tmp" "$config"
    exec "$binary" --config="$config"
    ;;
  *) die "unknown role '$role' (psd or workerd)" ;;
esac
