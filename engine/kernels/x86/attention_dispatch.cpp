#include "kernels/attention.h"

namespace keel {

const AttentionKernels* attention_kernels_x86_avx2_table();
const AttentionKernels* attention_kernels_x86_avx512_table();
bool cpu_has_avx2();        // kernels/x86/dispatch.cpp
bool cpu_has_avx512vnni();  // kernels/x86/dispatch.cpp

const AttentionKernels* attention_kernels_x86_avx2() {
  return cpu_has_avx2() ? attention_kernels_x86_avx2_table() : nullptr;
}

const AttentionKernels* attention_kernels_x86_avx512() {
  return cpu_has_avx512vnni() ? attention_kernels_x86_avx512_table() : nullptr;
}

const AttentionKernels* attention_kernels_x86() {
  if (const AttentionKernels* k = attention_kernels_x86_avx512()) return k;
  return attention_kernels_x86_avx2();
}

}  // namespace keel
