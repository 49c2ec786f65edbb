#!/usr/bin/env bash
# Keel against llama.cpp's llama-bench on a Raspberry Pi 5 (or any aarch64 Linux machine), both
# built natively on it, on the same GGUF: SmolLM2-135M-Instruct Q4_1 and a Q4_0 made from it by
# llama-quantize, at 1, 2 and 4 threads, with the decode ceiling from the DRAM read bandwidth
# measured on the machine (`keel bench --bandwidth`) beside the tokens/s.
#
# The measuring is bench/vs_llamacpp.py's, the one behind the x86 comparison in
# docs/performance.md (alternating processes, medians, peak RSS, ceiling); llama.cpp is built by
# bench/build_llamacpp.sh (the pinned sdist, GGML_NATIVE: on aarch64 its CMake picks -mcpu for
# the CPU it runs on, so it gets dotprod / i8mm where the CPU has them). Keel is built Release in
# build-native/ (its kernels choose their tier at run time, so no -mcpu is needed).
#
# Not yet run on ARM hardware: no such machine was available where this script was written. On
# x86 it runs only with --allow-non-arm (a dry run of the pipeline with the x86 builds).
#
# usage: bench/arm/pi_bench.sh [options]
#   --gguf PATH         weights (default: the SmolLM2-135M-Instruct Q4_1 of models/smollm2.recipe,
#                       fetched into the cache by scripts/recipe.py)
#   --keel-bin PATH     a keel binary to use instead of building build-native/
#   --llama-bin DIR     llama-bench and llama-quantize's directory instead of building them
#   -t LIST             thread counts (default 1,2,4)
#   -r N                repetitions (default 5)
#   -p N, -n N          prompt and generated tokens (default 128, 64)
#   --depths LIST       tokens already in the KV cache (default 0)
#   --out DIR           where pi_bench.json and pi_bench.md go (default bench/arm/results-<host>)
#   --jobs N            parallel compile jobs (default: the number of CPUs)
#   --allow-non-arm     run on a non-aarch64 machine (a dry run; the figures are not ARM's)
#   -h, --help
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)

die() { echo "pi_bench.sh: $*" >&2; exit 1; }
usage() { sed -n '/^# usage:/,/^#   -h, --help/p' "$0" | sed 's/^# \{0,1\}//'; }

GGUF="" KEEL_BIN="" LLAMA_BIN="" THREADS=1,2,4 REPS=5 NP=128 NG=64 DEPTHS=0 OUT="" ALLOW_NON_ARM=0
JOBS=$(nproc 2>/dev/null || echo 2)
need_arg() { [[ $# -ge 2 && -n $2 ]] || die "$1 needs a value"; }
while [[ $# -gt 0 ]]; do
    case $1 in
        --gguf) need_arg "$@"; GGUF=$2; shift 2 ;;
        --keel-bin) need_arg "$@"; KEEL_BIN=$2; shift 2 ;;
        --llama-bin) need_arg "$@"; LLAMA_BIN=$2; shift 2 ;;
        -t) need_arg "$@"; THREADS=$2; shift 2 ;;
        -r) need_arg "$@"; REPS=$2; shift 2 ;;
        -p) need_arg "$@"; NP=$2; shift 2 ;;
        -n) need_arg "$@"; NG=$2; shift 2 ;;
        --depths) need_arg "$@"; DEPTHS=$2; shift 2 ;;
        --out) need_arg "$@"; OUT=$2; shift 2 ;;
        --jobs) need_arg "$@"; JOBS=$2; shift 2 ;;
        --allow-non-arm) ALLOW_NON_ARM=1; shift ;;
        -h|--help) usage; exit 0 ;;
        *) usage >&2; die "unknown argument: $1" ;;
    esac
done
[[ $THREADS =~ ^[1-9][0-9]*(,[1-9][0-9]*)*$ ]] || die "-t wants thread counts like 1,2,4, got '$THREADS'"
[[ $DEPTHS =~ ^[0-9]+(,[0-9]+)*$ ]] || die "--depths wants token counts like 0,512, got '$DEPTHS'"
for v in "$REPS" "$NP" "$NG" "$JOBS"; do
    [[ $v =~ ^[1-9][0-9]*$ ]] || die "-r, -p, -n and --jobs want positive integers, got '$v'"
done

ARCH=$(uname -m)
if [[ $ARCH != aarch64 && $ARCH != arm64 ]]; then
    [[ $ALLOW_NON_ARM == 1 ]] || die "this machine is $ARCH, not aarch64 (--allow-non-arm for a dry run)"
    echo "pi_bench.sh: DRY RUN on $ARCH: the figures below are this machine's, not an ARM board's" >&2
fi
for tool in cmake python3 git; do command -v "$tool" >/dev/null || die "$tool is required (scripts/setup.sh installs it)"; done

# What the figures were taken on: the board, the cores, their clocks and the memory.
echo "== machine" >&2
[[ -r /proc/device-tree/model ]] && echo "board: $(tr -d '\0' </proc/device-tree/model)" >&2
lscpu 2>/dev/null | grep -E '^(Model name|Vendor ID|CPU\(s\)|CPU max MHz|Flags)' | cut -c1-160 >&2 || true
grep -m1 MemTotal /proc/meminfo >&2 || true
gov=/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor
[[ -r $gov ]] && echo "cpufreq governor: $(cat $gov) (performance avoids ramp-up noise)" >&2
command -v vcgencmd >/dev/null && { vcgencmd measure_temp; vcgencmd get_throttled; } >&2 || true

if [[ -z $GGUF ]]; then
    python3 "$ROOT/scripts/recipe.py" fetch smollm2 >&2 || die "fetching SmolLM2 (scripts/recipe.py fetch smollm2) failed"
    GGUF=$(python3 "$ROOT/scripts/recipe.py" path smollm2)
fi
[[ -f $GGUF ]] || die "no GGUF at $GGUF"

if [[ -z $KEEL_BIN ]]; then
    echo "== building keel (Release) in $ROOT/build-native" >&2
    cmake -S "$ROOT" -B "$ROOT/build-native" -DCMAKE_BUILD_TYPE=Release -DKEEL_BUILD_TESTS=OFF >&2 \
        || die "configuring build-native failed (scripts/setup.sh installs the dependencies)"
    cmake --build "$ROOT/build-native" -j "$JOBS" --target keel >&2 || die "building keel failed"
    KEEL_BIN=$ROOT/build-native/tools/keel
fi
[[ -x $KEEL_BIN ]] || die "no keel binary at $KEEL_BIN"

if [[ -z $LLAMA_BIN ]]; then
    echo "== building llama.cpp (bench/build_llamacpp.sh)" >&2
    LLAMA_BIN=$(JOBS=$JOBS bash "$ROOT/bench/build_llamacpp.sh" | tail -n 1) || die "bench/build_llamacpp.sh failed"
fi
[[ -x $LLAMA_BIN/llama-bench && -x $LLAMA_BIN/llama-quantize ]] || die "no llama-bench and llama-quantize in $LLAMA_BIN"

OUT=${OUT:-$HERE/results-$(hostname -s)}
mkdir -p "$OUT"
echo "== keel against llama-bench: threads $THREADS, depths $DEPTHS, $REPS repetitions" >&2
python3 "$ROOT/bench/vs_llamacpp.py" --gguf "$GGUF" --q4_0 --keel-bin "$KEEL_BIN" --llama-bin "$LLAMA_BIN" \
    -t "$THREADS" -r "$REPS" -p "$NP" -n "$NG" --depths "$DEPTHS" \
    --json "$OUT/pi_bench.json" --markdown "$OUT/pi_bench.md"
# The kernel tier the dispatcher chose (neon, neon-dotprod, neon-i8mm on ARM) and the ceiling's
# inputs, which the markdown tables leave out.
python3 - "$OUT/pi_bench.json" <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))["rows"]
print(f"keel backend: {rows[0]['keel']['backend']}")
for r in rows:
    print(f"{r['weights']} t{r['threads']} d{r['depth']}: DRAM read {r['dram_read_gbps']:.1f} GB/s, "
          f"{r['bytes_per_token'] / 1e6:.1f} MB a token -> ceiling {r['decode_ceiling_tps']:.0f} t/s; "
          f"tg keel {r['keel']['tg_tps']:.1f}, llama.cpp {r['llama.cpp']['tg_tps']:.1f}")
PY
echo "pi_bench.sh: tables in $OUT/pi_bench.md, every sample in $OUT/pi_bench.json" >&2
echo "pi_bench.sh: the ceiling is the measured DRAM read bandwidth over the bytes a decode step reads" >&2
