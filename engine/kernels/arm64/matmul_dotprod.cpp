// Armv8.2 dotprod kernels (Cortex-A55, A76, Neoverse-N1). The indexed SDOT
// (vdotq_laneq_s32(acc, w, a, lane)) is the panel layout's natural instruction: w is one row
// quad of a group (4 rows x 4 bytes), lane picks the group's 4 activation bytes, and each row's
// int32 lane gains the 4-product sum. Sums of 4 products never saturate (int32 accumulation).
//  - Q8: s = u ^ 0x80 is q as int8, so SDOT gives sum q_w * q_a directly (no zero point).
//  - Q4 / Q4M: nibbles 0..15 are valid int8 as they are; Q4's zero point enters by starting the
//    int32 accumulator at -8 * sum_a, Q4M's min as a second f32 step.
// Per block, row quads are done one after the other: only T int32 accumulators are live, and a
// quad's f32 step follows it. With several tokens (prefill) each weight load feeds up to
// 4 tokens; the block's 512 (256) bytes stay in L1 across the quads. Q8 with one token (decode)
// walks a block group by group instead (q8_panel1).
#include "kernels/arm64/arm64_tables.h"
#include "kernels/arm64/neon_util.h"
#include "kernels/kquant_kernels.h"

namespace keel::arm64 {

namespace {

// With one or two tokens, each row quad's 8 SDOTs form two independent chains of 4 (an in-order
// core such as the Cortex-A55 otherwise waits out each SDOT's latency); with more tokens the
// tokens' chains already interleave and registers are short.
template <int T>
constexpr int kChainsFor = T <= 2 ? 2 : 1;

template <int N>
inline int32x4_t chains_sum(const int32x4_t (&c)[N]) {
  if constexpr (N == 1) {
    return c[0];
  } else {
    return vaddq_s32(c[0], c[1]);
  }
}

template <int T>
void q8_panel(const PanelView& qp, const ActBlock* x, float* y, uint32_t y_stride) {
  constexpr int kChains = kChainsFor<T>;
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
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) {
      int32x4_t acc[T][kChains];
      for (int t = 0; t < T; ++t)
        for (int c = 0; c < kChains; ++c) acc[t][c] = vdupq_n_s32(0);
#pragma GCC unroll 2
      for (int h = 0; h < 2; ++h) {
        const uint8_t* q = qb + h * 256 + k * 16;
        const int8x16_t w0 = veorq_s8(load_s8x16(q), bias);
        const int8x16_t w1 = veorq_s8(load_s8x16(q + 64), bias);
        const int8x16_t w2 = veorq_s8(load_s8x16(q + 128), bias);
        const int8x16_t w3 = veorq_s8(load_s8x16(q + 192), bias);
        for (int t = 0; t < T; ++t) {
          int32x4_t& c = acc[t][h % kChains];
          c = vdotq_laneq_s32(c, w0, a[t][h], 0);
          c = vdotq_laneq_s32(c, w1, a[t][h], 1);
          c = vdotq_laneq_s32(c, w2, a[t][h], 2);
          c = vdotq_laneq_s32(c, w3, a[t][h], 3);
        }
      }
      const float32x4_t dw = load_f16x4(qp.header + b * 32 + k * 8);
      for (int t = 0; t < T; ++t)
        accf[t][k] = block_step(accf[t][k], dw, x[uint64_t(t) * qp.nb + b].d, chains_sum<kChains>(acc[t]));
    }
  }
  for (int t = 0; t < T; ++t) store_panel_rows(y + uint64_t(t) * y_stride, accf[t], qp.n_rows);
}

// Q8, one token: groups outer, row quads inner. A group's 64 bytes are the 4 quads' registers,
// so each SDOT feeds one of 4 independent per-quad chains (one SDOT's latency hidden behind three
// others), and only the 4 registers of one group are live: the accumulators stay in registers.
// The int32 sums and the f32 steps are those of q8_panel, so the bits are too.
void q8_panel1(const PanelView& qp, const ActBlock* x, float* y) {
  const int8x16_t bias = vdupq_n_s8(int8_t(0x80));
  const uint8_t* const quants = qp.quants;
  const uint8_t* const header = qp.header;
  const uint32_t nb = qp.nb;
  float32x4_t f0 = vdupq_n_f32(0.0f), f1 = f0, f2 = f0, f3 = f0;
  for (uint32_t b = 0; b < nb; ++b) {
    // Quads 0, 2 from q02 and 1, 3 from q13 = q02 + 16, which the compiler cannot see through:
    // no two loads of one base are 16 bytes apart, so none pair into an LDP Q (three micro-ops
    // on the Cortex-A76 model, six cycles on the A55's, against one for each of two LDR Q).
    const uint8_t* q02 = quants + uint64_t(b) * 512;
    const uint8_t* q13 = q02 + 16;
    __asm__("" : "+r"(q13));
    const int8x16_t a0 = vld1q_s8(x[b].q), a1 = vld1q_s8(x[b].q + 16);
    int32x4_t c0 = vdupq_n_s32(0), c1 = c0, c2 = c0, c3 = c0;
    unrolled<8>([&](auto g) {
      const int8x16_t ag = g < 4 ? a0 : a1;
      const int8x16_t w0 = veorq_s8(load_s8x16(q02 + g * 64), bias);
      const int8x16_t w1 = veorq_s8(load_s8x16(q13 + g * 64), bias);
      const int8x16_t w2 = veorq_s8(load_s8x16(q02 + g * 64 + 32), bias);
      const int8x16_t w3 = veorq_s8(load_s8x16(q13 + g * 64 + 32), bias);
      c0 = vdotq_laneq_s32(c0, w0, ag, g % 4);
      c1 = vdotq_laneq_s32(c1, w1, ag, g % 4);
      c2 = vdotq_laneq_s32(c2, w2, ag, g % 4);
      c3 = vdotq_laneq_s32(c3, w3, ag, g % 4);
      // A compiler-only fence between groups: without it GCC's first scheduling pass hoists all
      // 32 loads of a block to its top, and the f32 accumulators go through the stack.
      __asm__ volatile("" ::: "memory");
    });
    const float da = x[b].d;
    f0 = block_step(f0, load_f16x4(header + b * 32 + 0), da, c0);
    f1 = block_step(f1, load_f16x4(header + b * 32 + 8), da, c1);
    f2 = block_step(f2, load_f16x4(header + b * 32 + 16), da, c2);
    f3 = block_step(f3, load_f16x4(header + b * 32 + 24), da, c3);
  }
  const float32x4_t out[4] = {f0, f1, f2, f3};
  store_panel_rows(y, out, qp.n_rows);
}

// Q4 (kMin = false: value d * (u - 8)) or Q4M (kMin = true: value d * u + m).
template <int T, bool kMin>
void q4_panel(const PanelView& qp, const ActBlock* x, float* y, uint32_t y_stride) {
  constexpr int kChains = kChainsFor<T>;
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
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) {
      int32x4_t acc[T][kChains];
      for (int t = 0; t < T; ++t) {
        acc[t][0] = vdupq_n_s32(kMin ? 0 : -8 * x[uint64_t(t) * qp.nb + b].sum);
        for (int c = 1; c < kChains; ++c) acc[t][c] = vdupq_n_s32(0);
      }
#pragma GCC unroll 2
      for (int h = 0; h < 2; ++h) {
        // groups c = 2h, 2h + 1: their low nibbles meet lanes 0 and 2 of a[t][h], high 1 and 3
        const uint8x16_t b0 = vld1q_u8(qb + (2 * h) * 64 + k * 16);
        const uint8x16_t b1 = vld1q_u8(qb + (2 * h + 1) * 64 + k * 16);
        const int8x16_t l0 = vreinterpretq_s8_u8(vandq_u8(b0, low4));
        const int8x16_t h0 = vreinterpretq_s8_u8(vshrq_n_u8(b0, 4));
        const int8x16_t l1 = vreinterpretq_s8_u8(vandq_u8(b1, low4));
        const int8x16_t h1 = vreinterpretq_s8_u8(vshrq_n_u8(b1, 4));
        for (int t = 0; t < T; ++t) {
          int32x4_t& c = acc[t][h % kChains];
          c = vdotq_laneq_s32(c, l0, a[t][h], 0);
          c = vdotq_laneq_s32(c, h0, a[t][h], 1);
          c = vdotq_laneq_s32(c, l1, a[t][h], 2);
          c = vdotq_laneq_s32(c, h1, a[t][h], 3);
        }
      }
      const float32x4_t dw = load_f16x4(qp.header + b * 32 + k * 8);
      for (int t = 0; t < T; ++t) {
        const ActBlock& ab = x[uint64_t(t) * qp.nb + b];
        accf[t][k] = block_step(accf[t][k], dw, ab.d, chains_sum<kChains>(acc[t]));
        if constexpr (kMin) accf[t][k] = min_step(accf[t][k], load_f16x4(qp.mins() + b * 32 + k * 8), ab.d, ab.sum);
      }
    }
  }
  for (int t = 0; t < T; ++t) store_panel_rows(y + uint64_t(t) * y_stride, accf[t], qp.n_rows);
}

// Q4 or Q4M, one token: q8_panel1's walk over the 4 byte groups of a block (group g's low
// nibbles meet lane 2 (g % 2) of activation register g / 2, its high nibbles the next lane). No
// fence here: with half the loads per block GCC's schedule keeps the accumulators in registers,
// and a fence measured slower (llvm-mca, Cortex-A76 model 3.3 cycles per 32 weights without it, 3.9 with).
template <bool kMin>
void q4_panel1(const PanelView& qp, const ActBlock* x, float* y) {
  const uint8x16_t low4 = vdupq_n_u8(0x0f);
  const uint8_t* const quants = qp.quants;
  const uint8_t* const header = qp.header;
  const uint32_t nb = qp.nb;
  float32x4_t f[4] = {vdupq_n_f32(0.0f), vdupq_n_f32(0.0f), vdupq_n_f32(0.0f), vdupq_n_f32(0.0f)};
  for (uint32_t b = 0; b < nb; ++b) {
    const uint8_t* q02 = quants + uint64_t(b) * 256;  // as in q8_panel1: no LDP Q
    const uint8_t* q13 = q02 + 16;
    __asm__("" : "+r"(q13));
    const ActBlock& ab = x[b];
    const int8x16_t a0 = vld1q_s8(ab.q), a1 = vld1q_s8(ab.q + 16);
    int32x4_t c[4];
    unrolled<4>([&](auto k) { c[k] = vdupq_n_s32(kMin ? 0 : -8 * ab.sum); });
    unrolled<4>([&](auto g) {
      const int8x16_t ag = g < 2 ? a0 : a1;
      const uint8x16_t v[4] = {vld1q_u8(q02 + g * 64), vld1q_u8(q13 + g * 64), vld1q_u8(q02 + g * 64 + 32),
                               vld1q_u8(q13 + g * 64 + 32)};
      unrolled<4>([&](auto k) {
        c[k] = vdotq_laneq_s32(c[k], vreinterpretq_s8_u8(vandq_u8(v[k], low4)), ag, 2 * (g % 2));
        c[k] = vdotq_laneq_s32(c[k], vreinterpretq_s8_u8(vshrq_n_u8(v[k], 4)), ag, 2 * (g % 2) + 1);
      });
    });
    unrolled<4>([&](auto k) {
      f[k] = block_step(f[k], load_f16x4(header + b * 32 + k * 8), ab.d, c[k]);
      if constexpr (kMin) f[k] = min_step(f[k], load_f16x4(qp.mins() + b * 32 + k * 8), ab.d, ab.sum);
    });
  }
  store_panel_rows(y, f, qp.n_rows);
}

// Q8, Q4 and Q4M under the shared panel walk (kernels/matmul_driver.h).
struct DotprodQuant {
  static constexpr bool handles(fb::DType dt) {
    return dt == fb::DType::Q8 || dt == fb::DType::Q4 || dt == fb::DType::Q4M;
  }
  static constexpr int tile(fb::DType) { return 4; }
  template <fb::DType DT, int T>
  static void panel(const PanelView& pv, const ActBlock* x, float* y, uint32_t y_stride) {
    if constexpr (DT == fb::DType::Q8 && T == 1) {
      q8_panel1(pv, x, y);
    } else if constexpr (DT == fb::DType::Q8) {
      q8_panel<T>(pv, x, y, y_stride);
    } else if constexpr (T == 1) {
      q4_panel1<DT == fb::DType::Q4M>(pv, x, y);
    } else {
      q4_panel<T, DT == fb::DType::Q4M>(pv, x, y, y_stride);
    }
  }
};

}  // namespace

void dotprod_panel1(fb::DType dt, const PanelView& pv, const ActBlock* x, float* y) {
  switch (dt) {
    case fb::DType::Q8: return DotprodQuant::panel<fb::DType::Q8, 1>(pv, x, y, 0);
    case fb::DType::Q4: return DotprodQuant::panel<fb::DType::Q4, 1>(pv, x, y, 0);
    case fb::DType::Q4M: return DotprodQuant::panel<fb::DType::Q4M, 1>(pv, x, y, 0);
    default: return;
  }
}

void matmul_dotprod(const WeightView& w, const ActBlock* x, uint32_t n_tokens, float* y, uint32_t y_stride,
                    uint32_t panel_begin, uint32_t panel_end) {
  if (is_wide_quant(w.dtype)) return matmul_wide_dotprod(w, x, n_tokens, y, y_stride, panel_begin, panel_end);
  matmul_panels<DotprodQuant>(w, x, n_tokens, y, y_stride, panel_begin, panel_end);
}

namespace {
constexpr MatmulKernels kDotprod = {"neon-dotprod", quantize_act_neon, matmul_dotprod, matmul_f_neon};
}  // namespace

const MatmulKernels& matmul_dotprod_table() { return kDotprod; }

}  // namespace keel::arm64
