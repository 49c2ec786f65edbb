// Tables defined by the ISA-specific translation units; only the dispatcher picks one, after
// checking the CPU, so no code compiled for a wider ISA runs on a CPU without it.
#pragma once

#include "kernels/kernels.h"

namespace keel::x86 {

const MatmulKernels& matmul_avx2_table();
const MatmulKernels& matmul_avx512_table();
const VectorKernels& vector_avx2_table();

}  // namespace keel::x86
