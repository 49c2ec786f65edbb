#!/usr/bin/env bash
# Writes the King James Bible (Debian's bible-kjv, installed by scripts/setup.sh) as plain text,
# one verse per line without its reference, Genesis to Revelation: the second long English text
# of the perplexity runs in docs/results.md. usage: bench/kjv_text.sh OUT.txt
set -euo pipefail
out="${1:?usage: bench/kjv_text.sh OUT.txt}"
command -v bible >/dev/null || { echo "kjv_text: the bible program (Debian bible-kjv) is not installed" >&2; exit 1; }
bible -f gen1:1-rev22:21 | sed 's/^[1-3]*[A-Za-z]*[0-9]*:[0-9]* //' >"$out"
[ "$(wc -l <"$out")" -gt 30000 ] || { echo "kjv_text: expected about 31,000 verses in $out" >&2; exit 1; }
echo "kjv_text: $(wc -l <"$out") verses, $(wc -c <"$out") bytes in $out"
