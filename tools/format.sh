#!/usr/bin/env bash
# Formats the project's C++ and CUDA sources with clang-format (Google style,
# .clang-format at the root). BUILD files are kept tidy by hand (Debian has
# no buildifier).
#   tools/format.sh            rewrite every file in place
#   tools/format.sh --check    change nothing; list unformatted files, exit 1
set -euo pipefail
cd "$(dirname "$0")/.."
mode=fix
case "${1:-}" in
  "") ;;
  --check) mode=check ;;
  -h|--help) sed -n '2,7p' "$0"; exit 0 ;;
  *) echo "format.sh: unknown argument '$1' (use --check or nothing)" >&2; exit 2 ;;
esac
cf=""
for c in clang-format-14 clang-format; do
  if command -v "$c" >/dev/null; then cf=$c; break; fi
done
if [[ -z $cf ]]; then
  echo "format.sh: clang-format not found (tools/setup.sh installs clang-format-14)" >&2
  exit 2
fi
mapfile -t files < <(git ls-files --cached --others --exclude-standard -- '*.cc' '*.h' '*.cu' ':!:third_party/**')
if [[ $mode == fix ]]; then
  "$cf" -i --style=file "${files[@]}"
  exit 0
fi
bad=()
for f in "${files[@]}"; do
  if ! "$cf" --style=file --dry-run -Werror "$f" >/dev/null 2>&1; then bad+=("$f"); fi
done
if ((${#bad[@]})); then
  printf 'format.sh: not formatted (run tools/format.sh): %s\n' "${bad[@]}" >&2
  exit 1
fi
echo "format.sh: ${#files[@]} files formatted"
