#!/usr/bin/env bash
# Formats the tree's C and C++ sources with .clang-format, or with --check lists the files that
# differ from it and fails. Generated sources (engine/text/unicode_tables.cpp, written by
# tests/reference/make_unicode_tables.py) are left as their generator wrote them.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
command -v clang-format >/dev/null || { echo "format: clang-format is not installed (scripts/setup.sh installs it)" >&2; exit 2; }
mapfile -t files < <(git ls-files '*.c' '*.cpp' '*.h' '*.hpp' | grep -v -e '^engine/text/unicode_tables.cpp$')
if [ "${1:-}" = "--check" ]; then
  bad=0
  for f in "${files[@]}"; do
    if ! clang-format "$f" | cmp -s - "$f"; then echo "format: $f differs from .clang-format" >&2; bad=$((bad + 1)); fi
  done
  if [ "$bad" -ne 0 ]; then echo "format: $bad file(s) differ; run scripts/format.sh" >&2; exit 1; fi
  echo "format: ${#files[@]} files follow .clang-format"
else
  clang-format -i "${files[@]}"
fi
