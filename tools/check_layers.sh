#!/usr/bin/env bash
# Checks the layering of ARCHITECTURE.md with `bazel query`: //server/... and
# //worker/... never depend on each other, and //core/... and //common/...
# depend on neither. Prints every offending edge; exit 1 if there is one.
set -euo pipefail
cd "$(dirname "$0")/.."
fail=0
check() {  # check FROM TO: no target under FROM may depend on one under TO
  local edges
  edges=$(bazel query --noshow_progress \
    "let bad = deps($1) intersect $2 in rdeps($1, \$bad, 1) intersect $1" 2>/dev/null)
  if [[ -n $edges ]]; then
    echo "check_layers: $1 depends on $2 through:" >&2
    sed 's/^/  /' <<<"$edges" >&2
    fail=1
  fi
}
check //server/... //worker/...
check //worker/... //server/...
check //core/... "//server/... + //worker/... + //tools/..."
check //common/... "//server/... + //worker/... + //core/... + //tools/..."
((fail == 0)) && echo "check_layers: server, worker, core and common are layered"
exit $fail
