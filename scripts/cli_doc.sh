#!/usr/bin/env bash
# Writes docs/cli.md from the `keel` binary's own --help texts, so the reference cannot drift
# from the program. usage: cli_doc.sh KEEL_BINARY [--check]   (--check: fail if docs differ)
set -euo pipefail
keel="$1"; mode="${2:-write}"
root="$(cd "$(dirname "$0")/.." && pwd)"
out="$(mktemp)"
{
  echo "# The \`keel\` command line"
  echo
  echo "Generated from \`keel <command> --help\` by \`scripts/cli_doc.sh\`; a test keeps it in sync."
  echo "Every command exits 0 on success, 1 on failure (one line on stderr naming what was"
  echo "expected and what was found) and 2 on a usage error."
  echo
  echo '```'
  "$keel" --help
  echo '```'
  for cmd in $("$keel" --help | awk '/^commands:/{f=1;next} /^$/{f=0} f && NF>1 {print $1}'); do
    echo
    echo "## keel $cmd"
    echo
    echo '```'
    "$keel" "$cmd" --help
    echo '```'
  done
} > "$out"
if [ "$mode" = "--check" ]; then
  if ! diff -u "$root/docs/cli.md" "$out"; then
    echo "docs/cli.md is out of date: run scripts/cli_doc.sh $keel" >&2
    rm -f "$out"; exit 1
  fi
  rm -f "$out"
else
  mv "$out" "$root/docs/cli.md"
fi
