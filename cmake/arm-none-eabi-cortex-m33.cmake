# Cross-compiles for an Arm Cortex-M33 with the single-precision FPU (e.g. STM32U5, nRF5340,
# RP2350) using Debian's gcc-arm-none-eabi and newlib:
#   cmake -S . -B build-arm -DCMAKE_TOOLCHAIN_FILE=cmake/arm-none-eabi-cortex-m33.cmake -DKEEL_FREESTANDING=ON
set(CMAKE_SYSTEM_NAME Generic)
set(CMAKE_SYSTEM_PROCESSOR cortex-m33)

set(CMAKE_C_COMPILER arm-none-eabi-gcc)
set(CMAKE_CXX_COMPILER arm-none-eabi-g++)
set(CMAKE_ASM_COMPILER arm-none-eabi-gcc)
set(CMAKE_AR arm-none-eabi-ar CACHE FILEPATH "")
set(CMAKE_RANLIB arm-none-eabi-ranlib CACHE FILEPATH "")
set(CMAKE_OBJCOPY arm-none-eabi-objcopy CACHE FILEPATH "")
set(CMAKE_SIZE arm-none-eabi-size CACHE FILEPATH "")
set(CMAKE_NM arm-none-eabi-nm CACHE FILEPATH "")

# The compiler checks link an executable; without a linker script and startup code that only
# works as a static library.
set(CMAKE_TRY_COMPILE_TARGET_TYPE STATIC_LIBRARY)

# -ffreestanding implies -fno-builtin, which would turn every memcpy used as a bit cast (f16
# conversions, unaligned loads in the kernels) into a call; -fbuiltin gives the compiler back
# the standard meaning of those functions, which newlib implements.
# -fno-math-errno lets sqrtf become VSQRT.F32 instead of a libm call that sets errno.
# -fno-threadsafe-statics: single-threaded firmware, so function-local statics need no
# __cxa_guard_* (which would pull in the C++ runtime).
set(_keel_m33_flags
    "-mcpu=cortex-m33 -mthumb -mfloat-abi=hard -mfpu=fpv5-sp-d16 -ffreestanding -fbuiltin -fno-math-errno \
-ffunction-sections -fdata-sections")
set(CMAKE_C_FLAGS_INIT "${_keel_m33_flags}")
set(CMAKE_CXX_FLAGS_INIT "${_keel_m33_flags} -fno-exceptions -fno-rtti -fno-threadsafe-statics")
set(CMAKE_ASM_FLAGS_INIT "-mcpu=cortex-m33 -mthumb")
set(CMAKE_EXE_LINKER_FLAGS_INIT "-Wl,--gc-sections")

# Search the cross sysroot for headers and libraries, the host for programs (flatc).
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
