// Tables defined by the tier-specific translation units (file suffix = tier: _neon.cpp is
// built for Armv8.0, _dotprod.cpp with +dotprod+fp16, _i8mm.cpp with +dotprod+fp16+i8mm). Only
// the dispatcher picks one, after checking the CPU, so no instruction of a wider tier runs on
// a CPU without it.
#pragma once

#include "kernels/attention.h"
#include "kernels/kernels.h"

namespace keel::arm64 {

const MatmulKernels& matmul_neon_table();
const MatmulKernels& matmul_dotprod_table();
const MatmulKernels& matmul_i8mm_table();
const VectorKernels& vector_neon_table();
const AttentionKernels& attention_neon_table();
const AttentionKernels& attention_dotprod_table();

// What the CPU has (engine/kernels/arm64/dispatch.cpp).
bool cpu_has_dotprod();  // SDOT/UDOT and FP16 arithmetic (HWCAP_ASIMDDP, HWCAP_ASIMDHP)
bool cpu_has_i8mm();     // cpu_has_dotprod() and SMMLA/USMMLA (HWCAP2_I8MM)

}  // namespace keel::arm64
