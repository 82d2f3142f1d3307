#!/bin/bash
# tools/lab/device_lab.sh here, without a lab or a device: its refusals, and
# --pack: ip, tc and iperf3 with every library they need but glibc's, so
# that each runs from the pack alone (LD_LIBRARY_PATH = the pack's lib/).
# Skips where it is not root or iperf3/iproute2 are missing.
set -u
TOOL="${TEST_SRCDIR}/${TEST_WORKSPACE}/tools/lab/device_lab.sh"
T=$TEST_TMPDIR
fail() { echo "FAIL: $*"; exit 1; }
if [[ $(id -u) != 0 ]]; then echo "SKIP: not root"; exit 0; fi
for t in ip tc iperf3; do
  command -v "$t" >/dev/null || { echo "SKIP: $t is missing"; exit 0; }
done

expect_refusal() { # WANT ARGS...
  local want=$1 out rc
  shift
  out=$(bash "$TOOL" "$@" 2>&1)
  rc=$?
  [[ $rc == 2 ]] || fail "'$*' exited $rc, not 2: $out"
  [[ $out == *"$want"* ]] || fail "'$*' did not say '$want': $out"
}
expect_refusal "--pack DIR or --out OUT"
expect_refusal "unknown argument '--bogus'" --bogus
expect_refusal "no $T/empty/gpu_pack.tar.xz" --pack "$T/empty"
expect_refusal "no pack in $T/empty" --out "$T/out" --from "$T/empty"

mkdir -p "$T/pack" && touch "$T/pack/gpu_pack.tar.xz"
bash "$TOOL" --pack "$T/pack" || fail "--pack failed"
for t in ip tc iperf3; do
  [[ -x $T/pack/labtools/$t ]] || fail "no $t in the pack"
  missing=$(env -i LD_LIBRARY_PATH="$T/pack/labtools/lib" ldd "$T/pack/labtools/$t" |
    grep -v -e "$T/pack/labtools/lib/" -e 'libc\.so' -e 'libm\.so' -e 'ld-linux' \
      -e 'linux-vdso')
  [[ -z $missing ]] || fail "$t needs libraries from outside the pack: $missing"
done
env -i LD_LIBRARY_PATH="$T/pack/labtools/lib" "$T/pack/labtools/iperf3" --version |
  grep -q iperf || fail "the packed iperf3 does not run"
expect_refusal "bad row 'x:y:'" --out "$T/out" --from "$T/pack" x:y:
echo PASS
