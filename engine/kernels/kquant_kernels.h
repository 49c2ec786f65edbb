// Matmul kernels of the formats kept from GGUF's 5-bit and K-quant types (Q5, Q5M, Q4K, Q5K,
// Q6K): the `matmul` entries of each MatmulKernels table hand these dtypes over to them, with
// the same contract (kernels.h).
#pragma once

#include <cstdint>

#include "kernels/kernels.h"

namespace keel {

// Formats with a high-bit plane or superblock scales (docs/format.md).
constexpr bool is_wide_quant(fb::DType t) { return high_bits(t) != 0 || is_kquant(t); }

void matmul_wide_ref(const WeightView& w, const ActBlock* x, uint32_t n_tokens, float* y, uint32_t y_stride,
                     uint32_t panel_begin, uint32_t panel_end);

namespace x86 {
// AVX2 + FMA.
void matmul_wide_avx2(const WeightView& w, const ActBlock* x, uint32_t n_tokens, float* y, uint32_t y_stride,
                      uint32_t panel_begin, uint32_t panel_end);
// AVX-512 VNNI; bit-identical results to the AVX2 kernel, token by token.
void matmul_wide_avx512(const WeightView& w, const ActBlock* x, uint32_t n_tokens, float* y, uint32_t y_stride,
                        uint32_t panel_begin, uint32_t panel_end);
}  // namespace x86

namespace arm64 {
// Armv8.0 NEON.
void matmul_wide_neon(const WeightView& w, const ActBlock* x, uint32_t n_tokens, float* y, uint32_t y_stride,
                      uint32_t panel_begin, uint32_t panel_end);
// + SDOT (Armv8.2 dotprod).
void matmul_wide_dotprod(const WeightView& w, const ActBlock* x, uint32_t n_tokens, float* y, uint32_t y_stride,
                         uint32_t panel_begin, uint32_t panel_end);
}  // namespace arm64

}  // namespace keel
