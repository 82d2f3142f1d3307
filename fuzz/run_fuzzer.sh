#!/usr/bin/env bash
# Runs a libFuzzer target for a bounded time, as a test:
#
#   run_fuzzer.sh FUZZER SEED_CORPUS_DIR SECONDS
#
# The seed corpus is copied to a scratch folder (libFuzzer adds the inputs it
# finds there), every seed runs first, so a crash input added to the corpus
# is a regression test. On failure the crashing input is saved in the test's
# undeclared outputs (bazel-testlogs/fuzz/NAME/test.outputs/) and the end of
# libFuzzer's log is printed. The seed is fixed; how many inputs fit in the
# time depends on the machine.
set -euo pipefail

fuzzer="$1"
seeds="$2"
seconds="$3"
scratch="${TEST_TMPDIR:-$(mktemp -d)}"
outputs="${TEST_UNDECLARED_OUTPUTS_DIR:-${scratch}}"
corpus="${scratch}/corpus"
log="${outputs}/fuzz.log"
mkdir -p "${corpus}" "${outputs}"
cp "${seeds}"/* "${corpus}/"

# halt_on_error: UBSan findings are crashes, not warnings.
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1"
set +e
"${fuzzer}" -seed=1 -max_total_time="${seconds}" -rss_limit_mb=2048 -timeout=10 \
  -print_final_stats=1 -artifact_prefix="${outputs}/" "${corpus}" >"${log}" 2>&1
rc=$?
set -e

runs="$(sed -n 's/^stat::number_of_executed_units: *//p' "${log}")"
rate="$(sed -n 's/^stat::average_exec_per_sec: *//p' "${log}")"
if [[ ${rc} -ne 0 ]]; then
  tail -n 60 "${log}"
  echo "FAIL: $(basename "${fuzzer}") exited ${rc}; inputs and log in ${outputs}" >&2
  exit 1
fi
if [[ -z "${runs}" ]]; then
  cat "${log}"
  echo "FAIL: no libFuzzer statistics in the log" >&2
  exit 1
fi
echo "PASS: $(basename "${fuzzer}"): ${runs} inputs in ${seconds} s (${rate}/s)," \
  "corpus $(ls "${corpus}" | wc -l) files (seeds $(ls "${seeds}" | wc -l))"
