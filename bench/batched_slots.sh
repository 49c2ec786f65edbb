#!/usr/bin/env bash
# Aggregate decode tokens/s against the number of sequences decoding together: Keel's
# `keel bench --slots` against llama.cpp's llama-batched-bench on the same GGUF, the same
# parallel sequences (1, 2, 4, 8, 16), prompt depth and threads. Runs alternate (Keel, then
# llama.cpp, per thread count, ROUNDS times) so that a shared host's load hits both alike;
# docs/performance.md reports the medians. Writes one JSON line per run into OUT.
#
# usage: bench/batched_slots.sh KEEL MODEL.keel MODEL.gguf OUT.jsonl
#   ROUNDS (default 3), THREADS (default "1 2"), SLOTS (default 1,2,4,8,16), DEPTH (128),
#   GEN (64); llama.cpp's tools come from bench/build_llamacpp.sh.
set -euo pipefail

[[ $# -eq 4 ]] || { sed -n 2,11p "$0" >&2; exit 2; }
KEEL=$1 MODEL=$2 GGUF=$3 OUT=$4
ROUNDS=${ROUNDS:-3}
THREADS=${THREADS:-1 2}
SLOTS=${SLOTS:-1,2,4,8,16}
DEPTH=${DEPTH:-128}
GEN=${GEN:-64}
BIN=$(bash "$(dirname "$0")/build_llamacpp.sh")

: >"$OUT"
for round in $(seq "$ROUNDS"); do
    for t in $THREADS; do
        # Keel: every slot holds DEPTH prompt tokens, then GEN batched decode steps (full cache).
        "$KEEL" bench -m "$MODEL" -p 0 -n "$GEN" -d "$DEPTH" --slots "$SLOTS" -t "$t" -r 1 --kv-policy full \
            --json | sed "s/^{/{\"engine\":\"keel\",\"round\":$round,/" >>"$OUT"
        # llama.cpp: B sequences of DEPTH prompt tokens each, then GEN steps decoding all B.
        "$BIN/llama-batched-bench" -m "$GGUF" -c $(((DEPTH + GEN) * 16 + 64)) -b 2048 -ub 512 -npp "$DEPTH" \
            -ntg "$GEN" -npl "$SLOTS" -t "$t" -tb "$t" --output-format jsonl 2>/dev/null |
            grep '^{' | sed "s/^{/{\"engine\":\"llama.cpp\",\"round\":$round,\"threads\":$t,/" >>"$OUT"
    done
done
