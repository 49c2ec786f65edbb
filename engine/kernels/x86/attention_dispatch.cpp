#include "kernels/attention.h"

namespace keel {

const AttentionKernels* attention_kernels_x86_avx2_table();

const AttentionKernels* attention_kernels_x86() {
  static const bool ok = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                         __builtin_cpu_supports("f16c");
  return ok ? attention_kernels_x86_avx2_table() : nullptr;
}

}  // namespace keel
