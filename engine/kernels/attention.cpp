#include "kernels/attention.h"

namespace keel {

#ifndef KEEL_HAVE_X86
const AttentionKernels* attention_kernels_x86() { return nullptr; }
const AttentionKernels* attention_kernels_x86_avx2() { return nullptr; }
const AttentionKernels* attention_kernels_x86_avx512() { return nullptr; }
#endif

#ifndef KEEL_HAVE_ARM64
const AttentionKernels* attention_kernels_arm64() { return nullptr; }
const AttentionKernels* attention_kernels_arm64_neon() { return nullptr; }
const AttentionKernels* attention_kernels_arm64_dotprod() { return nullptr; }
#endif

const AttentionKernels* attention_kernels_native() {
  const AttentionKernels* k = attention_kernels_x86();
  return k != nullptr ? k : attention_kernels_arm64();
}

}  // namespace keel
