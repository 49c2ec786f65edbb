// Helpers and cross-tier entry points of the arm64 matmul kernels. Everything inline here uses
// Armv8.0 Advanced SIMD only, so every tier's translation unit may include it.
//
// The panel layout maps onto 128-bit registers: one 16-byte load of a group (docs/format.md,
// byte [g][r][j]) at offset 16 k holds rows 4k..4k+3 of the panel, 4 bytes each; a panel is
// four such "row quads". An activation block (32 int8) is two registers; the 4 bytes that meet
// group g are 32-bit lane g % 4 of register g / 4.
//
// Every tier accumulates a row quad's block in int32 (exact), then applies the same f32 steps
//   acc = fma(d_w * d_a, float(isum), acc)            (Q4M: then acc = fma(m_w * d_a, float(sum_a), acc))
// in block order, so a token's outputs are bit-identical across the tiers and whatever tokens
// are computed beside it.
#pragma once

#include <arm_neon.h>

#include <cstdint>

#include "kernels/kernels.h"
#include "kernels/matmul_driver.h"

namespace keel::arm64 {

// Four f16 scales (rows of one quad) as f32. FCVTL is Armv8.0.
inline float32x4_t load_f16x4(const uint8_t* p) {
  return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(reinterpret_cast<const uint16_t*>(p))));
}

inline int8x16_t load_s8x16(const uint8_t* p) { return vld1q_s8(reinterpret_cast<const int8_t*>(p)); }

// The f32 step of one block for one row quad (see the header comment).
inline float32x4_t block_step(float32x4_t acc, float32x4_t dw, float da, int32x4_t isum) {
  return vfmaq_f32(acc, vmulq_n_f32(dw, da), vcvtq_f32_s32(isum));
}

inline float32x4_t min_step(float32x4_t acc, float32x4_t mw, float da, int32_t sum_a) {
  return vfmaq_f32(acc, vmulq_n_f32(mw, da), vdupq_n_f32(float(sum_a)));
}

// The 16 rows of one token, of which the first n_rows exist in y.
inline void store_panel_rows(float* y, const float32x4_t acc[4], uint32_t n_rows) {
  if (n_rows == kPanelRows) {
    for (int k = 0; k < 4; ++k) vst1q_f32(y + 4 * k, acc[k]);
    return;
  }
  float tmp[kPanelRows];
  for (int k = 0; k < 4; ++k) vst1q_f32(tmp + 4 * k, acc[k]);
  for (uint32_t r = 0; r < n_rows; ++r) y[r] = tmp[r];
}

// Shared by the tiers (defined in quantize_neon.cpp and matmul_float_neon.cpp: nothing in
// them gains from dotprod or i8mm).
void quantize_act_neon(const float* x, uint32_t cols, ActBlock* out);
void matmul_f_neon(const WeightView& w, const float* x, uint32_t n_tokens, uint32_t x_stride, float* y,
                   uint32_t y_stride, uint32_t panel_begin, uint32_t panel_end);

// The dotprod tier's quantized matmul, and its kernel for one panel of Q8, Q4 or Q4M and one
// token (matmul_dotprod.cpp); the i8mm tier uses them for single tokens. Call only when
// cpu_has_dotprod().
void matmul_dotprod(const WeightView& w, const ActBlock* x, uint32_t n_tokens, float* y, uint32_t y_stride,
                    uint32_t panel_begin, uint32_t panel_end);
void dotprod_panel1(fb::DType dt, const PanelView& pv, const ActBlock* x, float* y);

}  // namespace keel::arm64
