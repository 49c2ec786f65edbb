#!/usr/bin/env bash
# keel serve against llama.cpp's llama-server on the same GGUF: the same load
# (bench/serve_load.py: C concurrent streaming clients, R greedy completions of M tokens), S
# slots each, one thread each, servers alternating for ROUNDS rounds. Prints one JSON line per
# run ({"server": ..., "round": ..., serve_load.py's fields}); docs/performance.md reports the
# medians. Not a test.
#
# usage: bench/serve_vs_llamacpp.sh KEEL MODEL.keel MODEL.gguf [ROUNDS]
#   env: CLIENTS (16) REQUESTS (96) MAX_TOKENS (32) SLOTS (4) THREADS (1) PORT (18200)
#        KEEL_CACHE_DIR (~/.cache/keel; llama-server from bench/build_llamacpp.sh)
set -euo pipefail
KEEL=$1 KEEL_MODEL=$2 GGUF=$3 ROUNDS=${4:-2}
CLIENTS=${CLIENTS:-16} REQUESTS=${REQUESTS:-96} MAX_TOKENS=${MAX_TOKENS:-32} SLOTS=${SLOTS:-4}
THREADS=${THREADS:-1} PORT=${PORT:-18200}
HERE=$(cd "$(dirname "$0")" && pwd)
BIN=$(bash "$HERE/build_llamacpp.sh")
TEXT=${TEXT:-$(ls -d "${KEEL_SHARED_DIR:-$HERE/../../shared}"/data/paul_graham_essays/* | head -1)}

pid=""
cleanup() { [[ -n $pid ]] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null; pid=""; }
trap cleanup EXIT

wait_health() {
  for _ in $(seq 600); do
    curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  echo "serve_vs_llamacpp.sh: the server on port $PORT never became healthy" >&2
  return 1
}

run() {  # name round command...
  local name=$1 round=$2
  shift 2
  "$@" >/dev/null 2>&1 &
  pid=$!
  wait_health
  local out
  out=$(python3 "$HERE/serve_load.py" --url "http://127.0.0.1:$PORT" --pid "$pid" --clients "$CLIENTS" \
        --requests "$REQUESTS" --max-tokens "$MAX_TOKENS" --text "$TEXT" --json || true)
  cleanup
  echo "{\"server\": \"$name\", \"round\": $round, ${out#\{}"
}

for round in $(seq "$ROUNDS"); do
  # Every load client is on loopback, one peer address: the per-client share would halve the slots.
  run keel "$round" "$KEEL" serve -m "$KEEL_MODEL" --port "$PORT" --slots "$SLOTS" --max-slots-per-client "$SLOTS" \
    -t "$THREADS"
  # -c: the same 1024 tokens of context per slot as keel's default budget.
  run llama-server "$round" "$BIN/llama-server" -m "$GGUF" --port "$PORT" -np "$SLOTS" -t "$THREADS" \
      -tb "$THREADS" -c $((1024 * SLOTS)) --host 127.0.0.1
done
