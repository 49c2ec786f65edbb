#include "kernels/attention.h"

namespace keel {

#ifndef KEEL_HAVE_X86
const AttentionKernels* attention_kernels_x86() { return nullptr; }
const AttentionKernels* attention_kernels_x86_avx2() { return nullptr; }
const AttentionKernels* attention_kernels_x86_avx512() { return nullptr; }
#endif

}  // namespace keel
