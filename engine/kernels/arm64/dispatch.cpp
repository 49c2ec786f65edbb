// Run-time choice of the arm64 tier. Compiled for the Armv8.0 baseline: nothing here executes
// an instruction the CPU may lack. On Linux the kernel reports the CPU's features in the
// auxiliary vector (user space cannot read the ID registers portably); on bare metal
// (KEEL_FREESTANDING, even with a Linux-targeting compiler) the build decides: the tiers
// enabled are those the compiler targets (-march / -mcpu).
#include "kernels/arm64/arm64_tables.h"

#if defined(__linux__) && !defined(KEEL_FREESTANDING)
#include <sys/auxv.h>
#endif

namespace keel {
namespace arm64 {

#if defined(__linux__) && !defined(KEEL_FREESTANDING)
// Bits of AT_HWCAP / AT_HWCAP2 (Linux arch/arm64/include/uapi/asm/hwcap.h), spelled here so
// that an older libc's headers still build.
constexpr unsigned long kHwcapAsimdHp = 1ul << 10;
constexpr unsigned long kHwcapAsimdDp = 1ul << 20;
constexpr unsigned long kHwcap2I8mm = 1ul << 13;

bool cpu_has_dotprod() {
  const unsigned long hw = getauxval(AT_HWCAP);
  return (hw & kHwcapAsimdDp) != 0 && (hw & kHwcapAsimdHp) != 0;
}

bool cpu_has_i8mm() { return cpu_has_dotprod() && (getauxval(AT_HWCAP2) & kHwcap2I8mm) != 0; }
#else
bool cpu_has_dotprod() {
#if defined(__ARM_FEATURE_DOTPROD) && defined(__ARM_FEATURE_FP16_VECTOR_ARITHMETIC)
  return true;
#else
  return false;
#endif
}

bool cpu_has_i8mm() {
#if defined(__ARM_FEATURE_MATMUL_INT8)
  return cpu_has_dotprod();
#else
  return false;
#endif
}
#endif

}  // namespace arm64

const MatmulKernels* kernels_arm64_neon() { return &arm64::matmul_neon_table(); }
const MatmulKernels* kernels_arm64_dotprod() {
  return arm64::cpu_has_dotprod() ? &arm64::matmul_dotprod_table() : nullptr;
}
const MatmulKernels* kernels_arm64_i8mm() { return arm64::cpu_has_i8mm() ? &arm64::matmul_i8mm_table() : nullptr; }

const MatmulKernels* kernels_arm64() {
  if (const MatmulKernels* k = kernels_arm64_i8mm()) return k;
  if (const MatmulKernels* k = kernels_arm64_dotprod()) return k;
  return kernels_arm64_neon();
}

const VectorKernels* vector_kernels_arm64() { return &arm64::vector_neon_table(); }

const AttentionKernels* attention_kernels_arm64_neon() { return &arm64::attention_neon_table(); }
const AttentionKernels* attention_kernels_arm64_dotprod() {
  return arm64::cpu_has_dotprod() ? &arm64::attention_dotprod_table() : nullptr;
}
const AttentionKernels* attention_kernels_arm64() {
  if (const AttentionKernels* k = attention_kernels_arm64_dotprod()) return k;
  return attention_kernels_arm64_neon();
}

}  // namespace keel
