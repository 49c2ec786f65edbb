// Armv8.6 i8mm kernels (Cortex-A710, Neoverse-V1): SMMLA (vmmlaq_s32) multiplies a 2x8 int8
// block by the transpose of another 2x8 and adds the 2x2 int32 result, here 2 weight rows x 2
// tokens over 8 columns: twice the multiply-adds of an SDOT per instruction.
//
// The panel stores 4 bytes per row per group, SMMLA wants 8 consecutive columns per row. Two
// row-quad registers of columns [c, c + 4) and [c + 4, c + 8), interleaved by 32-bit ZIP1 / ZIP2,
// are rows 0-1 and rows 2-3 with 8 columns each, in registers, without repacking memory:
//  - Q8: groups 2p and 2p + 1 (columns 8p..8p+7), XOR 0x80 as in the dotprod kernel.
//  - Q4 / Q4M: the low and high nibbles of group c (columns 8c..8c+3 and 8c+4..8c+7).
// The two tokens' 8 activation bytes of the same columns are one 64-bit ZIP of their blocks.
// The 2x2 results [r0t0 r0t1 r1t0 r1t1], [r2t0 r2t1 r3t0 r3t1] unzip into each token's row quad,
// whose int32 sums equal the dotprod kernel's exactly; the f32 steps are the same, so every
// token gets the bits it gets alone (single tokens run the dotprod kernel). The quad and octet
// loops are unrolled so that offsets are constants and the accumulators stay in registers.
#include "kernels/arm64/arm64_tables.h"
#include "kernels/arm64/neon_util.h"
#include "kernels/kquant_kernels.h"

namespace keel::arm64 {

namespace {

// Activations of token pair P for column octet o (0..3): [t0 q[8o..8o+7], t1 q[8o..8o+7]].
inline int8x16_t pair_octet(const int8_t* q0, const int8_t* q1, int o) {
  const int64x2_t a = vreinterpretq_s64_s8(vld1q_s8(q0 + 16 * (o / 2)));
  const int64x2_t b = vreinterpretq_s64_s8(vld1q_s8(q1 + 16 * (o / 2)));
  return vreinterpretq_s8_s64(o % 2 == 0 ? vzip1q_s64(a, b) : vzip2q_s64(a, b));
}

// Rows 0-1 and 2-3 of a quad with 8 columns each: `first` holds columns [c, c + 4), `second`
// [c + 4, c + 8).
inline void rows_of_octet(int8x16_t first, int8x16_t second, int8x16_t& r01, int8x16_t& r23) {
  const int32x4_t f = vreinterpretq_s32_s8(first), s = vreinterpretq_s32_s8(second);
  r01 = vreinterpretq_s8_s32(vzip1q_s32(f, s));
  r23 = vreinterpretq_s8_s32(vzip2q_s32(f, s));
}

// One panel against P token pairs (2P tokens).
template <int P, fb::DType DT>
void mmla_panel(const PanelView& qp, const ActBlock* x, float* y, uint32_t y_stride) {
  constexpr int T = 2 * P;
  constexpr bool kQ8 = DT == fb::DType::Q8;
  const int8x16_t bias = vdupq_n_s8(int8_t(0x80));
  const uint8x16_t low4 = vdupq_n_u8(0x0f);
  float32x4_t accf[T][4];
  for (int t = 0; t < T; ++t)
    for (int k = 0; k < 4; ++k) accf[t][k] = vdupq_n_f32(0.0f);
  for (uint32_t b = 0; b < qp.nb; ++b) {
    const uint8_t* qb = qp.quants + uint64_t(b) * (kQ8 ? 512 : 256);
    int8x16_t a[P][4];
    for (int p = 0; p < P; ++p)
      for (int o = 0; o < 4; ++o)
        a[p][o] = pair_octet(x[uint64_t(2 * p) * qp.nb + b].q, x[uint64_t(2 * p + 1) * qp.nb + b].q, o);
#pragma GCC unroll 8
    for (int k = 0; k < 4; ++k) {
      int32x4_t acc01[P], acc23[P];
      for (int p = 0; p < P; ++p) {
        if constexpr (DT == fb::DType::Q4) {
          // start at -8 * sum_a of each token, laid out as the 2x2 result [r t0, r t1, r' t0, r' t1]
          const int32_t z0 = -8 * x[uint64_t(2 * p) * qp.nb + b].sum, z1 = -8 * x[uint64_t(2 * p + 1) * qp.nb + b].sum;
          const int32x4_t z = vcombine_s32(vset_lane_s32(z1, vdup_n_s32(z0), 1), vset_lane_s32(z1, vdup_n_s32(z0), 1));
          acc01[p] = acc23[p] = z;
        } else {
          acc01[p] = acc23[p] = vdupq_n_s32(0);
        }
      }
#pragma GCC unroll 8
      for (int o = 0; o < 4; ++o) {
        int8x16_t r01, r23;
        if constexpr (kQ8) {
          const int8x16_t w0 = veorq_s8(load_s8x16(qb + (2 * o) * 64 + k * 16), bias);
          const int8x16_t w1 = veorq_s8(load_s8x16(qb + (2 * o + 1) * 64 + k * 16), bias);
          rows_of_octet(w0, w1, r01, r23);
        } else {
          const uint8x16_t wb = vld1q_u8(qb + o * 64 + k * 16);
          rows_of_octet(vreinterpretq_s8_u8(vandq_u8(wb, low4)), vreinterpretq_s8_u8(vshrq_n_u8(wb, 4)), r01, r23);
        }
        for (int p = 0; p < P; ++p) {
          acc01[p] = vmmlaq_s32(acc01[p], r01, a[p][o]);
          acc23[p] = vmmlaq_s32(acc23[p], r23, a[p][o]);
        }
      }
      const float32x4_t dw = load_f16x4(qp.header + b * 32 + k * 8);
      for (int p = 0; p < P; ++p) {
        const int32x4_t isum[2] = {vuzp1q_s32(acc01[p], acc23[p]), vuzp2q_s32(acc01[p], acc23[p])};
        for (int i = 0; i < 2; ++i) {
          const int t = 2 * p + i;
          const ActBlock& ab = x[uint64_t(t) * qp.nb + b];
          accf[t][k] = block_step(accf[t][k], dw, ab.d, isum[i]);
          if constexpr (DT == fb::DType::Q4M)
            accf[t][k] = min_step(accf[t][k], load_f16x4(qp.mins() + b * 32 + k * 8), ab.d, ab.sum);
        }
      }
    }
  }
  for (int t = 0; t < T; ++t) store_panel_rows(y + uint64_t(t) * y_stride, accf[t], qp.n_rows);
}

// Q8, Q4 and Q4M under the shared panel walk (kernels/matmul_driver.h): up to two token pairs
// per pass, an odd last token through the dotprod kernel.
struct I8mmQuant {
  static constexpr bool handles(fb::DType dt) {
    return dt == fb::DType::Q8 || dt == fb::DType::Q4 || dt == fb::DType::Q4M;
  }
  static constexpr int tile(fb::DType) { return 4; }
  template <fb::DType DT, int T>
  static void panel(const PanelView& pv, const ActBlock* x, float* y, uint32_t y_stride) {
    if constexpr (T >= 2) mmla_panel<T / 2, DT>(pv, x, y, y_stride);
    if constexpr (T % 2 == 1) dotprod_panel1(DT, pv, x + uint64_t(T - 1) * pv.nb, y + uint64_t(T - 1) * y_stride);
  }
};

void matmul_i8mm(const WeightView& w, const ActBlock* x, uint32_t n_tokens, float* y, uint32_t y_stride,
                 uint32_t panel_begin, uint32_t panel_end) {
  if (n_tokens == 1 || is_wide_quant(w.dtype))
    return matmul_dotprod(w, x, n_tokens, y, y_stride, panel_begin, panel_end);
  matmul_panels<I8mmQuant>(w, x, n_tokens, y, y_stride, panel_begin, panel_end);
}

constexpr MatmulKernels kI8mm = {"neon-i8mm", quantize_act_neon, matmul_i8mm, matmul_f_neon};

}  // namespace

const MatmulKernels& matmul_i8mm_table() { return kI8mm; }

}  // namespace keel::arm64
