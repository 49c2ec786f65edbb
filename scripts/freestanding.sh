#!/usr/bin/env bash
# The freestanding proof (docs/freestanding.md): cross-builds the engine and a Cortex-M33
# firmware app (ports/cortex-m33) with stories260K linked into flash, prints the app's RAM and
# flash, and checks the undefined symbols of the engine library: no allocator, no exit or
# abort, no stdio, no file I/O, no environment, no exception or RTTI machinery. The host
# build's engine library gets the same check for the allocation, exit, stdio and file names.
# The firmware then runs on qemu-system-arm's mps2-an505 (Cortex-M33) and its output must equal
# the host tool's on the same model. Exits non-zero on any failure.
#
#   BUILD_DIR      host build holding tools/keel and engine/libkeel_engine.a (default build)
#   ARM_BUILD_DIR  cross build (default build-arm)
#   JOBS           parallel build jobs (default: all cores)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
BUILD_DIR="${BUILD_DIR:-build}"
ARM_BUILD_DIR="${ARM_BUILD_DIR:-build-arm}"
JOBS="${JOBS:-$(nproc)}"

if ! command -v arm-none-eabi-g++ >/dev/null; then
  echo "freestanding: arm-none-eabi-g++ not found; installing the toolchain with scripts/setup.sh"
  bash scripts/setup.sh
fi

echo "== host keel tool ($BUILD_DIR)"
if ! { cmake -S . -B "$BUILD_DIR" >/dev/null && cmake --build "$BUILD_DIR" -j "$JOBS" --target keel >/dev/null; }; then
  echo "freestanding: the host build of the keel tool failed (in $BUILD_DIR)" >&2
  exit 1
fi
KEEL="$(cd "$BUILD_DIR" && pwd)/tools/keel"
[ -x "$KEEL" ] || { echo "freestanding: expected the host tool at $KEEL, found none" >&2; exit 1; }

echo "== Cortex-M33 build ($ARM_BUILD_DIR)"
cmake -S ports/cortex-m33 -B "$ARM_BUILD_DIR" -DCMAKE_TOOLCHAIN_FILE="$ROOT/cmake/arm-none-eabi-cortex-m33.cmake" \
  -DKEEL_HOST_TOOL="$KEEL" >/dev/null
LOG="$ARM_BUILD_DIR/build.log"
if ! cmake --build "$ARM_BUILD_DIR" -j "$JOBS" >"$LOG" 2>&1; then
  grep -E "error|undefined reference" "$LOG" | head -40 >&2 || true
  echo "freestanding: the cross build failed (full log: $LOG)" >&2
  exit 1
fi
ELF="$ARM_BUILD_DIR/keel_m33.elf"
arm-none-eabi-size "$ELF"
arm-none-eabi-size -A "$ELF" |
  awk '$1 ~ /^\.(isr_vector|text|keel_model|data|bss|stack)$/ {printf "  %-12s %8d bytes\n", $1, $2}'
arm-none-eabi-nm -S -C "$ELF" | while read -r _ size _ name; do
  if [[ "$name" == *::engine ]]; then
    echo "  static keel::Engine object: $((16#$size)) bytes of .bss (map: $ARM_BUILD_DIR/keel_m33.map)"
  fi
done

# Format strings must agree with their arguments on this target too, where the host cannot
# tell: newlib's int32_t is `long` (a uint32_t takes PRIu32, not `%u`) and size_t is 32 bits
# (`%zu` given a 64-bit value reads the wrong arguments). Any -Wformat warning fails.
FORMAT_WARNINGS=$(grep -E "warning: .*\[-Wformat[^]]*\]" "$LOG" || true)
if [ -n "$FORMAT_WARNINGS" ]; then
  echo "$FORMAT_WARNINGS" >&2
  echo "freestanding: $(echo "$FORMAT_WARNINGS" | wc -l) -Wformat warnings in the cross build (above; full log:" \
    "$LOG); expected none" >&2
  exit 1
fi

# check_symbols NM LIB LABEL REGEX: fails when an object of LIB references a symbol matching
# REGEX that the library does not define itself.
check_symbols() {
  local nm="$1" lib="$2" label="$3" banned="$4"
  [ -f "$lib" ] || { echo "freestanding: expected $lib, found none" >&2; return 1; }
  local defined undefined
  defined=$("$nm" --defined-only -A "$lib" 2>/dev/null | awk '{print $NF}' | sort -u)
  # "lib.a:member.o:         U symbol" -> "member.o symbol", external references only
  undefined=$("$nm" -u -A "$lib" 2>/dev/null | awk '{n = split($1, p, ":"); print p[n - 1], $NF}' |
    sort -u | awk 'NR == FNR {def[$1] = 1; next} !($2 in def)' <(echo "$defined") -)
  echo "-- $label: symbols $(basename "$lib") references and does not define:"
  echo "$undefined" | awk '{print $2}' | sort | uniq -c | awk '{printf "%s(%d) ", $2, $1}' | fmt -w 116 |
    sed 's/^/   /'
  local bad
  bad=$(echo "$undefined" | awk -v re="$banned" '$2 ~ re')
  if [ -n "$bad" ]; then
    echo "$bad" | while read -r obj sym; do
      local what="" demangled
      for group in ALLOC EXIT STDIO FILEIO ENVIRON CXXRT; do
        [[ "$sym" =~ ^_?(${!group})(_r|64)?$ ]] && { what="${GROUP_NAMES[$group]}"; break; }
      done
      demangled=$(echo "$sym" | c++filt)
      [ "$demangled" != "$sym" ] && sym="$sym ($demangled)"
      echo "freestanding: $label: $obj references $sym, a symbol of $what; expected none in the engine" >&2
    done
    return 1
  fi
  echo "-- $label: ok"
}

ALLOC='malloc|calloc|realloc|free|aligned_alloc|posix_memalign|memalign|valloc|pvalloc|sbrk|_Zn[wa].*|_Zd[la].*'
EXIT='abort|exit|_exit|_Exit|quick_exit|atexit|at_quick_exit|__cxa_atexit|__cxa_thread_atexit'
STDIO='v?[fs]?n?i?printf|puts|putchar|fputs|fputc|putc|fflush|perror|_[a-z]*printf_chk'
FILEIO='fopen|fdopen|freopen|fread|fwrite|fclose|fseek|ftell|open|openat|creat|read|write|close|lseek'
FILEIO+='|mmap|munmap|stat|fstat|_open_2|_read_chk'
ENVIRON='getenv|secure_getenv|system'
# exceptions and unwinding; type info; static-init guards and pure virtuals; std::terminate and
# libstdc++'s throw helpers; assert's failure paths (they print and abort)
CXXRT='__cxa_throw|__cxa_allocate_exception|__cxa_free_exception|__cxa_begin_catch|__cxa_end_catch|__cxa_rethrow'
CXXRT+='|__gxx_personality_v0|__aeabi_unwind_cpp_pr[0-9]|_Unwind_.*'
CXXRT+='|_ZTI.*|_ZTS.*|_ZTVN10__cxxabiv1.*|__dynamic_cast|__cxa_bad_cast|__cxa_bad_typeid'
CXXRT+='|__cxa_guard_.*|__cxa_pure_virtual|__cxa_deleted_virtual'
CXXRT+='|_ZSt9terminatev|_ZSt[0-9]+__throw_.*|__assert_func|__assert_fail'
declare -A GROUP_NAMES=([ALLOC]="the allocator" [EXIT]="process exit or abort" [STDIO]="stdio"
  [FILEIO]="file I/O" [ENVIRON]="the environment" [CXXRT]="the C++ exception, RTTI or static-init runtime")
# newlib's reentrant variants (_malloc_r, _write_r) and 64-bit file variants (open64) count too.
FREESTANDING_RE="^_?($ALLOC|$EXIT|$STDIO|$FILEIO|$ENVIRON|$CXXRT)(_r|64)?\$"
HOST_RE="^_?($ALLOC|$EXIT|$STDIO|$FILEIO)(_r|64)?\$"

status=0
echo "== symbol check"
check_symbols arm-none-eabi-nm "$ARM_BUILD_DIR/keel/engine/libkeel_engine.a" "cortex-m33 engine" "$FREESTANDING_RE" ||
  status=1
# The host library also calls pthreadpool and XNNPACK (xnn_*), and CPU detection; those are fine.
check_symbols nm "$BUILD_DIR/engine/libkeel_engine.a" "host engine" "$HOST_RE" || status=1

if command -v qemu-system-arm >/dev/null; then
  echo "== run on qemu-system-arm -M mps2-an505 (Cortex-M33)"
  UART="$ARM_BUILD_DIR/uart.txt"
  rm -f "$UART"
  timeout 120 qemu-system-arm -M mps2-an505 -nographic -monitor none -serial "file:$UART" -kernel "$ELF" \
    2>"$ARM_BUILD_DIR/qemu.log" &
  qemu=$!
  for _ in $(seq 600); do
    grep -q "^keel: " "$UART" 2>/dev/null && break
    kill -0 "$qemu" 2>/dev/null || break
    sleep 0.1
  done
  kill "$qemu" 2>/dev/null || true
  wait "$qemu" 2>/dev/null || true
  cat "$UART"
  # The same model, prompt and greedy decoding on the host, ref backend, one thread.
  want="Once upon a time$("$KEEL" run -m "$ARM_BUILD_DIR/generated/stories260k.keel" -p "Once upon a time" -n 24 \
    --temp 0 --backend ref -t 1 --kv-budget 256 --chunk 16 2>/dev/null)"
  got=$(grep -v "^keel: " "$UART" || true)
  if ! grep -q "^keel: done" "$UART" || [ "$got" != "$want" ]; then
    echo "freestanding: the firmware printed '$got'; expected '$want' and 'keel: done'" \
      "(qemu's messages: $ARM_BUILD_DIR/qemu.log)" >&2
    status=1
  else
    echo "-- firmware output equals the host's"
  fi
else
  echo "freestanding: qemu-system-arm not found, so the firmware cannot run; scripts/setup.sh installs it" >&2
  status=1
fi

if [ $status -ne 0 ]; then
  echo "freestanding: FAILED" >&2
  exit 1
fi
echo "freestanding: ok"
