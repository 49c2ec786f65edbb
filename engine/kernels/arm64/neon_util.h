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

// What a tier's panel kernel needs of one panel of a Q8, Q4 or Q4M matrix.
struct QuantPanel {
  fb::DType dtype;
  const uint8_t* scales;  // [nb][16] f16
  const uint8_t* mins;    // Q4M: [nb][16] f16
  const uint8_t* quants;  // [nb][512 or 256]
  uint32_t nb;
  uint32_t n_rows;
};

inline QuantPanel quant_panel_at(const WeightView& w, uint32_t p) {
  const uint32_t nb = act_blocks(w.cols);
  const uint8_t* panel = w.data + uint64_t(p) * panel_bytes(w.dtype, w.cols);
  const uint32_t r0 = p * kPanelRows;
  return QuantPanel{w.dtype,
                    panel,
                    panel + uint64_t(nb) * kPanelRows * 2,
                    panel + panel_quants_offset(w.dtype, w.cols),
                    nb,
                    w.rows - r0 < kPanelRows ? w.rows - r0 : kPanelRows};
}

// Shared by the tiers (defined in quantize_neon.cpp and matmul_float_neon.cpp: nothing in
// them gains from dotprod or i8mm).
void quantize_act_neon(const float* x, uint32_t cols, ActBlock* out);
void matmul_f_neon(const WeightView& w, const float* x, uint32_t n_tokens, uint32_t x_stride, float* y,
                   uint32_t y_stride, uint32_t panel_begin, uint32_t panel_end);

// The dotprod tier's quantized matmul, and its kernel for one panel and 1..kDotprodTileTokens
// tokens (matmul_dotprod.cpp); the i8mm tier uses them for single tokens. Call only when
// cpu_has_dotprod().
constexpr uint32_t kDotprodTileTokens = 4;
void matmul_dotprod(const WeightView& w, const ActBlock* x, uint32_t n_tokens, float* y, uint32_t y_stride,
                    uint32_t panel_begin, uint32_t panel_end);
void dotprod_panel(const QuantPanel& qp, const ActBlock* x, uint32_t n_tokens, float* y, uint32_t y_stride);

}  // namespace keel::arm64
