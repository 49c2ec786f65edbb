#!/bin/sh
# One length of the comparison, end to end: prompts, the engine's model file, then every Keel
# policy and every kvpress method on the first N prompts of each task, then the tables.
# Resumable: a prompt already in bench/kvpress/runs/ is not run again, so a larger N extends.
#
# usage: bench/kvpress/run_all.sh LENGTH N [THREADS]     e.g. run_all.sh 8192 20 1
# env:   KEEL (default build/tools/keel; copy it first if others rebuild it), MODEL (the
#        converted .keel, default /tmp/kvbench-gemma3.keel), GGUF, VENV (bench/kvpress/setup.sh)
set -eu
LENGTH=$1
N=$2
THREADS=${3:-1}
cd "$(dirname "$0")/../.."
KEEL=${KEEL:-build/tools/keel}
GGUF=${GGUF:-$HOME/.cache/keel/gemma3_270m/gemma-3-270m-q4_k_m.gguf}
MODEL=${MODEL:-/tmp/kvbench-gemma3.keel}
VENV=${VENV:-$HOME/.cache/keel/kvpress-venv}
[ -x "$VENV/bin/python" ] || { echo "no kvpress venv at $VENV: run bench/kvpress/setup.sh" >&2; exit 1; }
[ -f "$MODEL" ] || "$KEEL" convert "$GGUF" -o "$MODEL"
P=""
for task in single multikey multivalue vt; do
    f=bench/kvpress/prompts/${task}_${LENGTH}.jsonl
    [ -f "$f" ] || "$VENV/bin/python" bench/kvpress/make_prompts.py --lengths "$LENGTH" --per-cell 20
    P="$P $f"
done
# Budgets 1024 and 2048 for every bounded policy; rocketkv's --kv-budget is its capacity, with
# its per-step sparse budget at the default (a quarter of it).
python3 bench/kvpress/run_keel.py --keel "$KEEL" --model "$MODEL" --prompts $P --limit "$N" \
    -t "$THREADS" --methods full,streaming:1024,snapkv:1024,snapstream:1024,rocketkv:1024,streaming:2048,snapkv:2048,snapstream:2048,rocketkv:2048
"$VENV/bin/python" bench/kvpress/run_kvpress.py --prompts $P --limit "$N" -t "$THREADS" \
    --methods none,snapkv:1024,streaming:1024,snapkv:2048,streaming:2048
python3 bench/kvpress/table.py
