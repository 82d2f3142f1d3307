# shellcheck shell=bash
# psclient's native module for a chosen Python (python/build.sh --python,
# tools/lib/gpu_psclient.sh). The module is a CPython extension, built
# against one Python's headers: WORKSPACE's python3_headers (Debian's
# python3-dev) by default; another version's (/usr/include/pythonX.Y, or
# pyenv's ~/.pyenv/versions/X.Y.*/include/pythonX.Y) are swapped in with
# --override_repository, from a copy kept in ~/.cache/ps/python_headers/X.Y
# (one stable path per version, so bazel's cache holds across builds).
#
#   python_headers X.Y                 the include folder of X.Y, or nothing
#   workspace_python                   the X.Y of WORKSPACE's python3_headers
#   build_psclient X.Y [BAZEL_ARGS...] builds //python/psclient:_native.so
#                                      for X.Y (1, with a message, when this
#                                      machine has no headers for it)
# Run from the checkout's root.

PSCLIENT_LABEL=//python/psclient:_native.so

python_headers() { # X.Y
  local d
  for d in "/usr/include/python$1" "$HOME"/.pyenv/versions/"$1".*/include/"python$1"; do
    [[ -f $d/Python.h ]] && echo "$d" && return
  done
}

workspace_python() {
  sed -n 's|.*path = "/usr/include/python\(3\.[0-9]*\)".*|\1|p' WORKSPACE | head -1
}

build_psclient() { # X.Y [BAZEL_ARGS...]
  local v=$1 headers repo
  shift
  if [[ $v == "$(workspace_python)" ]]; then
    bazel build "$@" "$PSCLIENT_LABEL"
    return
  fi
  headers=$(python_headers "$v")
  if [[ -z $headers ]]; then
    echo "psclient: no headers of Python $v here (looked in /usr/include/python$v" \
      "and ~/.pyenv/versions/$v.*/include/python$v)" >&2
    return 1
  fi
  repo=${XDG_CACHE_HOME:-$HOME/.cache}/ps/python_headers/$v
  if ! cmp -s "$headers/patchlevel.h" "$repo/patchlevel.h" 2>/dev/null; then
    rm -rf "$repo" && mkdir -p "$repo" && cp -r "$headers"/. "$repo/" || return 1
  fi
  touch "$repo/WORKSPACE" && cp third_party/python3_headers.BUILD "$repo/BUILD.bazel" &&
    bazel build "$@" --override_repository=python3_headers="$repo" "$PSCLIENT_LABEL"
}
