#!/usr/bin/env bash
# The test command: installs what is missing, then runs every test.
# Exit code: Bazel's (0 = all tests passed). Extra arguments go to bazel test.
set -uo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh || exit $?
# CI and small machines: at most 2 heavy actions at once; tests are bounded.
bazel test //... "$@"
rc=$?
if [[ $rc -eq 0 ]]; then echo "tools/test.sh: all tests passed"; else echo "tools/test.sh: FAILED (bazel exit $rc)"; fi
exit $rc
