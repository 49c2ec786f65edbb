// The panel kernel of the 5-bit and K-quant formats (Q5, Q5M, Q4K, Q5K, Q6K) that the NEON and
// dotprod tiers share, under the panel walk of kernels/matmul_driver.h: decoding a block's
// nibbles and high-bit planes in registers, the per-block scales and the f32 accumulation. A tier supplies only the
// integer dot product of one group of 4 rows (`Dot::group`), so both tiers perform the same f32 operations, in the same
// order, on the same exact integers: a token's outputs are bit for bit the same whichever tier
// computed them and however many tokens shared its tile. The f32 steps are those of the x86
// kernels, in their order (engine/kernels/x86/matmul_wide_avx2.cpp).
//
// A block of 16 rows x 32 columns is 4 chunks of 64 bytes; 16 bytes of a chunk are 4 rows x 4
// bytes. Group k (rows 4k..4k+3) of chunk c is the 16 bytes at c * 64 + k * 16: its low
// nibbles are columns 8c..8c+3, its high nibbles 8c+4..8c+7 (docs/format.md, Panel16x4). The
// high-bit plane keeps the same row x byte positions, so one more 16-byte load per group (two
// for Q6K) brings the bits above every nibble of the group.
//
// Every u is at most 63, so it is also a valid int8 and the signed multiplies of either tier take
// it as is; the zero points of Q5 and Q6K are the integer sums' starting values instead:
// sum (u - z) q = -z sum q + sum u q, per block (Q5) or per 16-column half (Q6K).
#pragma once

#include <arm_neon.h>

#include "kernels/kquant_kernels.h"
#include "kernels/unaligned_load.h"
#include "kernels/matmul_driver.h"
#include "kernels/unrolled.h"
#include "model/weight_format.h"

namespace keel::arm64 {

// Internal linkage on purpose: each tier's translation unit is compiled with its own -march, and
// an inline function of external linkage could be merged by the linker into the copy built for
// Armv8.2, which the Armv8.0 tier would then call.
namespace {

using fb::DType;

// 4 f16 from 8 bytes (FCVTL is Armv8.0).
inline float32x4_t wide_load_f16x4(const uint8_t* p) { return vcvt_f32_f16(vreinterpret_f16_u8(vld1_u8(p))); }

// The u of the formats with a high-bit plane: a nibble and the plane's bits for it moved to
// bit 4 (and 5), nothing above. Masking the plane byte first keeps two of its fields whose
// shifts to bit 4 push the other one out of the byte (left) or into the nibble (right), where
// the insert drops it: SLI keeps the low nibble of the target it inserts above, SRI the high
// nibble it inserts below, BSL with the low-nibble mask takes the nibble from n.
inline uint8x16_t wide_lo(uint8x16_t n, uint8x16_t hi_bits) { return vbslq_u8(vdupq_n_u8(0x0f), n, hi_bits); }

// Q6K: bits 0-1, 2-3, 4-5, 6-7 of the plane byte [e] are bits 4-5 of u[2c], u[2c + 1] of the
// even chunk c = 2e, then of the odd chunk c + 1.
template <int kE>
inline __attribute__((always_inline)) void wide_decode_6bit_pair(const uint8_t* qb, uint32_t k, const uint8x16_t n[4],
                                                                 uint8x16_t u[8]) {
  constexpr int c = 2 * kE;
  const uint8x16_t hp = vld1q_u8(qb + 256 + kE * 64 + k * 16);
  const uint8x16_t f04 = vandq_u8(hp, vdupq_n_u8(0x33));      // fields at bits 0-1, 4-5
  u[2 * c] = vsliq_n_u8(n[c], f04, 4);                        // bits 0-1 -> 4-5
  u[2 * c + 2] = wide_lo(n[c + 1], f04);                      // bits 4-5 stay
  const uint8x16_t f26 = vandq_u8(hp, vdupq_n_u8(0xcc));      // fields at bits 2-3, 6-7
  u[2 * c + 1] = vsriq_n_u8(vshlq_n_u8(f26, 2), n[c], 4);     // bits 2-3 -> 4-5
  u[2 * c + 3] = vsriq_n_u8(vshrq_n_u8(hp, 2), n[c + 1], 4);  // bits 6-7 -> 4-5
}

// The 8 u vectors of group k of a block: u[2c + h] holds, for each of the 4 rows, the u of
// columns 8c + 4h + j (j = 0..3), which pair with the activation bytes q[4 (2c + h) + j].
template <DType DT>
inline __attribute__((always_inline)) void wide_decode_group(const uint8_t* qb, uint32_t k, uint8x16_t u[8]) {
  const uint8x16_t low4 = vdupq_n_u8(0x0f);
  uint8x16_t n[4];
  unrolled<4>([&](auto c) { n[c] = vld1q_u8(qb + c * 64 + k * 16); });
  if constexpr (high_bits(DT) == 0) {
    unrolled<4>([&](auto c) {
      u[2 * c] = vandq_u8(n[c], low4);
      u[2 * c + 1] = vshrq_n_u8(n[c], 4);
    });
  } else if constexpr (high_bits(DT) == 1) {
    // Bit 2c + h of the plane byte is bit 4 of u[2c + h]; bits i and i + 4 are masked together.
    const uint8x16_t hb = vld1q_u8(qb + 256 + k * 16);
    const uint8x16_t b04 = vandq_u8(hb, vdupq_n_u8(0x11));
    u[0] = vsliq_n_u8(n[0], b04, 4);  // bit 0 -> 4
    u[4] = wide_lo(n[2], b04);        // bit 4 stays
    const uint8x16_t b15 = vandq_u8(hb, vdupq_n_u8(0x22));
    u[1] = vsriq_n_u8(vshlq_n_u8(b15, 3), n[0], 4);  // bit 1 -> 4
    u[5] = vsriq_n_u8(vshrq_n_u8(b15, 1), n[2], 4);  // bit 5 -> 4
    const uint8x16_t b26 = vandq_u8(hb, vdupq_n_u8(0x44));
    u[2] = wide_lo(n[1], vshlq_n_u8(b26, 2));                                   // bit 2 -> 4
    u[6] = wide_lo(n[3], vshrq_n_u8(b26, 2));                                   // bit 6 -> 4
    u[3] = vsriq_n_u8(vshlq_n_u8(vandq_u8(hb, vdupq_n_u8(0x08)), 1), n[1], 4);  // bit 3 -> 4
    u[7] = vsriq_n_u8(vshrq_n_u8(hb, 3), n[3], 4);                              // bit 7 -> 4
  } else {
    wide_decode_6bit_pair<0>(qb, k, n, u);
    wide_decode_6bit_pair<1>(qb, k, n, u);
  }
}

// Per-row scales of a block are widened in two steps: 16 bytes to two 16-bit vectors (rows
// 0-7, 8-15) for the block, then the 4 rows of group k to 32 bits where the group uses them.
// Holding 2 vectors per field instead of 4 is what lets two or three tokens' accumulators stay
// in registers.
inline void wide_u8x16_to_u16(const uint8_t* p, uint16x8_t h[2]) {
  const uint8x16_t v = vld1q_u8(p);
  h[0] = vmovl_u8(vget_low_u8(v));
  h[1] = vmovl_high_u8(v);
}
inline void wide_i8x16_to_i16(const uint8_t* p, int16x8_t h[2]) {
  const int8x16_t v = vreinterpretq_s8_u8(vld1q_u8(p));
  h[0] = vmovl_s8(vget_low_s8(v));
  h[1] = vmovl_high_s8(v);
}
template <int K>
inline float32x4_t wide_group_f32(const uint16x8_t h[2]) {
  return vcvtq_f32_u32(K % 2 ? vmovl_high_u16(h[K / 2]) : vmovl_u16(vget_low_u16(h[K / 2])));
}
template <int K>
inline int32x4_t wide_group_i32(const int16x8_t h[2]) {
  return K % 2 ? vmovl_high_s16(h[K / 2]) : vmovl_s16(vget_low_s16(h[K / 2]));
}

inline void wide_store_rows(float* y, const float32x4_t acc[4], uint32_t n_rows) {
  if (n_rows == kPanelRows) {
    unrolled<4>([&](auto k) { vst1q_f32(y + 4 * k, acc[k]); });
    return;
  }
  float tmp[kPanelRows];
  unrolled<4>([&](auto k) { vst1q_f32(tmp + 4 * k, acc[k]); });
  for (uint32_t r = 0; r < n_rows; ++r) y[r] = tmp[r];
}

// T tokens x one panel. Dot::group<kHalves>(u, q, s) adds, for the 4 rows of a group, to s[0]
// sum_i u_i q_i over the block's 32 columns, or with kHalves to s[0] and s[1] the sums over
// columns 0-15 and 16-31 (Q6K's two scales). flatten: the lambdas of unrolled are calls
// GCC does not inline at -O2 once the body is this large, which would put the decoded u back
// in memory.
template <DType DT, int T, class Dot>
__attribute__((flatten)) void wide_panel(const PanelView& pv, const ActBlock* x, float* y, uint32_t y_stride) {
  constexpr bool kHalves = DT == DType::Q6K;
  constexpr uint32_t kQbb = quant_block_bytes(DT);
  const uint8_t* panel = pv.header;
  const uint32_t nb = pv.nb;
  const uint32_t ns = nb / (kSuperBlock / kQuantBlock);
  const uint8_t* quants = pv.quants;
  float32x4_t acc[T][4];
  unrolled<T>([&](auto t) { unrolled<4>([&](auto k) { acc[t][k] = vdupq_n_f32(0.0f); }); });
  float32x4_t dsb[4], msb[4];  // the superblock's d and dmin, loaded at its first block
  unrolled<4>([&](auto k) { dsb[k] = msb[k] = vdupq_n_f32(0.0f); });
  for (uint32_t b = 0; b < nb; ++b) {
    const uint8_t* qb = quants + uint64_t(b) * kQbb;
    if constexpr (is_kquant(DT)) {
      if (b % 8 == 0) {
        const uint8_t* d = panel + (b / 8) * 32;
        unrolled<4>([&](auto k) { dsb[k] = wide_load_f16x4(d + k * 8); });
        if constexpr (DT != DType::Q6K)
          unrolled<4>([&](auto k) { msb[k] = wide_load_f16x4(d + uint64_t(ns) * 32 + k * 8); });
      }
    }
    // K-quant u8 scales and mins, Q6K int8 scales of the two halves, widened to 16 bits.
    uint16x8_t sc16[2], mn16[2];
    int16x8_t sc6_16[2][2];
    if constexpr (DT == DType::Q6K) {
      const uint8_t* sc = panel + uint64_t(ns) * 32 + uint64_t(b) * 32;  // [2][16] int8
      wide_i8x16_to_i16(sc, sc6_16[0]);
      wide_i8x16_to_i16(sc + 16, sc6_16[1]);
    } else if constexpr (is_kquant(DT)) {
      const uint8_t* sc = panel + uint64_t(ns) * 64 + uint64_t(b) * 16;
      wide_u8x16_to_u16(sc, sc16);
      wide_u8x16_to_u16(sc + uint64_t(nb) * 16, mn16);
    }
    // The integer sums start from minus the zero point's share, per token: Q5 16 sum q, Q6K
    // 32 sum q over each 16-column half; 0 for the formats without one.
    int32x4_t z0[T], z1[T];
    unrolled<T>([&](auto t) {
      const ActBlock& a = x[uint64_t(t) * nb + b];
      if constexpr (DT == DType::Q6K) {
        const int32_t h0 = 32 * int32_t(vaddlvq_s8(vld1q_s8(a.q)));
        z0[t] = vdupq_n_s32(-h0);
        z1[t] = vdupq_n_s32(h0 - 32 * a.sum);
      } else {
        z0[t] = z1[t] = vdupq_n_s32(DT == DType::Q5 ? -16 * a.sum : 0);
      }
    });
    unrolled<4>([&](auto k) {
      uint8x16_t u[8];
      wide_decode_group<DT>(qb, k, u);
      // Per-row multipliers of isum * d_a (s) and of sum_a * d_a (m), as the x86 kernels form
      // them; Q6K: the int scales of the two halves.
      float32x4_t s, m;
      int32x4_t sc0, sc1;
      if constexpr (DT == DType::Q6K) {
        sc0 = wide_group_i32<k>(sc6_16[0]);
        sc1 = wide_group_i32<k>(sc6_16[1]);
      } else if constexpr (is_kquant(DT)) {
        s = vmulq_f32(dsb[k], wide_group_f32<k>(sc16));
        m = vmulq_f32(msb[k], wide_group_f32<k>(mn16));
      } else {
        s = wide_load_f16x4(panel + uint64_t(b) * 32 + k * 8);
        if constexpr (DT == DType::Q5M) m = wide_load_f16x4(panel + uint64_t(nb) * 32 + uint64_t(b) * 32 + k * 8);
      }
      unrolled<T>([&](auto t) {
        const ActBlock& a = x[uint64_t(t) * nb + b];
        int32x4_t is[2] = {z0[t], z1[t]};
        Dot::template group<kHalves>(u, a.q, is);
        if constexpr (DT == DType::Q6K) {
          // |sum_{16 cols} (u - 32) q| <= 16 * 32 * 127, times |sc| <= 128, twice: < 2^31.
          const int32x4_t v = vmlaq_s32(vmulq_s32(sc0, is[0]), sc1, is[1]);
          acc[t][k] = vfmaq_f32(acc[t][k], vmulq_n_f32(dsb[k], a.d), vcvtq_f32_s32(v));
        } else {
          acc[t][k] = vfmaq_f32(acc[t][k], vmulq_n_f32(s, a.d), vcvtq_f32_s32(is[0]));
          if constexpr (DT == DType::Q5M) {
            acc[t][k] = vfmaq_f32(acc[t][k], vmulq_n_f32(m, a.d), vdupq_n_f32(float(a.sum)));
          } else if constexpr (is_kquant(DT)) {
            acc[t][k] = vfmsq_f32(acc[t][k], vmulq_n_f32(m, a.d), vdupq_n_f32(float(a.sum)));
          }
        }
      });
    });
  }
  unrolled<T>([&](auto t) { wide_store_rows(y + uint64_t(t) * y_stride, acc[t], pv.n_rows); });
}

// The tier's microkernels under the shared panel walk (kernels/matmul_driver.h). Dot::tile(dt):
// tokens per panel pass, the most whose accumulators, activations and the group's decoded u fit
// the 32 vector registers with the fewest spills (llvm-mca).
template <class Dot>
struct WidePanels {
  static constexpr bool handles(DType dt) { return is_wide_quant(dt); }
  static constexpr int tile(DType dt) { return Dot::tile(dt); }
  template <DType DT, int T>
  static void panel(const PanelView& pv, const ActBlock* x, float* y, uint32_t y_stride) {
    wide_panel<DT, T, Dot>(pv, x, y, y_stride);
  }
};

}  // namespace
}  // namespace keel::arm64
