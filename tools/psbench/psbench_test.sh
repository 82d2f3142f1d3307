#!/bin/bash
# Smoke test of psbench: every mode runs briefly over loopback, prints its
# JSON and exits as documented (tools/psbench/psbench.cc).
set -u
PSBENCH="${TEST_SRCDIR}/${TEST_WORKSPACE}/tools/psbench/psbench"
out="${TEST_TMPDIR}/out.json"
fail() { echo "FAIL: $*"; cat "$out" 2>/dev/null; exit 1; }

"$PSBENCH" --mode=transport --sizes=64K --modes=asp,bsp --seconds=1 --iperf3=false --json \
  > "$out" || fail "transport exited $?"
grep -q '"mode":"transport"' "$out" || fail "transport: no JSON object"
[ "$(grep -o '"errors":0,' "$out" | wc -l)" -eq 2 ] || fail "transport: want 2 points without errors"
grep -q '"goodput_bytes_per_s":0.0' "$out" && fail "transport: zero goodput"
grep -q '"ratio":0.0000' "$out" && fail "transport: no raw TCP reference"
grep -q '"cpu_s_per_gb":0.0000,' "$out" && fail "transport: no cpu s/GB"
grep -q '"tcp_socket_cpu_s_per_gb":0.0000,' "$out" && fail "transport: no raw TCP cpu s/GB"
grep -q '"cpu_vs_tcp":0.0000}' "$out" && fail "transport: no cpu vs tcp"

"$PSBENCH" --mode=apply --floats=64K --json > "$out" || fail "apply exited $?"
[ "$(grep -o '"optimizer":' "$out" | wc -l)" -eq 7 ] || fail "apply: want 7 rows"

# Resident-memory bound: a leak must break it. The in-process shard and its
# clients share this process, so RSS also holds what the bench itself keeps:
# one 8-byte latency per step in a vector that doubles (<= 16 B/step),
# plus a constant part (gRPC and allocator arenas settling). Measured on the
# 2-core dev VM over 2 s after a 1 s warm-up: +0.1 to +0.5 MiB on ~22 MiB
# (0.4-2.2%) for 7k-32k steps, i.e. at most 37 B/step at the fewest steps
# and 16-24 B/step otherwise. The bound, 1 MiB + 32 B per step, keeps a 2x
# margin over that and scales with the machine's speed (a fixed fraction
# would fail on a machine that runs 4x the steps). A leak of 64 KiB per
# step (one payload) exceeds it by 1000x; a leak of L bytes per PushPull
# step breaks it once (L - 8) x steps > ~0.7 MiB: L >= ~120 B at the
# fewest steps measured (7k).
# psbench's own --max_rss_growth (a fraction, for the 60 s bar of
# docs/BENCHMARKS.md) is set loose here: the per-step bound is the check.
"$PSBENCH" --mode=load --clients=4 --seconds=2 --warmup_seconds=1 --load_bytes=64K \
  --max_rss_growth=0.5 --json > "$out" || fail "load exited $?"
grep -q '"errors":0,' "$out" || fail "load: errors"
grep -q '"pass":true' "$out" || fail "load: not passed"
num() { grep -o "\"$1\":[0-9.]*" "$out" | cut -d: -f2; }
steps=$(num steps) rss_start=$(num rss_start_bytes) rss_end=$(num rss_end_bytes)
[ "$steps" -gt 0 ] || fail "load: no steps"
allowed=$(( (1 << 20) + 32 * steps ))
growth=$(( rss_end - rss_start ))
[ "$growth" -le "$allowed" ] ||
  fail "load: RSS grew ${growth} B over ${steps} steps (bound ${allowed} B: 1 MiB + 32 B/step)"

# Sparse: a populated table (every id of the universe pushed once), dense
# and sparse runs alternating; both paths move bytes, the table holds every
# id, and the ratio is their quotient.
"$PSBENCH" --mode=sparse --rows=1K,4K --universe=16K --repetitions=2 --seconds=0.5 \
  --json > "$out" || fail "sparse exited $?"
grep -q '"mode":"sparse"' "$out" || fail "sparse: no JSON object"
[ "$(grep -o '"errors":0,' "$out" | wc -l)" -eq 4 ] || fail "sparse: want 2 points x 2 paths without errors"
[ "$(grep -o '"table_rows":16384,' "$out" | wc -l)" -eq 2 ] || fail "sparse: table not populated"
grep -q '"median":0.0,' "$out" && fail "sparse: a path moved nothing"
grep -q '"ratio_median":0.0000,' "$out" && fail "sparse: no ratio"
"$PSBENCH" --mode=sparse --rows=32K --universe=16K > "$out" 2>&1
[ $? -eq 3 ] || fail "sparse: rows beyond the universe: want exit 3"
"$PSBENCH" --mode=sparse --table_optimizer=ftrl > "$out" 2>&1
[ $? -eq 2 ] || fail "sparse: bad --table_optimizer: want exit 2"

"$PSBENCH" --mode=bogus > "$out" 2>&1
[ $? -eq 2 ] || fail "bad --mode: want exit 2"
"$PSBENCH" --mode=transport --sizes=3 > "$out" 2>&1
[ $? -eq 3 ] || fail "size not a multiple of 4: want exit 3"
echo "psbench smoke test: 1 passed, 0 failed"
