// Armv8.0 NEON kernels (Cortex-A53, A72: no SDOT). Products are widened by SMULL/SMLAL into
// int16 and pairwise-added into int32 by SADALP; the int16 stage bounds how many products may
// meet in one lane:
//  - Q8: s = u ^ 0x80 is q as int8 (|s| <= 128), so |s * a| <= 128 * 127 = 16256 and two of them
//    (one SMULL, one SMLAL) reach 32512 < 32767; then SADALP. No zero-point correction.
//  - Q4: nibbles 0..15, |u * a| <= 1905: the 8 products of a row's 4-byte slot in one block (4
//    groups x low/high nibble) sum to at most 15240 in int16 before one SADDLP; the zero point
//    is applied in int32 (-8 * sum_a).
// After the pairwise steps a row quad's two accumulators hold [r0 r0 r1 r1] and [r2 r2 r3 r3]
// partial sums; ADDP makes them [r0 r1 r2 r3]. The quad and group loops are unrolled so that
// lanes and offsets are constants and the f32 accumulators stay in registers at -O2.
#include "kernels/arm64/arm64_tables.h"
#include "kernels/arm64/neon_util.h"
#include "kernels/kquant_kernels.h"

namespace keel::arm64 {

namespace {

// The 4 activation bytes of lane `lane` repeated in each 32-bit lane.
inline int8x16_t act_dup(int8x16_t a, int lane) {
  const int32x4_t v = vreinterpretq_s32_s8(a);
  switch (lane) {
    case 0: return vreinterpretq_s8_s32(vdupq_laneq_s32(v, 0));
    case 1: return vreinterpretq_s8_s32(vdupq_laneq_s32(v, 1));
    case 2: return vreinterpretq_s8_s32(vdupq_laneq_s32(v, 2));
    default: return vreinterpretq_s8_s32(vdupq_laneq_s32(v, 3));
  }
}

// One panel against T tokens (token t's blocks at x + t * nb, outputs at y + t * y_stride).
template <int T>
void q8_panel(const PanelView& qp, const ActBlock* x, float* y, uint32_t y_stride) {
  const int8x16_t bias = vdupq_n_s8(int8_t(0x80));
  float32x4_t accf[T][4];
  for (int t = 0; t < T; ++t)
    for (int k = 0; k < 4; ++k) accf[t][k] = vdupq_n_f32(0.0f);
  for (uint32_t b = 0; b < qp.nb; ++b) {
    const uint8_t* qb = qp.quants + uint64_t(b) * 512;
    int8x16_t a[T][2];
    for (int t = 0; t < T; ++t) {
      a[t][0] = vld1q_s8(x[uint64_t(t) * qp.nb + b].q);
      a[t][1] = vld1q_s8(x[uint64_t(t) * qp.nb + b].q + 16);
    }
#pragma GCC unroll 8
    for (int k = 0; k < 4; ++k) {
      int32x4_t lo[T], hi[T];
      for (int t = 0; t < T; ++t) lo[t] = hi[t] = vdupq_n_s32(0);
#pragma GCC unroll 8
      for (int g = 0; g < 8; g += 2) {
        const int8x16_t w0 = veorq_s8(load_s8x16(qb + g * 64 + k * 16), bias);
        const int8x16_t w1 = veorq_s8(load_s8x16(qb + (g + 1) * 64 + k * 16), bias);
        for (int t = 0; t < T; ++t) {
          const int8x16_t a0 = act_dup(a[t][g / 4], g % 4);
          const int8x16_t a1 = act_dup(a[t][g / 4], g % 4 + 1);
          int16x8_t p_lo = vmull_s8(vget_low_s8(w0), vget_low_s8(a0));
          p_lo = vmlal_s8(p_lo, vget_low_s8(w1), vget_low_s8(a1));
          int16x8_t p_hi = vmull_high_s8(w0, a0);
          p_hi = vmlal_high_s8(p_hi, w1, a1);
          lo[t] = vpadalq_s16(lo[t], p_lo);
          hi[t] = vpadalq_s16(hi[t], p_hi);
        }
      }
      const float32x4_t dw = load_f16x4(qp.header + b * 32 + k * 8);
      for (int t = 0; t < T; ++t)
        accf[t][k] = block_step(accf[t][k], dw, x[uint64_t(t) * qp.nb + b].d, vpaddq_s32(lo[t], hi[t]));
    }
  }
  for (int t = 0; t < T; ++t) store_panel_rows(y + uint64_t(t) * y_stride, accf[t], qp.n_rows);
}

// Q4 (kMin = false: value d * (u - 8)) or Q4M (kMin = true: value d * u + m).
template <int T, bool kMin>
void q4_panel(const PanelView& qp, const ActBlock* x, float* y, uint32_t y_stride) {
  const uint8x16_t low4 = vdupq_n_u8(0x0f);
  float32x4_t accf[T][4];
  for (int t = 0; t < T; ++t)
    for (int k = 0; k < 4; ++k) accf[t][k] = vdupq_n_f32(0.0f);
  for (uint32_t b = 0; b < qp.nb; ++b) {
    const uint8_t* qb = qp.quants + uint64_t(b) * 256;
    int8x16_t a[T][2];
    for (int t = 0; t < T; ++t) {
      a[t][0] = vld1q_s8(x[uint64_t(t) * qp.nb + b].q);
      a[t][1] = vld1q_s8(x[uint64_t(t) * qp.nb + b].q + 16);
    }
#pragma GCC unroll 8
    for (int k = 0; k < 4; ++k) {
      int16x8_t p_lo[T], p_hi[T];  // |.| <= 15240
      for (int t = 0; t < T; ++t) p_lo[t] = p_hi[t] = vdupq_n_s16(0);
#pragma GCC unroll 8
      for (int c = 0; c < 4; ++c) {
        const uint8x16_t wb = vld1q_u8(qb + c * 64 + k * 16);
        const int8x16_t wl = vreinterpretq_s8_u8(vandq_u8(wb, low4));
        const int8x16_t wh = vreinterpretq_s8_u8(vshrq_n_u8(wb, 4));
        for (int t = 0; t < T; ++t) {
          // columns 8c + j meet the low nibbles, 8c + 4 + j the high ones
          const int8x16_t al = act_dup(a[t][c / 2], 2 * (c % 2));
          const int8x16_t ah = act_dup(a[t][c / 2], 2 * (c % 2) + 1);
          p_lo[t] = vmlal_s8(p_lo[t], vget_low_s8(wl), vget_low_s8(al));
          p_lo[t] = vmlal_s8(p_lo[t], vget_low_s8(wh), vget_low_s8(ah));
          p_hi[t] = vmlal_high_s8(p_hi[t], wl, al);
          p_hi[t] = vmlal_high_s8(p_hi[t], wh, ah);
        }
      }
      const float32x4_t dw = load_f16x4(qp.header + b * 32 + k * 8);
      for (int t = 0; t < T; ++t) {
        const ActBlock& ab = x[uint64_t(t) * qp.nb + b];
        int32x4_t isum = vpaddq_s32(vpaddlq_s16(p_lo[t]), vpaddlq_s16(p_hi[t]));
        if constexpr (!kMin) isum = vaddq_s32(isum, vdupq_n_s32(-8 * ab.sum));
        accf[t][k] = block_step(accf[t][k], dw, ab.d, isum);
        if constexpr (kMin) accf[t][k] = min_step(accf[t][k], load_f16x4(qp.mins() + b * 32 + k * 8), ab.d, ab.sum);
      }
    }
  }
  for (int t = 0; t < T; ++t) store_panel_rows(y + uint64_t(t) * y_stride, accf[t], qp.n_rows);
}

// Q8, Q4 and Q4M under the shared panel walk (kernels/matmul_driver.h): two tokens per pass, as
// the int16 accumulators of more would not fit the registers.
struct NeonQuant {
  static constexpr bool handles(fb::DType dt) {
    return dt == fb::DType::Q8 || dt == fb::DType::Q4 || dt == fb::DType::Q4M;
  }
  static constexpr int tile(fb::DType) { return 2; }
  template <fb::DType DT, int T>
  static void panel(const PanelView& pv, const ActBlock* x, float* y, uint32_t y_stride) {
    if constexpr (DT == fb::DType::Q8) {
      q8_panel<T>(pv, x, y, y_stride);
    } else {
      q4_panel<T, DT == fb::DType::Q4M>(pv, x, y, y_stride);
    }
  }
};

void matmul_neon(const WeightView& w, const ActBlock* x, uint32_t n_tokens, float* y, uint32_t y_stride,
                 uint32_t panel_begin, uint32_t panel_end) {
  if (is_wide_quant(w.dtype)) return matmul_wide_neon(w, x, n_tokens, y, y_stride, panel_begin, panel_end);
  matmul_panels<NeonQuant>(w, x, n_tokens, y, y_stride, panel_begin, panel_end);
}

constexpr MatmulKernels kNeon = {"neon", quantize_act_neon, matmul_neon, matmul_f_neon};

}  // namespace

const MatmulKernels& matmul_neon_table() { return kNeon; }

}  // namespace keel::arm64
