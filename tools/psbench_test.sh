#!/bin/bash
# Smoke test of psbench: every mode runs briefly over loopback, prints its
# JSON and exits as documented (tools/psbench.cc).
set -u
PSBENCH="${TEST_SRCDIR}/${TEST_WORKSPACE}/tools/psbench"
out="${TEST_TMPDIR}/out.json"
fail() { echo "FAIL: $*"; cat "$out" 2>/dev/null; exit 1; }

"$PSBENCH" --mode=transport --sizes=64K --modes=asp,bsp --seconds=1 --iperf3=false --json \
  > "$out" || fail "transport exited $?"
grep -q '"mode":"transport"' "$out" || fail "transport: no JSON object"
[ "$(grep -o '"errors":0,' "$out" | wc -l)" -eq 2 ] || fail "transport: want 2 points without errors"
grep -q '"goodput_bytes_per_s":0.0' "$out" && fail "transport: zero goodput"
grep -q '"ratio":0.0000' "$out" && fail "transport: no raw TCP reference"

"$PSBENCH" --mode=apply --floats=64K --json > "$out" || fail "apply exited $?"
[ "$(grep -o '"optimizer":' "$out" | wc -l)" -eq 7 ] || fail "apply: want 7 rows"

# RSS over a 1 s run is not the 60 s bar; this checks the mode works.
"$PSBENCH" --mode=load --clients=4 --seconds=1 --warmup_seconds=0.5 --load_bytes=64K \
  --max_rss_growth=10 --json > "$out" || fail "load exited $?"
grep -q '"errors":0,' "$out" || fail "load: errors"
grep -q '"pass":true' "$out" || fail "load: not passed"

"$PSBENCH" --mode=bogus > "$out" 2>&1
[ $? -eq 2 ] || fail "bad --mode: want exit 2"
"$PSBENCH" --mode=transport --sizes=3 > "$out" 2>&1
[ $? -eq 3 ] || fail "size not a multiple of 4: want exit 3"
echo "psbench smoke test: 1 passed, 0 failed"
