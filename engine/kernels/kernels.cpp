#include "kernels/kernels.h"

namespace keel {

#if !defined(KEEL_HAVE_X86)
const MatmulKernels* kernels_x86() { return nullptr; }
const VectorKernels* vector_kernels_x86() { return nullptr; }
const MatmulKernels* kernels_x86_avx2() { return nullptr; }
const MatmulKernels* kernels_x86_avx512() { return nullptr; }
#endif

const MatmulKernels& kernels_best() {
  const MatmulKernels* k = kernels_x86();
  return k != nullptr ? *k : kernels_ref();
}

const VectorKernels& vector_kernels_best() {
  const VectorKernels* k = vector_kernels_x86();
  return k != nullptr ? *k : vector_kernels_ref();
}

}  // namespace keel
