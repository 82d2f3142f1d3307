#!/bin/bash
# tools/gpu_check.sh on machines without a GPU: nvidia-smi missing, failing,
# or listing no device. Each time it must print its one line, exit 0 and
# write nothing (not even OUTDIR); and a bad command line is exit 2.
set -u
SCRIPT="${TEST_SRCDIR}/${TEST_WORKSPACE}/tools/gpu_check.sh"
T=$TEST_TMPDIR
fail() { echo "FAIL: $*"; exit 1; }

# A folder of stand-in commands: just `nvidia-smi`, with this body.
fake_smi() {  # DIR BODY
  mkdir -p "$1"
  printf '#!/bin/sh\n%s\n' "$2" >"$1/nvidia-smi"
  chmod +x "$1/nvidia-smi"
}

expect_no_gpu() {  # CASE PATH
  local out="$T/$1/out" rc
  mkdir -p "$T/$1"
  PATH=$2 /bin/bash "$SCRIPT" --out "$out" >"$T/$1/stdout" 2>"$T/$1/stderr"
  rc=$?
  [[ $rc -eq 0 ]] || fail "$1: exit $rc, want 0"
  [[ $(wc -l <"$T/$1/stdout") -eq 1 ]] || fail "$1: want one line, got: $(cat "$T/$1/stdout")"
  grep -q '^gpu_check: no GPU here' "$T/$1/stdout" || fail "$1: wrong line: $(cat "$T/$1/stdout")"
  [[ ! -s $T/$1/stderr ]] || fail "$1: wrote to stderr: $(cat "$T/$1/stderr")"
  [[ ! -e $out ]] || fail "$1: created $out"
}

# 1. No nvidia-smi at all: an empty PATH.
mkdir -p "$T/empty"
expect_no_gpu missing "$T/empty"
# 2. nvidia-smi there but failing (no driver).
fake_smi "$T/failing" 'echo "NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver." >&2; exit 9'
expect_no_gpu failing "$T/failing:/usr/bin:/bin"
# 3. nvidia-smi answering without a device, as it does in a container
#    without one; and answering nothing.
fake_smi "$T/none" 'echo "No devices were found"; exit 0'
expect_no_gpu none "$T/none:/usr/bin:/bin"
fake_smi "$T/silent" 'exit 0'
expect_no_gpu silent "$T/silent:/usr/bin:/bin"

# 4. A bad command line is a usage error, GPU or not.
/bin/bash "$SCRIPT" >/dev/null 2>&1
[[ $? -eq 2 ]] || fail "no arguments: want exit 2"
/bin/bash "$SCRIPT" --out >/dev/null 2>&1
[[ $? -eq 2 ]] || fail "--out without a folder: want exit 2"
echo "PASS"
