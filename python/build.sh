#!/usr/bin/env bash
# Builds psclient's native core and puts it beside the package's Python
# files, so `PYTHONPATH=python python3 -c "import psclient"` works from this
# checkout (Bazel keeps its outputs outside the tree; see .bazelrc).
set -euo pipefail
cd "$(dirname "$0")/.."
bazel build "$@" //python/psclient:_native.so //server:psd
install -m 755 "$(bazel info "$@" bazel-bin)/python/psclient/_native.so" \
  python/psclient/_native.so
echo "python/build.sh: python/psclient/_native.so is built;" \
  "use PYTHONPATH=$(pwd)/python"
