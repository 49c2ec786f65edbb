#include "kernels/attention.h"

namespace keel {

const AttentionKernels* attention_kernels_x86_avx2_table();
bool cpu_has_avx2();  // kernels/x86/dispatch.cpp

const AttentionKernels* attention_kernels_x86() {
  return cpu_has_avx2() ? attention_kernels_x86_avx2_table() : nullptr;
}

}  // namespace keel
