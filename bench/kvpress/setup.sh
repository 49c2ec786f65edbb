#!/bin/sh
# Creates the reference's own environment: kvpress 0.5.5 on CPU torch and a transformers it
# accepts (kvpress 0.5.5 requires transformers < 5.3), apart from the project's venv, whose
# transformers is newer. Gemma 3 is read from its GGUF through transformers' GGUF loader, which
# needs the gguf package.
#
# usage: bench/kvpress/setup.sh [VENV]     (default ~/.cache/keel/kvpress-venv)
set -eu
VENV=${1:-$HOME/.cache/keel/kvpress-venv}
python3 -m venv "$VENV"
"$VENV/bin/pip" install --quiet --upgrade pip
# torch from the default index (its CUDA libraries come along, unused: everything here runs on
# the CPU). TORCH_INDEX=https://download.pytorch.org/whl/cpu takes the CPU-only build instead
# where that index is reachable.
if [ -n "${TORCH_INDEX:-}" ]; then
    "$VENV/bin/pip" install --quiet --index-url "$TORCH_INDEX" torch
else
    "$VENV/bin/pip" install --quiet torch
fi
"$VENV/bin/pip" install --quiet "kvpress==0.5.5" "transformers<5.3" "gguf>=0.10" sentencepiece protobuf
"$VENV/bin/python" - <<'PY'
import importlib.metadata as m
for p in ("kvpress", "transformers", "torch", "gguf"):
    print(p, m.version(p))
PY
