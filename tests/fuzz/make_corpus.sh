#!/usr/bin/env bash
# Generates the loader's seed corpus with our own converter: valid .keel files of the shared
# models in several quantizations, plus truncations of them at section boundaries.
# usage: make_corpus.sh KEEL_BINARY SHARED_DIR OUT_DIR
set -euo pipefail
keel="$1"; shared="$2"; out="$3"
mkdir -p "$out"
st="$shared/models/stories260K"
for q in keep q8 q4; do
  "$keel" convert "$st/stories260K.bin" --tokenizer "$st/tok512.bin" --quant "$q" -o "$out/stories_$q.keel" -q >/dev/null
done
"$keel" convert "$shared/fixtures/llama-2-tiny-random.gguf" --quant q8 -o "$out/tiny_q8.keel" -q >/dev/null
python3 - "$out" <<'PY'
import os, struct, sys
out = sys.argv[1]
src = open(os.path.join(out, "stories_q8.keel"), "rb").read()
root = struct.unpack_from("<I", src, 0)[0]
for name, cut in [("tiny_header", 16), ("root", root + 8), ("half_meta", 2000), ("quarter", len(src) // 4),
                  ("minus_one", len(src) - 1)]:
    open(os.path.join(out, "cut_" + name + ".keel"), "wb").write(src[:cut])
PY
ls "$out" | wc -l
