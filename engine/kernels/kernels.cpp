#include "kernels/kernels.h"

namespace keel {

#if !defined(KEEL_HAVE_X86)
const MatmulKernels* kernels_x86() { return nullptr; }
const VectorKernels* vector_kernels_x86() { return nullptr; }
const MatmulKernels* kernels_x86_avx2() { return nullptr; }
const MatmulKernels* kernels_x86_avx512() { return nullptr; }
#endif

#if !defined(KEEL_HAVE_ARM64)
const MatmulKernels* kernels_arm64() { return nullptr; }
const MatmulKernels* kernels_arm64_neon() { return nullptr; }
const MatmulKernels* kernels_arm64_dotprod() { return nullptr; }
const MatmulKernels* kernels_arm64_i8mm() { return nullptr; }
const VectorKernels* vector_kernels_arm64() { return nullptr; }
#endif

const MatmulKernels* kernels_native() {
  const MatmulKernels* k = kernels_x86();
  return k != nullptr ? k : kernels_arm64();
}

const VectorKernels* vector_kernels_native() {
  const VectorKernels* k = vector_kernels_x86();
  return k != nullptr ? k : vector_kernels_arm64();
}

const MatmulKernels& kernels_best() {
  const MatmulKernels* k = kernels_native();
  return k != nullptr ? *k : kernels_ref();
}

const VectorKernels& vector_kernels_best() {
  const VectorKernels* k = vector_kernels_native();
  return k != nullptr ? *k : vector_kernels_ref();
}

}  // namespace keel
