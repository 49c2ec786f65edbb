#!/usr/bin/env bash
# The installed package, used as a user would: installs the build into a temporary prefix,
# converts stories260K with the installed keel tool (and a shape header), builds the separate
# project consumer/ against find_package(Keel), and checks that its C API and keel::Engine
# programs print exactly what `keel run --temp 0` prints; then runs the consumer's own
# keel_add_memory_check() tests, and compiles the C program again from `pkg-config keel` alone.
#
#   install_test.sh BUILD_DIR SOURCE_DIR SHARED_DIR WORK_DIR CMAKE C_COMPILER CXX_COMPILER
#
# Any missing input is a failure, never a skip.
set -euo pipefail
if [ $# -ne 7 ]; then
  echo "usage: install_test.sh BUILD_DIR SOURCE_DIR SHARED_DIR WORK_DIR CMAKE C_COMPILER CXX_COMPILER" >&2
  exit 2
fi
BUILD="$1" SRC="$2" SHARED="$3" WORK="$4" CMAKE="$5" CC="$6" CXX="$7"
PROMPT="Once upon a time"
N=40
MODEL_DIR="$SHARED/models/stories260K"

fail() { echo "install_test: $*" >&2; exit 1; }
for f in "$BUILD/cmake_install.cmake" "$MODEL_DIR/stories260K.bin" "$MODEL_DIR/tok512.bin" \
         "$SHARED/data/paul_graham_essays" "$SRC/tests/install/consumer/CMakeLists.txt"; do
  [ -e "$f" ] || fail "expected $f, found none"
done
command -v pkg-config >/dev/null || fail "pkg-config not found (scripts/setup.sh installs it)"

rm -rf "$WORK"
mkdir -p "$WORK/shape"
PREFIX="$WORK/prefix"
step() { echo "== $*"; }
# run LOG CMD...: runs CMD with its output in LOG, shown when it fails
run() {
  local log="$1"; shift
  "$@" >"$log" 2>&1 || { cat "$log" >&2; fail "failed: $* (log: $log)"; }
}

step "cmake --install $BUILD --prefix $PREFIX"
run "$WORK/install.log" "$CMAKE" --install "$BUILD" --prefix "$PREFIX"
for f in bin/keel include/keel/keel.h include/keel/keel.hpp include/keel/keel_generated.h \
         include/keel/core/check.h include/keel/llm/runtime.h include/keel/text/stream_decoder.h \
         include/keel/ports/linux/mapped_file.h include/keel/alloc_probe/alloc_probe.h \
         lib/libkeel_engine.a lib/libkeel_port_linux.a lib/cmake/Keel/KeelConfig.cmake \
         lib/cmake/Keel/KeelConfigVersion.cmake lib/cmake/Keel/KeelTargets.cmake \
         lib/cmake/Keel/KeelMemoryCheck.cmake lib/pkgconfig/keel.pc; do
  [ -e "$PREFIX/$f" ] || fail "the install has no $f"
done
# Nothing of the build or source tree may leak into the installed package's files.
if grep -l -e "$BUILD" -e "$SRC" -r "$PREFIX/lib/cmake" "$PREFIX/lib/pkgconfig"; then
  fail "the installed CMake or pkg-config files above name the build or source directory"
fi
KEEL="$PREFIX/bin/keel"

step "keel convert (installed tool): stories260K, --kv-budget 256 --chunk 16, shape header"
MODEL="$WORK/stories260k.keel"
run "$WORK/convert.log" "$KEEL" convert "$MODEL_DIR/stories260K.bin" --tokenizer "$MODEL_DIR/tok512.bin" \
  -o "$MODEL" --kv-budget 256 --chunk 16 --header "$WORK/shape/stories260k_shape.h" \
  --header-namespace stories260k -q

step "consumer project: configure and build against $PREFIX"
run "$WORK/consumer-configure.log" "$CMAKE" -S "$SRC/tests/install/consumer" -B "$WORK/consumer" \
  -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_COMPILER="$CC" -DCMAKE_CXX_COMPILER="$CXX" \
  -DCMAKE_PREFIX_PATH="$PREFIX" -DKEEL_SHAPE_DIR="$WORK/shape" -DKEEL_TEST_MODEL="$MODEL" \
  -DKEEL_TEST_TEXT="$SHARED/data/paul_graham_essays"
run "$WORK/consumer-build.log" "$CMAKE" --build "$WORK/consumer" -j 2

step "greedy text: keel run vs the C API vs keel::Engine"
# keel run prints the generated text and a newline on stdout, its statistics on stderr.
"$KEEL" run -m "$MODEL" -p "$PROMPT" -n $N --temp 0 --backend native -t 1 --kv-budget 256 --chunk 16 \
  >"$WORK/want.txt" 2>"$WORK/keel_run.log" || { cat "$WORK/keel_run.log" >&2; fail "keel run failed"; }
[ "$(wc -c <"$WORK/want.txt")" -gt 40 ] || fail "keel run printed '$(cat "$WORK/want.txt")'; expected $N tokens of text"
echo "keel run: $(cat "$WORK/want.txt")"
compare() {
  local name="$1"; shift
  "$@" >"$WORK/$name.txt" 2>"$WORK/$name.log" || { cat "$WORK/$name.log" >&2; fail "$name failed"; }
  cmp -s "$WORK/want.txt" "$WORK/$name.txt" ||
    fail "$name printed '$(cat "$WORK/$name.txt")'; keel run printed '$(cat "$WORK/want.txt")'"
  echo "$name: same text"
}
compare c_greedy "$WORK/consumer/c_greedy" "$MODEL" "$PROMPT" $N
compare engine_greedy "$WORK/consumer/engine_greedy" "$MODEL" "$PROMPT" $N

step "the consumer's keel_add_memory_check() tests (installed keel tool and probe)"
run "$WORK/consumer-ctest.log" "$(dirname "$CMAKE")/ctest" --test-dir "$WORK/consumer" --output-on-failure
grep -q "100% tests passed, 0 tests failed out of 2" "$WORK/consumer-ctest.log" ||
  fail "expected the consumer's 2 tests to pass (log: $WORK/consumer-ctest.log)"
grep -E "Test +#" "$WORK/consumer-ctest.log"

step "pkg-config: the C program from \`pkg-config --cflags --libs keel\`"
PC_FLAGS=$(PKG_CONFIG_PATH="$PREFIX/lib/pkgconfig" pkg-config --cflags --libs keel) || fail "pkg-config keel failed"
echo "pkg-config --cflags --libs keel: $PC_FLAGS"
# shellcheck disable=SC2086
run "$WORK/pkg-config-build.log" "$CC" -O2 "$SRC/tests/install/consumer/c_greedy.c" -o "$WORK/c_greedy_pc" $PC_FLAGS
compare c_greedy_pkg_config "$WORK/c_greedy_pc" "$MODEL" "$PROMPT" $N

echo "install_test: ok"
