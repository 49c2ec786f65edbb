# Cross-compiles for bare-metal 64-bit Arm (no operating system) with Debian's
# g++-aarch64-linux-gnu used freestanding: Debian packages no aarch64-none-elf newlib, so no C
# library is linked at all; the firmware supplies the few functions the engine calls
# (ports/aarch64-virt/libc.cpp) and links libgcc. The CPU is a Cortex-A76 (Armv8.2-A with
# dotprod and fp16), which QEMU's virt machine emulates and which many SoCs carry:
#   cmake -S ports/aarch64-virt -B build-a64virt -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-none-virt.cmake \
#         -DKEEL_HOST_TOOL=build/tools/keel
set(CMAKE_SYSTEM_NAME Generic)
set(CMAKE_SYSTEM_PROCESSOR aarch64)

set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_ASM_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_AR aarch64-linux-gnu-ar CACHE FILEPATH "")
set(CMAKE_RANLIB aarch64-linux-gnu-ranlib CACHE FILEPATH "")
set(CMAKE_OBJCOPY aarch64-linux-gnu-objcopy CACHE FILEPATH "")
set(CMAKE_SIZE aarch64-linux-gnu-size CACHE FILEPATH "")
set(CMAKE_NM aarch64-linux-gnu-nm CACHE FILEPATH "")

# The compiler checks link an executable; without a linker script and startup code that only
# works as a static library.
set(CMAKE_TRY_COMPILE_TARGET_TYPE STATIC_LIBRARY)

# -mcpu=cortex-a76 defines __ARM_FEATURE_DOTPROD and the fp16 vector feature, so the engine's
# arm64 dispatcher (engine/kernels/arm64/dispatch.cpp, non-Linux branch) selects the dotprod
# tier at compile time.
# -ffreestanding implies -fno-builtin, which would turn every memcpy used as a bit cast into a
# call; -fbuiltin gives the compiler back the standard meaning of those functions.
# -fno-math-errno lets sqrtf become FSQRT instead of a call that sets errno.
# -fno-threadsafe-statics: single-threaded firmware, so function-local statics need no
# __cxa_guard_*. No -mstrict-align: the MMU maps RAM as Normal memory, where unaligned loads
# and stores are allowed (ports/aarch64-virt/startup.cpp); only Device memory forbids them.
# -U__linux__ and its kin: aarch64-linux-gnu-gcc predefines them whatever the flags, and code
# that asks whether it runs on Linux (the arm64 dispatcher reads the CPU's features from the
# kernel there) must see that it does not.
# -mgeneral-regs-only is not set: the engine computes in floating point and SIMD, and the
# startup code enables FP/SIMD (CPACR_EL1.FPEN) before any compiled code runs.
set(_keel_a64_flags "-mcpu=cortex-a76 -ffreestanding -fbuiltin -fno-math-errno -ffunction-sections -fdata-sections \
-fno-pic -fno-stack-protector -U__linux__ -U__linux -Ulinux -U__gnu_linux__ -U__unix__ -U__unix -Uunix")
set(CMAKE_C_FLAGS_INIT "${_keel_a64_flags}")
set(CMAKE_CXX_FLAGS_INIT "${_keel_a64_flags} -fno-exceptions -fno-rtti -fno-threadsafe-statics")
set(CMAKE_ASM_FLAGS_INIT "-mcpu=cortex-a76")
# No start files, no C library, no libstdc++: a reference to malloc, printf or exit fails the
# link instead of reaching glibc, which would assume Linux system calls.
# One loadable segment holds code and data: the MMU maps the image with 2 MiB blocks that are
# both writable and executable anyway (ports/aarch64-virt/startup.cpp), hence no warning.
set(CMAKE_EXE_LINKER_FLAGS_INIT "-nostdlib -static -no-pie -Wl,--gc-sections -Wl,--build-id=none \
-Wl,--no-warn-rwx-segments")

# Nothing of the Linux sysroot's libraries may be found; programs (flatc) come from the host.
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
