#!/usr/bin/env bash
# The test command: installs what is missing, then builds and runs every
# test (bazel test //...). Extra arguments go to bazel test.
# Exit code: Bazel's (0 = every test passed). The last line counts the test
# targets: "tests: N passed, M failed".
set -uo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh || exit $?
log=$(mktemp)
trap 'rm -f "$log"' EXIT
bazel test //... "$@" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
passed=$(grep -cE '^//[^ ]+ +(\(cached\) )?PASSED' "$log")
failed=$(grep -cE '^//[^ ]+ +(\(cached\) )?(FAILED|TIMEOUT|NO STATUS|INCOMPLETE|FLAKY)' "$log")
if [[ $rc -ne 0 && $failed -eq 0 ]]; then
  failed=1  # the build itself failed
fi
echo "tests: ${passed} passed, ${failed} failed"
exit $rc
