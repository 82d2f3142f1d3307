#!/bin/bash
# psctl export's sparse table streaming (docs/OPERATIONS.md "Sparse
# tables"): one psd, a table of ROWS rows of DIM floats filled by
# tests/table_fill, then `psctl export` of the SUCCEEDED job under
# /usr/bin/time -v. Prints rows/s and MB/s of rows (8-byte id + 4 x DIM),
# psctl's peak RSS and how far psd's RSS rose above what it held before the
# export (VmHWM, reset through /proc/PID/clear_refs just before it).
#
#   nice -n 19 bazel build //server:psd //tools/psctl //tests:table_fill
#   tools/bench/bench_table_export.sh [ROWS=10000000] [DIM=16]
set -euo pipefail
ROWS=${1:-10000000}
DIM=${2:-16}
BIN=${PS_BIN_DIR:-$(cd "$(dirname "$0")/../.." && bazel info bazel-bin 2>/dev/null)}
D=$(mktemp -d /tmp/bench_table_export.XXXXXX)
PSD=
cleanup() {
  if [ -n "$PSD" ]; then kill "$PSD" 2>/dev/null || true; wait "$PSD" 2>/dev/null || true; fi
  rm -rf "$D"
}
trap cleanup EXIT
cat > "$D/cluster.pbtxt" <<EOT
shards { address_file: "s0.addr" }
coordinator_shard: 0
EOT
cat > "$D/psd0.pbtxt" <<EOT
cluster_file: "cluster.pbtxt"
shard_id: 0
address_file: "s0.addr"
memory_budget_bytes: 8589934592
EOT
(cd "$D" && exec "$BIN/server/psd" --config="$D/psd0.pbtxt" > "$D/psd.log" 2>&1) &
PSD=$!
for _ in $(seq 300); do [ -s "$D/s0.addr" ] && break; sleep 0.1; done
[ -s "$D/s0.addr" ] || { echo "psd did not start:"; cat "$D/psd.log"; exit 1; }
JOB=$(cd "$D" && "$BIN/tests/table_fill" --cluster=cluster.pbtxt --rows="$ROWS" --dim="$DIM")
rss_before=$(awk '/VmRSS/ {print $2}' "/proc/$PSD/status")
echo 5 > "/proc/$PSD/clear_refs"  # VmHWM := VmRSS
(cd "$D" && /usr/bin/time -v "$BIN/tools/psctl/psctl" --cluster=cluster.pbtxt \
   export "$JOB" -o out.npz --timeout=600 > export.out 2> time.txt) || {
  cat "$D/time.txt"; exit 1; }
hwm=$(awk '/VmHWM/ {print $2}' "/proc/$PSD/status")
cat "$D/export.out"
/usr/bin/python3 - "$D" "$ROWS" "$DIM" "$rss_before" "$hwm" <<'EOT'
import re, sys, numpy
d, rows, dim, before, hwm = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
t = open(d + "/time.txt").read()
wall = t.split("Elapsed (wall clock) time (h:mm:ss or m:ss): ")[1].split()[0].split(":")
secs = sum(float(x) * 60 ** i for i, x in enumerate(reversed(wall)))
psctl_kb = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", t).group(1))
z = numpy.load(d + "/out.npz", mmap_mode=None)
n = z["tables/emb/ids"].shape[0]
assert n == rows and z["tables/emb/values"].shape == (rows, dim), (n, rows)
mb = rows * (8 + 4 * dim) / 1e6
print("rows=%d dim=%d export_s=%.2f rows_per_s=%.0f MB_per_s=%.0f psctl_peak_rss_MiB=%.1f psd_rss_growth_MiB=%.1f"
      % (rows, dim, secs, rows / secs, mb / secs, psctl_kb / 1024, (hwm - before) / 1024))
EOT
