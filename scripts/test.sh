#!/usr/bin/env bash
# The README's test command: set up, build (Release) and run the whole test suite with CTest,
# then the proofs (scripts/proofs.sh): the suite again under ASan + UBSan, the loader fuzzer
# for a fixed time, the freestanding Cortex-M33 build and its symbol check.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
BUILD_DIR="${BUILD_DIR:-build}"
start=$(date +%s)
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$BUILD_DIR" -j "$(nproc)"
ctest --test-dir "$BUILD_DIR" --output-on-failure -j "$(nproc)"
echo "test: Release suite passed in $(( $(date +%s) - start )) s"
BUILD_DIR="$BUILD_DIR" bash scripts/proofs.sh
echo "test: everything passed in $(( $(date +%s) - start )) s"
