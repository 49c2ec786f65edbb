#!/usr/bin/env bash
# The README's test command: set up, build (Release) and run the whole test suite with CTest,
# then the proofs (scripts/proofs.sh): the unit, soak and hostile-input tests again under ASan +
# UBSan, the loader fuzzer for a fixed time, the freestanding Cortex-M33 build and its symbol
# check, then the aarch64 stage (scripts/arm64.sh: the cross build's tests under qemu-aarch64 on
# each kernel tier's CPU, SmolLM2 on bare-metal aarch64). Ends with a table of the stages' times.
#
#   --quick    before a commit: the Release build of what the unit tests need, then the tests
#              labelled unit (tests/CMakeLists.txt: in process, synthetic inputs or stories260K)
#   BUILD_DIR  the Release build (default build)
#   JOBS       parallel jobs (default: all cores)
set -euo pipefail
cd "$(dirname "$0")/.."
QUICK=0
case "${1:-}" in
  "") ;;
  --quick) QUICK=1 ;;
  *)
    echo "usage: scripts/test.sh [--quick]; got '$1'" >&2
    exit 2
    ;;
esac
BUILD_DIR="${BUILD_DIR:-build}"
JOBS="${JOBS:-$(nproc)}"
export BUILD_DIR JOBS
source scripts/stage_times.sh

stage "setup" bash scripts/setup.sh
source scripts/compiler_cache.sh
stage "configure (Release)" cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release "${KEEL_CMAKE_CACHE_ARGS[@]}" >/dev/null
if [ $QUICK -eq 1 ]; then
  stage "build the unit tests (Release)" cmake --build "$BUILD_DIR" -j "$JOBS" --target tests_unit
  stage "unit tests (Release)" ctest --test-dir "$BUILD_DIR" --output-on-failure -j "$JOBS" -L '^unit$'
  exit 0
fi
stage "build (Release)" cmake --build "$BUILD_DIR" -j "$JOBS"
stage "whole suite (Release)" ctest --test-dir "$BUILD_DIR" --output-on-failure -j "$JOBS"
bash scripts/proofs.sh
bash scripts/arm64.sh
compiler_cache_summary
