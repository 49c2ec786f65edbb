#!/usr/bin/env bash
# The proofs that run after the Release suite (README "Tests"; docs/memcheck.md,
# docs/freestanding.md): the tests labelled unit, soak and hostile again under AddressSanitizer +
# UndefinedBehaviorSanitizer (not the model and cli ones: real-model runs and the tool's output,
# which the Release suite has just run; tests/CMakeLists.txt says which test is which), the
# fuzzers for a fixed time each over their seed corpora (the loader; keel serve's request parser;
# the tokenizers), and the freestanding Cortex-M33 build with its symbol check. Exits non-zero on
# the first failure; scripts/stage_times.sh times each stage.
#
#   BUILD_DIR     the Release build (default build): its keel tool makes the fuzz corpus
#   FUZZ_SECONDS  the loader fuzzer's run time (default 120)
#   FUZZ_NET_SECONDS  the request and tokenizer fuzzers' run time, each (default 60)
#   JOBS          parallel jobs (default: all cores)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR="${BUILD_DIR:-build}"
FUZZ_SECONDS="${FUZZ_SECONDS:-120}"
FUZZ_NET_SECONDS="${FUZZ_NET_SECONDS:-60}"
JOBS="${JOBS:-$(nproc)}"
KEEL="$PWD/$BUILD_DIR/tools/keel"
[ -x "$KEEL" ] || { echo "proofs: expected the Release keel tool at $KEEL; run scripts/test.sh" >&2; exit 1; }
source scripts/stage_times.sh
source scripts/compiler_cache.sh
# The labels the sanitizer run takes, and the build targets that make their tests.
SANITIZED_LABELS='^(unit|soak|hostile)$'
SANITIZED_TARGETS=(tests_unit tests_soak tests_hostile)

# Line tables only (-g1): the sanitizers' stack traces keep their files and lines, and the
# build took 17 minutes on two Zen 3 cores in CI, against 28 with full debug information.
stage "configure (ASan + UBSan)" cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" \
  -DKEEL_SANITIZE="address;undefined" "${KEEL_CMAKE_CACHE_ARGS[@]}" >/dev/null
asan_build() {
  cmake --build build-asan -j "$JOBS" --target "${SANITIZED_TARGETS[@]}" >build-asan/build.log 2>&1 ||
    { tail -40 build-asan/build.log >&2; return 1; }
}
stage "build (ASan + UBSan): ${SANITIZED_TARGETS[*]}" asan_build
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:strict_string_checks=1 \
UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  stage "unit, soak, hostile tests (ASan + UBSan)" \
  ctest --test-dir build-asan --output-on-failure -j "$JOBS" -L "$SANITIZED_LABELS"

# The engine is instrumented too (fuzzer-no-link), so each fuzzer sees the coverage of the code
# it drives.
fuzz_build() {
  cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang \
    -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_CXX_FLAGS="-fsanitize=fuzzer-no-link,address,undefined" \
    -DKEEL_BUILD_FUZZ=ON -DKEEL_WITH_XNNPACK=OFF >/dev/null
  cmake --build build-fuzz -j "$JOBS" --target fuzz_loader fuzz_request fuzz_tokenizer >build-fuzz/build.log 2>&1 ||
    { tail -40 build-fuzz/build.log >&2; return 1; }
}
stage "build the fuzzers (clang)" fuzz_build

# fuzz_run NAME SECONDS [libFuzzer options]: the seeds are in build-fuzz/fuzz-NAME/seeds.
fuzz_run() {
  local name="$1" seconds="$2" dir="build-fuzz/fuzz-$1"
  shift 2
  echo "seed corpus: $(ls "$dir/seeds" | wc -l) files"
  # New inputs go to new/; any crash is written to crashes/ and fails the run.
  if ! "build-fuzz/tests/fuzz/fuzz_$name" -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 \
       -print_final_stats=1 -artifact_prefix="$dir/crashes/" "$@" "$dir/new" "$dir/seeds" >"$dir/log" 2>&1; then
    tail -60 "$dir/log" >&2
    echo "proofs: the $name fuzzer found a failure; inputs in $dir/crashes" >&2
    return 1
  fi
  grep -E "stat::number_of_executed_units|stat::peak_rss_mb|cov:" "$dir/log" | tail -3
  [ -z "$(ls -A "$dir/crashes")" ] || { echo "proofs: fuzzer crash artifacts in $dir/crashes" >&2; return 1; }
}
# fuzz_seeds NAME CORPUS_DIR: a fresh run directory for NAME holding the committed corpus.
fuzz_seeds() {
  local dir="build-fuzz/fuzz-$1"
  rm -rf "$dir" && mkdir -p "$dir/seeds" "$dir/new" "$dir/crashes"
  cp "$2"/* "$dir/seeds/" 2>/dev/null || true
}
fuzz_seeds loader tests/fuzz/corpus
bash tests/fuzz/make_corpus.sh "$KEEL" ../shared build-fuzz/fuzz-loader/seeds >/dev/null
stage "loader fuzzer, ${FUZZ_SECONDS} s" fuzz_run loader "$FUZZ_SECONDS"
# Request bodies past 1 KiB add nothing the parser has not seen (the depth limit is reached in
# 130 bytes). The tokenizers take inputs up to 128 bytes: long runs cost the fuzzer (under the
# sanitizers) superlinearly, and the committed corpus holds runs of 3,000 bytes, run once each.
fuzz_seeds request tests/fuzz/corpus_request
stage "request parser fuzzer, ${FUZZ_NET_SECONDS} s" fuzz_run request "$FUZZ_NET_SECONDS" -max_len=1024
fuzz_seeds tokenizer tests/fuzz/corpus_tokenizer
stage "tokenizer fuzzer, ${FUZZ_NET_SECONDS} s" fuzz_run tokenizer "$FUZZ_NET_SECONDS" -max_len=128

stage "freestanding Cortex-M33 build and symbol check" \
  env BUILD_DIR="$BUILD_DIR" JOBS="$JOBS" bash scripts/freestanding.sh
echo
echo "proofs: all passed"
