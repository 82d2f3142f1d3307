#!/usr/bin/env bash
# Compiles and links libFuzzer targets with clang (see fuzz/fuzzer.bzl).
#
#   clang_fuzz_build.sh compile OUT.o SRC.cc [clang flags...]
#   clang_fuzz_build.sh link OUT OBJ.o... -- [link flags...]
#
# Without clang++ or its libFuzzer runtime, `compile` writes a placeholder
# object and `link` writes OUT as a script that says what to install and
# exits 1: the build stays green, the fuzz tests fail with that message.
set -euo pipefail

readonly PLACEHOLDER="ps-fuzz: built without clang"
readonly SANITIZERS="address,undefined"
readonly COMMON_FLAGS=(-std=c++17 -O1 -g -fno-omit-frame-pointer
  -fno-sanitize-recover=all -w)

have_clang() {
  command -v clang++ >/dev/null 2>&1 || return 1
  local rt
  rt="$(clang++ --print-runtime-dir 2>/dev/null)" || return 1
  [[ -f "${rt}/libclang_rt.fuzzer-x86_64.a" || -f "${rt}/libclang_rt.fuzzer.a" ]]
}

mode="$1"
out="$2"
shift 2
case "${mode}" in
  compile)
    src="$1"
    shift
    if ! have_clang; then
      echo "${PLACEHOLDER}" >"${out}"
      exit 0
    fi
    exec clang++ "${COMMON_FLAGS[@]}" "-fsanitize=fuzzer-no-link,${SANITIZERS}" \
      "$@" -c "${src}" -o "${out}"
    ;;
  link)
    objects=()
    while [[ $# -gt 0 && "$1" != "--" ]]; do
      objects+=("$1")
      shift
    done
    [[ $# -gt 0 ]] && shift  # --
    missing=0
    have_clang || missing=1
    for o in "${objects[@]}"; do
      if [[ "$(head -c ${#PLACEHOLDER} "${o}" | tr -d '\000')" == "${PLACEHOLDER}" ]]; then missing=1; fi
    done
    if ((missing)); then
      name="$(basename "${out}")"
      cat >"${out}" <<STUB
#!/bin/sh
echo "fuzz: ${name} could not be built: clang++ with its libFuzzer runtime was not" >&2
echo "fuzz: found (Debian packages clang and libclang-rt-14-dev). Run tools/setup.sh," >&2
echo "fuzz: then rebuild past the cached stub: bazel test --noremote_accept_cached //fuzz/..." >&2
exit 1
STUB
      chmod +x "${out}"
      exit 0
    fi
    exec clang++ "${COMMON_FLAGS[@]}" "-fsanitize=fuzzer,${SANITIZERS}" \
      "${objects[@]}" -o "${out}" "$@" -lstdc++ -lm -lpthread
    ;;
  *)
    echo "usage: $0 compile OUT SRC [flags] | link OUT OBJS... -- [flags]" >&2
    exit 2
    ;;
esac
