// Run-time choice of the x86 kernels by CPU feature. Compiled without ISA flags: nothing here
// executes an instruction the CPU may lack. __builtin_cpu_supports also checks that the OS
// saves the wider register state (XCR0), so a feature reported here is usable.
#include <cpuid.h>

#include "kernels/kernels.h"
#include "kernels/x86/x86_tables.h"

namespace keel {

// F16C: CPUID leaf 1, ECX bit 29 (clang's __builtin_cpu_supports does not know "f16c"). Every
// CPU with AVX2 has it in practice, but a hypervisor may hide it. The OS-state check comes
// with the AVX2 test.
static bool cpu_has_f16c() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29)) != 0;
}

bool cpu_has_avx2() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpu_has_f16c();
}

bool cpu_has_avx512vnni() {
  __builtin_cpu_init();
  return cpu_has_avx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
         __builtin_cpu_supports("avx512vnni");
}

const MatmulKernels* kernels_x86_avx2() { return cpu_has_avx2() ? &x86::matmul_avx2_table() : nullptr; }

const MatmulKernels* kernels_x86_avx512() { return cpu_has_avx512vnni() ? &x86::matmul_avx512_table() : nullptr; }

const MatmulKernels* kernels_x86() {
  if (const MatmulKernels* k = kernels_x86_avx512()) return k;
  return kernels_x86_avx2();
}

const VectorKernels* vector_kernels_x86() { return cpu_has_avx2() ? &x86::vector_avx2_table() : nullptr; }

}  // namespace keel
