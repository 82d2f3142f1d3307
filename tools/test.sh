#!/usr/bin/env bash
# The test command: installs what is missing, then builds and runs every
# test (bazel test //...). Extra arguments go to bazel test.
# Exit code: Bazel's (0 = every test passed; a skipped test does not fail).
# The last line counts the test targets:
#   "tests: N passed, M failed, K skipped"
# where skipped = targets Bazel reports PASSED whose test.xml shows every
# test case skipped (GoogleTest 1.12 writes result="skipped" on a
# GTEST_SKIP'd <testcase>, e.g. a GPU test on a machine without a GPU);
# they are not counted as passed. Cached results count the same way: their
# test.xml stays under `bazel info bazel-testlogs`.
set -uo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh --test || exit $?
log=$(mktemp)
trap 'rm -f "$log"' EXIT
bazel test //... "$@" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
testlogs=$(bazel info "$@" bazel-testlogs 2>/dev/null || bazel info bazel-testlogs)
read -r passed failed skipped < <(python3 tools/test_summary.py "$log" "$testlogs")
passed=${passed:-0} failed=${failed:-0} skipped=${skipped:-0}
if [[ $rc -ne 0 && $failed -eq 0 ]]; then
  failed=1  # the build itself failed
fi
echo "tests: ${passed} passed, ${failed} failed, ${skipped} skipped"
exit $rc
