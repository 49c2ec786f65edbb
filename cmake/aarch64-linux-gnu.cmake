# Cross-compiles Keel for 64-bit Arm Linux (Raspberry Pi 4/5, Jetson, Graviton, phones' SoCs)
# with Debian's g++-aarch64-linux-gnu; the libraries are Debian's arm64 packages, installed
# beside the host's (multiarch) or, for pthreadpool and XNNPACK, unpacked into a sysroot in the
# cache (scripts/setup_arm64.sh installs both). Tests run
# under qemu-aarch64 through CMAKE_CROSSCOMPILING_EMULATOR; KEEL_QEMU_CPU picks the CPU model
# (cortex-a72: NEON only; cortex-a76: + dotprod, fp16; max: + i8mm, SVE):
#   cmake -S . -B build-arm64 -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake -DKEEL_QEMU_CPU=cortex-a76
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)

set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)

# The baseline every 64-bit Arm CPU has (Armv8.0-A with NEON); faster instructions are chosen
# at run time from the CPU's feature bits (engine/kernels/arm64/dispatch.cpp).
set(CMAKE_C_FLAGS_INIT "-march=armv8-a")
set(CMAKE_CXX_FLAGS_INIT "-march=armv8-a")

# Headers and libraries of the target: the unpacked sysroot, the cross toolchain's own tree and
# Debian's multiarch directories; programs (flatc, python) from the host.
if(DEFINED ENV{KEEL_ARM64_SYSROOT})
  set(KEEL_ARM64_SYSROOT "$ENV{KEEL_ARM64_SYSROOT}")
elseif(DEFINED ENV{KEEL_CACHE_DIR})
  set(KEEL_ARM64_SYSROOT "$ENV{KEEL_CACHE_DIR}/arm64-sysroot")
else()
  set(KEEL_ARM64_SYSROOT "$ENV{HOME}/.cache/keel/arm64-sysroot")
endif()
set(CMAKE_FIND_ROOT_PATH ${KEEL_ARM64_SYSROOT} /usr/aarch64-linux-gnu /)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
# pkg-config (cpp-httplib) reads the arm64 .pc files, never the host's.
set(ENV{PKG_CONFIG_LIBDIR} /usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig)
set(ENV{PKG_CONFIG_PATH} "")

set(KEEL_QEMU_CPU "cortex-a76" CACHE STRING "The CPU model qemu-aarch64 emulates for the tests")
# The programs run on Debian's arm64 C library (libc6:arm64, multiarch: its loader is
# /lib/ld-linux-aarch64.so.1), not on the cross toolchain's copy in /usr/aarch64-linux-gnu:
# under qemu-aarch64 7.2 that older build's pthread_create never returns. The build tree's
# binaries find the unpacked sysroot's libraries by their RPATH (installed binaries on a board
# use the system's).
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64;-cpu;${KEEL_QEMU_CPU})
# DT_RPATH, not DT_RUNPATH: XNNPACK's own dependency (pthreadpool) is found through it too.
set(CMAKE_BUILD_RPATH ${KEEL_ARM64_SYSROOT}/usr/lib/aarch64-linux-gnu)
set(CMAKE_EXE_LINKER_FLAGS_INIT "-Wl,--disable-new-dtags")
