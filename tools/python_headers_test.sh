#!/bin/bash
# tools/lib/python_headers.sh without bazel: where it finds a Python's
# headers, the WORKSPACE's version, and a clear refusal for a version this
# machine has no headers of (before any build).
set -u
LIB="${TEST_SRCDIR}/${TEST_WORKSPACE}/tools/lib/python_headers.sh"
T=$TEST_TMPDIR
fail() { echo "FAIL: $*"; exit 1; }
# shellcheck source=lib/python_headers.sh
source "$LIB"

export HOME=$T/home
mkdir -p "$HOME/.pyenv/versions/3.99.2/include/python3.99"
touch "$HOME/.pyenv/versions/3.99.2/include/python3.99/Python.h"
[[ $(python_headers 3.99) == "$HOME/.pyenv/versions/3.99.2/include/python3.99" ]] ||
  fail "pyenv headers not found: '$(python_headers 3.99)'"
[[ -z $(python_headers 3.98) ]] || fail "found headers of 3.98"
mkdir -p "$HOME/.pyenv/versions/3.97.0/include/python3.97"  # no Python.h
[[ -z $(python_headers 3.97) ]] || fail "a folder without Python.h counted"

cd "$T" || fail "no tmpdir"
printf 'new_local_repository(\n    name = "python3_headers",\n    path = "/usr/include/python3.11",\n)\n' >WORKSPACE
[[ $(workspace_python) == 3.11 ]] || fail "workspace_python: '$(workspace_python)'"

bazel() { fail "bazel ran for a version without headers"; }
out=$(build_psclient 3.98 2>&1) && fail "build_psclient 3.98 succeeded"
[[ $out == *"no headers of Python 3.98"* ]] || fail "unclear refusal: $out"
echo PASS
