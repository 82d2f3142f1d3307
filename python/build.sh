#!/usr/bin/env bash
# Builds psclient's native core and puts it beside the package's Python
# files, so `PYTHONPATH=python python3 -c "import psclient"` works from this
# checkout (Bazel keeps its outputs outside the tree; see .bazelrc).
#
#   python/build.sh [--python=X.Y] [BAZEL_ARGS...]
#
# The module is built for one Python: by default Debian's (WORKSPACE's
# python3_headers); --python=X.Y builds it for another whose headers this
# machine has (/usr/include/pythonX.Y, or pyenv's), e.g. the interpreter of
# a virtualenv with your PyTorch: --python=$(python -c 'import sys;
# print("%d.%d" % sys.version_info[:2])'). tools/lib/python_headers.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
source tools/lib/python_headers.sh
version=$(workspace_python)
args=()
for a in "$@"; do
  case $a in
    --python=*) version=${a#--python=} ;;
    *) args+=("$a") ;;
  esac
done
build_psclient "$version" "${args[@]}"
bazel build "${args[@]}" //server:psd
install -m 755 "$(bazel info "${args[@]}" bazel-bin)/python/psclient/_native.so" \
  python/psclient/_native.so
echo "python/build.sh: python/psclient/_native.so is built for Python $version;" \
  "use PYTHONPATH=$(pwd)/python"
