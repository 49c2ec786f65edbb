#!/usr/bin/env bash
# The proofs that run after the Release suite (README "Tests"; docs/memcheck.md,
# docs/freestanding.md): the whole test suite again under AddressSanitizer + UndefinedBehavior-
# Sanitizer (but the tests labelled slow: real-model runs the Release suite has just done), the
# loader fuzzer for a fixed time over its seed corpus, and the freestanding Cortex-M33 build
# with its symbol check. Exits non-zero on the first failure.
#
#   BUILD_DIR     the Release build (default build): its keel tool makes the fuzz corpus
#   FUZZ_SECONDS  libFuzzer run time (default 120)
#   JOBS          parallel jobs (default: all cores)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR="${BUILD_DIR:-build}"
FUZZ_SECONDS="${FUZZ_SECONDS:-120}"
JOBS="${JOBS:-$(nproc)}"
KEEL="$PWD/$BUILD_DIR/tools/keel"
[ -x "$KEEL" ] || { echo "proofs: expected the Release keel tool at $KEEL; run scripts/test.sh" >&2; exit 1; }
step() { echo; echo "== proofs: $* ($(date +%H:%M:%S))"; }

step "whole suite under ASan + UBSan (build-asan), but the tests labelled slow"
# Line tables only (-g1): the sanitizers' stack traces keep their files and lines, and the
# build took 17 minutes on two Zen 3 cores in CI, against 28 with full debug information.
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" \
  -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" -DKEEL_SANITIZE="address;undefined" >/dev/null
cmake --build build-asan -j "$JOBS" >build-asan/build.log 2>&1 || { tail -40 build-asan/build.log >&2; exit 1; }
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:strict_string_checks=1 \
UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build-asan --output-on-failure -j "$JOBS" -LE slow

step "loader fuzzer, ${FUZZ_SECONDS} s (build-fuzz, clang libFuzzer + ASan + UBSan)"
# The engine is instrumented too (fuzzer-no-link), so the fuzzer sees the loader's coverage.
cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_CXX_FLAGS="-fsanitize=fuzzer-no-link,address,undefined" -DKEEL_BUILD_FUZZ=ON -DKEEL_WITH_XNNPACK=OFF >/dev/null
cmake --build build-fuzz -j "$JOBS" --target fuzz_loader >build-fuzz/build.log 2>&1 || { tail -40 build-fuzz/build.log >&2; exit 1; }
FUZZ_DIR=build-fuzz/fuzz-run
rm -rf "$FUZZ_DIR" && mkdir -p "$FUZZ_DIR/seeds" "$FUZZ_DIR/new" "$FUZZ_DIR/crashes"
bash tests/fuzz/make_corpus.sh "$KEEL" ../shared "$FUZZ_DIR/seeds" >/dev/null
cp tests/fuzz/corpus/* "$FUZZ_DIR/seeds/" 2>/dev/null || true
echo "seed corpus: $(ls "$FUZZ_DIR/seeds" | wc -l) files"
# New inputs go to new/; any crash is written to crashes/ and fails the run.
if ! build-fuzz/tests/fuzz/fuzz_loader -max_total_time="$FUZZ_SECONDS" -rss_limit_mb=2048 -timeout=10 \
     -print_final_stats=1 -artifact_prefix="$FUZZ_DIR/crashes/" "$FUZZ_DIR/new" "$FUZZ_DIR/seeds" \
     >"$FUZZ_DIR/log" 2>&1; then
  tail -60 "$FUZZ_DIR/log" >&2
  echo "proofs: the loader fuzzer found a failure; inputs in $FUZZ_DIR/crashes" >&2
  exit 1
fi
grep -E "stat::number_of_executed_units|stat::peak_rss_mb|cov:" "$FUZZ_DIR/log" | tail -3
[ -z "$(ls -A "$FUZZ_DIR/crashes")" ] || { echo "proofs: fuzzer crash artifacts in $FUZZ_DIR/crashes" >&2; exit 1; }

step "freestanding Cortex-M33 build and symbol check"
BUILD_DIR="$BUILD_DIR" JOBS="$JOBS" bash scripts/freestanding.sh

step "all proofs passed"
