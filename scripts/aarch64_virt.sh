#!/usr/bin/env bash
# Bare-metal aarch64 (docs/freestanding.md, "Bare-metal aarch64"): cross-builds the engine and
# the ports/aarch64-virt image (no operating system, Cortex-A76, MMU on) with SmolLM2-135M's
# static Engine<> sized by `keel convert --header`, checks the undefined symbols of the engine
# library and of the image (no allocator, no exit or abort, no stdio, no file I/O, no
# environment, no exception or RTTI machinery), runs the image on qemu-system-aarch64's virt
# machine with the model placed in RAM by QEMU's loader device, and compares its greedy text
# with the arm64 Linux build of the keel tool on the same model, prompt, token count and
# backend, run under qemu-aarch64 on the same CPU model. Exits non-zero on any failure.
#
# Why the arm64 Linux build and not the x86 host tool: the native kernels of the two
# architectures sum in different lane orders, so a greedy native text may part after a few
# dozen tokens (printed below, not checked); scripts/arm64.sh checks the ref backend's aarch64
# text against x86. The arm64 Linux tool compiles the same kernel sources with the same compiler, and
# qemu-aarch64 -cpu cortex-a76 gives it the dotprod tier the image selects at compile time.
#
#   BUILD_DIR        host build holding tools/keel, which converts the model (default build)
#   ARM64_BUILD_DIR  arm64 Linux build holding tools/keel (default build-arm64; configured
#                    with cmake/aarch64-linux-gnu.cmake when missing)
#   VIRT_BUILD_DIR   bare-metal build (default build-a64virt)
#   BACKEND          native (the arm64 kernels) or ref (default native)
#   TOKENS           tokens to generate at most (default 64)
#   QEMU_TIMEOUT     seconds the image may run (default 300)
#   JOBS             parallel build jobs (default: all cores)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
BUILD_DIR="${BUILD_DIR:-build}"
ARM64_BUILD_DIR="${ARM64_BUILD_DIR:-build-arm64}"
VIRT_BUILD_DIR="${VIRT_BUILD_DIR:-build-a64virt}"
BACKEND="${BACKEND:-native}"
TOKENS="${TOKENS:-64}"
QEMU_TIMEOUT="${QEMU_TIMEOUT:-300}"
JOBS="${JOBS:-$(nproc)}"
# The image's prompt (ports/aarch64-virt/main.cpp, kPrompt); the image echoes it and the
# script checks the echo, so the two cannot drift apart unnoticed.
PROMPT=$'<|im_start|>user\nWrite a short poem about the sea.<|im_end|>\n<|im_start|>assistant\n'
start_all=$(date +%s)
# milliseconds since $1 (a `date +%s%N`), printed as seconds with one decimal
seconds_since() {
  local ms=$((($(date +%s%N) - $1) / 1000000))
  printf "%d.%d" $((ms / 1000)) $((ms % 1000 / 100))
}

die() {
  echo "aarch64_virt: $*" >&2
  echo "aarch64_virt: FAILED" >&2
  exit 1
}

[[ "$BACKEND" =~ ^(native|ref)$ ]] || die "BACKEND: expected native or ref, found '$BACKEND'"
[[ "$TOKENS" =~ ^[1-9][0-9]*$ ]] || die "TOKENS: expected a positive number, found '$TOKENS'"
for tool in aarch64-linux-gnu-g++ qemu-system-aarch64 qemu-aarch64; do
  command -v "$tool" >/dev/null || die "$tool not found; scripts/setup_arm64.sh installs the cross compiler and QEMU"
done

echo "== host keel tool ($BUILD_DIR)"
if ! { cmake -S . -B "$BUILD_DIR" >/dev/null && cmake --build "$BUILD_DIR" -j "$JOBS" --target keel >/dev/null; }; then
  die "the host build of the keel tool failed (in $BUILD_DIR)"
fi
KEEL="$(cd "$BUILD_DIR" && pwd)/tools/keel"
[ -x "$KEEL" ] || die "expected the host tool at $KEEL, found none"

echo "== arm64 Linux keel tool ($ARM64_BUILD_DIR), the reference"
if [ ! -f "$ARM64_BUILD_DIR/CMakeCache.txt" ]; then
  cmake -S . -B "$ARM64_BUILD_DIR" -DCMAKE_TOOLCHAIN_FILE="$ROOT/cmake/aarch64-linux-gnu.cmake" \
    -DKEEL_QEMU_CPU=cortex-a76 >/dev/null || die "configuring $ARM64_BUILD_DIR failed (scripts/setup_arm64.sh installs what it needs)"
fi
cmake --build "$ARM64_BUILD_DIR" -j "$JOBS" --target keel >/dev/null || die "the arm64 build of the keel tool failed (in $ARM64_BUILD_DIR)"
KEEL_ARM64="$(cd "$ARM64_BUILD_DIR" && pwd)/tools/keel"
[ -x "$KEEL_ARM64" ] || die "expected the arm64 tool at $KEEL_ARM64, found none"

echo "== bare-metal aarch64 build ($VIRT_BUILD_DIR, backend $BACKEND, $TOKENS tokens)"
cmake -S ports/aarch64-virt -B "$VIRT_BUILD_DIR" -DCMAKE_TOOLCHAIN_FILE="$ROOT/cmake/aarch64-none-virt.cmake" \
  -DKEEL_HOST_TOOL="$KEEL" -DKEEL_VIRT_BACKEND="$BACKEND" -DKEEL_VIRT_TOKENS="$TOKENS" >/dev/null ||
  die "configuring ports/aarch64-virt failed"
LOG="$VIRT_BUILD_DIR/build.log"
if ! cmake --build "$VIRT_BUILD_DIR" -j "$JOBS" >"$LOG" 2>&1; then
  grep -E "error|undefined reference" "$LOG" | head -40 >&2 || true
  die "the cross build failed (full log: $LOG)"
fi
ELF="$VIRT_BUILD_DIR/keel_a64virt.elf"
MODEL="$VIRT_BUILD_DIR/generated/smollm2.keel"
for f in "$ELF" "$MODEL" "$VIRT_BUILD_DIR/generated/smollm2_shape.h"; do
  [ -f "$f" ] || die "expected $f after the build, found none"
done
aarch64-linux-gnu-size -A "$ELF" |
  awk '$1 ~ /^\.(stack|text|rodata|init_array|data|bss|exception_stack)$/ {printf "  %-17s %9d bytes\n", $1, $2}'
aarch64-linux-gnu-nm -S -C "$ELF" | while read -r _ size _ name; do
  if [[ "$name" == *::engine ]]; then
    echo "  static keel::Engine object: $((16#$size)) bytes of .bss (map: $VIRT_BUILD_DIR/keel_a64virt.map)"
  fi
done
echo "  model: $(stat -c %s "$MODEL") bytes ($MODEL), placed by QEMU's loader"
FORMAT_WARNINGS=$(grep -E "warning: .*\[-Wformat[^]]*\]" "$LOG" || true)
[ -z "$FORMAT_WARNINGS" ] || { echo "$FORMAT_WARNINGS" >&2; die "-Wformat warnings in the cross build (above); expected none"; }

# The rule of scripts/freestanding.sh (docs/freestanding.md, "The symbol rule").
ALLOC='malloc|calloc|realloc|free|aligned_alloc|posix_memalign|memalign|valloc|pvalloc|sbrk|_Zn[wa].*|_Zd[la].*'
EXIT='abort|exit|_exit|_Exit|quick_exit|atexit|at_quick_exit|__cxa_atexit|__cxa_thread_atexit'
STDIO='v?[fs]?n?i?printf|puts|putchar|fputs|fputc|putc|fflush|perror|_[a-z]*printf_chk'
FILEIO='fopen|fdopen|freopen|fread|fwrite|fclose|fseek|ftell|open|openat|creat|read|write|close|lseek'
FILEIO+='|mmap|munmap|stat|fstat|_open_2|_read_chk'
ENVIRON='getenv|secure_getenv|system|getauxval'
CXXRT='__cxa_throw|__cxa_allocate_exception|__cxa_free_exception|__cxa_begin_catch|__cxa_end_catch|__cxa_rethrow'
CXXRT+='|__gxx_personality_v0|_Unwind_.*'
CXXRT+='|_ZTI.*|_ZTS.*|_ZTVN10__cxxabiv1.*|__dynamic_cast|__cxa_bad_cast|__cxa_bad_typeid'
CXXRT+='|__cxa_guard_.*|__cxa_pure_virtual|__cxa_deleted_virtual'
CXXRT+='|_ZSt9terminatev|_ZSt[0-9]+__throw_.*|__assert_func|__assert_fail|__stack_chk_fail|__stack_chk_guard'
BANNED_RE="^_?($ALLOC|$EXIT|$STDIO|$FILEIO|$ENVIRON|$CXXRT)(_r|64)?\$"

status=0
echo "== symbol check"
LIB="$VIRT_BUILD_DIR/keel/engine/libkeel_engine.a"
[ -f "$LIB" ] || die "expected $LIB, found none"
defined=$(aarch64-linux-gnu-nm --defined-only -A "$LIB" 2>/dev/null | awk '{print $NF}' | sort -u)
# "lib.a:member.o:         U symbol" -> "member.o symbol", external references only
undefined=$(aarch64-linux-gnu-nm -u -A "$LIB" 2>/dev/null | awk '{n = split($1, p, ":"); print p[n - 1], $NF}' |
  sort -u | awk 'NR == FNR {def[$1] = 1; next} !($2 in def)' <(echo "$defined") -)
echo "-- engine library: symbols $(basename "$LIB") references and does not define:"
echo "$undefined" | awk '{print $2}' | sort | uniq -c | awk '{printf "%s(%d) ", $2, $1}' | fmt -w 116 | sed 's/^/   /'
bad=$(echo "$undefined" | awk -v re="$BANNED_RE" '$2 ~ re')
if [ -n "$bad" ]; then
  echo "$bad" | while read -r obj sym; do
    echo "aarch64_virt: engine library: $obj references $sym ($(echo "$sym" | c++filt)); expected no allocator," \
      "exit, stdio, file I/O, environment or C++ runtime symbol" >&2
  done
  status=1
else
  echo "-- engine library: ok"
fi
# The image is linked with -nostdlib: every symbol is the program's, the engine's or libgcc's.
# None may be undefined (a weak reference would be a null call), none may be a banned name
# (nothing supplies an allocator, stdio or exit behind the check's back).
img_undefined=$(aarch64-linux-gnu-nm -u "$ELF" | awk '{print $NF}')
[ -z "$img_undefined" ] || { echo "aarch64_virt: the image leaves undefined: $img_undefined" >&2; status=1; }
img_bad=$(aarch64-linux-gnu-nm --defined-only "$ELF" | awk -v re="$BANNED_RE" '$NF ~ re {print $NF}')
[ -z "$img_bad" ] || { echo "aarch64_virt: the image defines $img_bad; expected none of the banned names" >&2; status=1; }
echo "-- image: C library functions it supplies itself:" \
  "$(aarch64-linux-gnu-nm --defined-only "$VIRT_BUILD_DIR/CMakeFiles/keel_a64virt.dir/libc.cpp.obj" \
    "$VIRT_BUILD_DIR/CMakeFiles/keel_a64virt.dir/libm.cpp.obj" | awk '$2 == "T" {print $3}' | sort | xargs)"
[ $status -eq 0 ] && echo "-- image: no undefined symbol, no banned name defined"

MODEL_BASE=$(aarch64-linux-gnu-nm "$ELF" | awk '$3 == "keel_model_base" {print "0x" $1}')
[ -n "$MODEL_BASE" ] || die "the image defines no keel_model_base (ports/aarch64-virt/virt.ld)"

# Faults are reported, never a hang: the image without the engine (ports/aarch64-virt/faults.cpp)
# faults as the word the loader writes at the model's address asks, and must print the
# syndrome and exit with status 3.
echo "== fault reports"
FAULTS_ELF="$VIRT_BUILD_DIR/keel_a64virt_faults.elf"
[ -f "$FAULTS_ELF" ] || die "expected $FAULTS_ELF after the build, found none"
# check_fault WORD WHAT PATTERN...: every extended regular expression must match a line.
check_fault() {
  local which="$1" what="$2" out fault_status pattern missing=""
  shift 2
  set +e
  out=$(timeout 60 qemu-system-aarch64 -M virt -cpu cortex-a76 -m 512M -nographic -nic none \
    -semihosting-config enable=on,target=native -kernel "$FAULTS_ELF" \
    -device loader,addr="$MODEL_BASE",data="$which",data-len=4 </dev/null 2>&1)
  fault_status=$?
  set -e
  for pattern in "$@"; do
    grep -qE "$pattern" <<<"$out" || missing+=" '$pattern'"
  done
  if [ $fault_status -ne 3 ] || [ -n "$missing" ]; then
    echo "$out" | sed 's/^/   /' >&2
    echo "aarch64_virt: $what: expected exit status 3 and a report matching$missing; got status $fault_status" >&2
    status=1
  else
    echo "-- $what: $(grep -E "^keel:   ESR" <<<"$out" | sed 's/^keel: *//')"
  fi
}
check_fault 1 "stack overflow into the guard" "synchronous, data abort$" "FAR_EL1 0x00000000401f[0-9a-f]{4} "
check_fault 2 "write to the read-only model" "synchronous, data abort$" "FAR_EL1 0x0*${MODEL_BASE#0x} "
check_fault 3 "undefined instruction" "synchronous, unknown reason"

echo "== run on qemu-system-aarch64 -M virt -cpu cortex-a76 (TCG; wall time is not a speed)"
UART="$VIRT_BUILD_DIR/uart.txt"
rm -f "$UART"
start_run=$(date +%s%N)
set +e
timeout "$QEMU_TIMEOUT" qemu-system-aarch64 -M virt -cpu cortex-a76 -m 512M -nographic -nic none \
  -semihosting-config enable=on,target=native -kernel "$ELF" \
  -device loader,file="$MODEL",addr="$MODEL_BASE",force-raw=on </dev/null >"$UART" 2>"$VIRT_BUILD_DIR/qemu.log"
qemu_status=$?
set -e
run_seconds=$(seconds_since "$start_run")
cat "$UART"
echo "-- qemu-system-aarch64 ran $run_seconds s (exit status $qemu_status)"
if [ $qemu_status -eq 124 ]; then
  die "the image did not finish within QEMU_TIMEOUT=$QEMU_TIMEOUT s (UART: $UART)"
elif [ $qemu_status -ne 0 ]; then
  die "the image exited with status $qemu_status (1: engine error, 3: CPU exception; UART above, $UART;" \
    "qemu's messages: $VIRT_BUILD_DIR/qemu.log)"
fi
grep -q "^keel: done" "$UART" || die "the image exited 0 without 'keel: done' (UART: $UART)"
echoed=$(sed -n 's/^keel: prompt "\(.*\)", [0-9]* tokens$/\1/p' "$UART")
[ "$echoed" = "$(printf '%s' "$PROMPT" | sed -z 's/\n/\\n/g')" ] ||
  die "the image's prompt '$echoed' differs from the script's; keep ports/aarch64-virt/main.cpp and PROMPT equal"
got=$(grep -v "^keel: " "$UART" || true)

echo "== reference: $ARM64_BUILD_DIR/tools/keel run --backend $BACKEND under qemu-aarch64 -cpu cortex-a76"
start_ref=$(date +%s%N)
want=$(qemu-aarch64 -cpu cortex-a76 "$KEEL_ARM64" run -m "$MODEL" -p "$PROMPT" -n "$TOKENS" \
  --temp 0 --backend "$BACKEND" -t 1 --kv-budget 256 --chunk 16 2>"$VIRT_BUILD_DIR/reference.log") ||
  die "the arm64 reference run failed ($VIRT_BUILD_DIR/reference.log)"
echo "-- reference ran $(seconds_since "$start_ref") s"
if [ "$got" != "$want" ]; then
  printf 'aarch64_virt: the image printed:\n%s\naarch64_virt: the arm64 Linux tool printed:\n%s\n' "$got" "$want" >&2
  die "the bare-metal text differs from the arm64 Linux tool's (backend $BACKEND, $TOKENS tokens)"
fi
echo "-- the image's text equals the arm64 Linux tool's ($BACKEND backend, greedy)"

# For information only (see the top of this file): the x86 host tool on the same backend.
host=$("$KEEL" run -m "$MODEL" -p "$PROMPT" -n "$TOKENS" --temp 0 --backend "$BACKEND" -t 1 --kv-budget 256 --chunk 16 \
  2>/dev/null || true)
if [ "$host" = "$got" ]; then
  echo "-- x86 host tool, $BACKEND backend: the same text"
else
  echo "-- x86 host tool, $BACKEND backend (not checked; its kernels sum in another order, see the top of this script):"
  echo "$host" | sed 's/^/   /'
fi

[ $status -eq 0 ] || die "the symbol check failed (above)"
echo "aarch64_virt: ok in $(($(date +%s) - start_all)) s (the image ran $run_seconds s under TCG)"
