// The panel walk of the 5-bit and K-quant kernels (Q5, Q5M, Q4K, Q5K, Q6K) that the NEON and
// dotprod tiers share: decoding a block's nibbles and high-bit planes in registers, the
// per-block scales and the f32 accumulation. A tier supplies only the integer dot product of
// one group of 4 rows (`Dot::group`), so both tiers perform the same f32 operations, in the same
// order, on the same exact integers: a token's outputs are bit for bit the same whichever tier
// computed them and however many tokens shared its tile. The f32 sequence is also the one of
// the x86 kernels (engine/kernels/x86/matmul_wide_avx2.cpp).
//
// A block of 16 rows x 32 columns is 4 chunks of 64 bytes; 16 bytes of a chunk are 4 rows x 4
// bytes. Group k (rows 4k..4k+3) of chunk c is the 16 bytes at c * 64 + k * 16: its low
// nibbles are columns 8c..8c+3, its high nibbles 8c+4..8c+7 (docs/format.md, Panel16x4). The
// high-bit plane keeps the same row x byte positions, so one more 16-byte load per group (two
// for Q6K) brings the bits above every nibble of the group.
//
// Every u is at most 63, so it is also a valid int8 and the signed multiplies of either tier take
// it as is; Q6K's zero point is subtracted afterwards, per 16-column half:
// sum (u - 32) q = sum u q - 32 sum q.
#pragma once

#include <arm_neon.h>

#include <cstring>

#include "kernels/kquant_kernels.h"
#include "model/weight_format.h"

namespace keel::arm64 {

// Internal linkage on purpose: each tier's translation unit is compiled with its own -march, and
// an inline function of external linkage could be merged by the linker into the copy built for
// Armv8.2, which the Armv8.0 tier would then call.
namespace {

using fb::DType;

inline int32_t wide_load_i32(const void* p) {
  int32_t v;
  memcpy(&v, p, 4);
  return v;
}

// 4 f16 from 8 bytes (FCVTL is Armv8.0).
inline float32x4_t wide_load_f16x4(const uint8_t* p) { return vcvt_f32_f16(vreinterpret_f16_u8(vld1_u8(p))); }

// The 8 u vectors of group k of a block: u[2c + h] holds, for each of the 4 rows, the u of
// columns 8c + 4h + j (j = 0..3), which pair with the activation bytes q[4 (2c + h) + j].
template <DType DT>
inline void wide_decode_group(const uint8_t* qb, uint32_t k, uint8x16_t u[8]) {
  const uint8x16_t low4 = vdupq_n_u8(0x0f);
  uint8x16_t n[4];
  for (int c = 0; c < 4; ++c) n[c] = vld1q_u8(qb + c * 64 + k * 16);
  if constexpr (high_bits(DT) == 0) {
    for (int c = 0; c < 4; ++c) {
      u[2 * c] = vandq_u8(n[c], low4);
      u[2 * c + 1] = vshrq_n_u8(n[c], 4);
    }
  } else if constexpr (high_bits(DT) == 1) {
    // Bit 2c + h of the plane byte is bit 4 of u[2c + h]. Each u takes its nibble and one bit
    // moved to bit 4 with nothing above it: SLI keeps the low nibble it inserts above, SRI the
    // high nibble it inserts below, BSL picks bit 4.
    const uint8x16_t hb = vld1q_u8(qb + 256 + k * 16);
    const uint8x16_t bit4 = vdupq_n_u8(0x10);
    u[0] = vsliq_n_u8(n[0], vandq_u8(hb, vdupq_n_u8(1)), 4);
    u[1] = vsriq_n_u8(vandq_u8(vshlq_n_u8(hb, 3), bit4), n[0], 4);
    u[2] = vbslq_u8(bit4, vshlq_n_u8(hb, 2), vandq_u8(n[1], low4));
    u[3] = vsriq_n_u8(vandq_u8(vshlq_n_u8(hb, 1), bit4), n[1], 4);
    u[4] = vbslq_u8(bit4, hb, vandq_u8(n[2], low4));
    u[5] = vsriq_n_u8(vandq_u8(vshrq_n_u8(hb, 1), bit4), n[2], 4);
    u[6] = vbslq_u8(bit4, vshrq_n_u8(hb, 2), vandq_u8(n[3], low4));
    u[7] = vsriq_n_u8(vshrq_n_u8(hb, 3), n[3], 4);  // bits 5-7 of hb >> 3 are already 0
  } else {
    // Plane byte [c / 2]: bits 0-1, 2-3, 4-5, 6-7 are bits 4-5 of u[2c], u[2c + 1] for the even
    // chunk c, then of the odd chunk c + 1.
    const uint8x16_t bits45 = vdupq_n_u8(0x30);
    for (int e = 0; e < 2; ++e) {
      const uint8x16_t hp = vld1q_u8(qb + 256 + e * 64 + k * 16);
      const int c = 2 * e;
      u[2 * c] = vsliq_n_u8(n[c], vandq_u8(hp, vdupq_n_u8(3)), 4);
      u[2 * c + 1] = vsriq_n_u8(vandq_u8(vshlq_n_u8(hp, 2), bits45), n[c], 4);
      u[2 * c + 2] = vbslq_u8(bits45, hp, vandq_u8(n[c + 1], low4));
      u[2 * c + 3] = vsriq_n_u8(vshrq_n_u8(hp, 2), n[c + 1], 4);  // bits 6-7 of hp >> 2 are 0
    }
  }
}

// 16 u8 -> 4 x 4 f32 (K-quant scales and mins).
inline void wide_u8x16_to_f32(const uint8_t* p, float32x4_t f[4]) {
  const uint8x16_t v = vld1q_u8(p);
  const uint16x8_t lo = vmovl_u8(vget_low_u8(v)), hi = vmovl_high_u8(v);
  f[0] = vcvtq_f32_u32(vmovl_u16(vget_low_u16(lo)));
  f[1] = vcvtq_f32_u32(vmovl_high_u16(lo));
  f[2] = vcvtq_f32_u32(vmovl_u16(vget_low_u16(hi)));
  f[3] = vcvtq_f32_u32(vmovl_high_u16(hi));
}

// 16 i8 -> 4 x 4 i32 (Q6K scales).
inline void wide_i8x16_to_i32(const uint8_t* p, int32x4_t s[4]) {
  const int8x16_t v = vreinterpretq_s8_u8(vld1q_u8(p));
  const int16x8_t lo = vmovl_s8(vget_low_s8(v)), hi = vmovl_high_s8(v);
  s[0] = vmovl_s16(vget_low_s16(lo));
  s[1] = vmovl_high_s16(lo);
  s[2] = vmovl_s16(vget_low_s16(hi));
  s[3] = vmovl_high_s16(hi);
}

inline void wide_store_rows(float* y, const float32x4_t acc[4], uint32_t n_rows) {
  if (n_rows == kPanelRows) {
    for (int k = 0; k < 4; ++k) vst1q_f32(y + 4 * k, acc[k]);
    return;
  }
  float tmp[kPanelRows];
  for (int k = 0; k < 4; ++k) vst1q_f32(tmp + 4 * k, acc[k]);
  for (uint32_t r = 0; r < n_rows; ++r) y[r] = tmp[r];
}

// T tokens x one panel. Dot::group<kHalves>(u, q, s) sets, for the 4 rows of a group, s[0] to
// sum_i u_i q_i over the block's 32 columns, or with kHalves s[0] and s[1] to the sums over
// columns 0-15 and 16-31 (Q6K's two scales).
template <DType DT, int T, class Dot>
void wide_panel(const uint8_t* panel, uint32_t nb, uint64_t qoff, const ActBlock* x, float* y, uint32_t y_stride,
                uint32_t n_rows) {
  constexpr bool kHalves = DT == DType::Q6K;
  constexpr uint32_t kQbb = quant_block_bytes(DT);
  const uint32_t ns = nb / (kSuperBlock / kQuantBlock);
  const uint8_t* quants = panel + qoff;
  float32x4_t acc[T][4];
  for (int t = 0; t < T; ++t)
    for (int k = 0; k < 4; ++k) acc[t][k] = vdupq_n_f32(0.0f);
  float32x4_t dsb[4], msb[4];  // the superblock's d and dmin, loaded at its first block
  for (int k = 0; k < 4; ++k) dsb[k] = msb[k] = vdupq_n_f32(0.0f);
  for (uint32_t b = 0; b < nb; ++b) {
    const uint8_t* qb = quants + uint64_t(b) * kQbb;
    // Per-row multipliers of isum * d_a (s) and sum_a * d_a (m); Q6K: int scales of the halves.
    float32x4_t s[4], m[4];
    int32x4_t sc0[4], sc1[4];
    if constexpr (is_kquant(DT)) {
      if (b % 8 == 0) {
        for (int k = 0; k < 4; ++k) dsb[k] = wide_load_f16x4(panel + (b / 8) * 32 + k * 8);
        if constexpr (DT != DType::Q6K)
          for (int k = 0; k < 4; ++k) msb[k] = wide_load_f16x4(panel + uint64_t(ns) * 32 + (b / 8) * 32 + k * 8);
      }
    }
    if constexpr (DT == DType::Q6K) {
      const uint8_t* sc = panel + uint64_t(ns) * 32 + uint64_t(b) * 32;  // [2][16] int8
      wide_i8x16_to_i32(sc, sc0);
      wide_i8x16_to_i32(sc + 16, sc1);
    } else if constexpr (is_kquant(DT)) {
      const uint8_t* sc = panel + uint64_t(ns) * 64 + uint64_t(b) * 16;
      wide_u8x16_to_f32(sc, s);
      wide_u8x16_to_f32(sc + uint64_t(nb) * 16, m);
      for (int k = 0; k < 4; ++k) {
        s[k] = vmulq_f32(dsb[k], s[k]);
        m[k] = vmulq_f32(msb[k], m[k]);
      }
    } else {
      for (int k = 0; k < 4; ++k) s[k] = wide_load_f16x4(panel + uint64_t(b) * 32 + k * 8);
      if constexpr (DT == DType::Q5M)
        for (int k = 0; k < 4; ++k) m[k] = wide_load_f16x4(panel + uint64_t(nb) * 32 + uint64_t(b) * 32 + k * 8);
    }
    // Q6K's zero-point corrections 32 sum q of the two halves, per token.
    int32_t z0[T] = {}, z1[T] = {};
    if constexpr (DT == DType::Q6K)
      for (int t = 0; t < T; ++t) {
        const ActBlock& a = x[uint64_t(t) * nb + b];
        z0[t] = 32 * int32_t(vaddlvq_s8(vld1q_s8(a.q)));
        z1[t] = 32 * a.sum - z0[t];
      }
    for (uint32_t k = 0; k < 4; ++k) {
      uint8x16_t u[8];
      wide_decode_group<DT>(qb, k, u);
      for (int t = 0; t < T; ++t) {
        const ActBlock& a = x[uint64_t(t) * nb + b];
        int32x4_t is[2];
        Dot::template group<kHalves>(u, a.q, is);
        if constexpr (DT == DType::Q6K) {
          // |sum_{16 cols} (u - 32) q| <= 16 * 32 * 127, times |sc| <= 128, twice: < 2^31.
          const int32x4_t i0 = vsubq_s32(is[0], vdupq_n_s32(z0[t]));
          const int32x4_t i1 = vsubq_s32(is[1], vdupq_n_s32(z1[t]));
          const int32x4_t v = vmlaq_s32(vmulq_s32(sc0[k], i0), sc1[k], i1);
          acc[t][k] = vfmaq_f32(acc[t][k], vmulq_n_f32(dsb[k], a.d), vcvtq_f32_s32(v));
          continue;
        }
        int32x4_t v = is[0];
        if constexpr (DT == DType::Q5) v = vsubq_s32(v, vdupq_n_s32(16 * a.sum));
        acc[t][k] = vfmaq_f32(acc[t][k], vmulq_n_f32(s[k], a.d), vcvtq_f32_s32(v));
        if constexpr (DT == DType::Q5M) {
          acc[t][k] = vfmaq_f32(acc[t][k], vmulq_n_f32(m[k], a.d), vdupq_n_f32(float(a.sum)));
        } else if constexpr (is_kquant(DT)) {
          acc[t][k] = vfmsq_f32(acc[t][k], vmulq_n_f32(m[k], a.d), vdupq_n_f32(float(a.sum)));
        }
      }
    }
  }
  for (int t = 0; t < T; ++t) wide_store_rows(y + uint64_t(t) * y_stride, acc[t], n_rows);
}

template <DType DT, int T, class Dot>
void wide_panel_tile(uint32_t nt, const uint8_t* panel, uint32_t nb, uint64_t qoff, const ActBlock* x, float* y,
                     uint32_t y_stride, uint32_t n_rows) {
  if constexpr (T > 1) {
    if (nt < uint32_t(T)) return wide_panel_tile<DT, T - 1, Dot>(nt, panel, nb, qoff, x, y, y_stride, n_rows);
  }
  wide_panel<DT, T, Dot>(panel, nb, qoff, x, y, y_stride, n_rows);
}

// Tokens are taken kTile at a time per panel, so a panel's decoded u serve kTile tokens.
template <DType DT, int kTile, class Dot>
void matmul_wide_panels(const WeightView& w, const ActBlock* x, uint32_t n_tokens, float* y, uint32_t y_stride,
                        uint32_t panel_begin, uint32_t panel_end) {
  const uint32_t nb = act_blocks(w.cols);
  const uint64_t pbytes = panel_bytes(DT, w.cols);
  const uint64_t qoff = panel_quants_offset(DT, w.cols);
  for (uint32_t p = panel_begin; p < panel_end; ++p) {
    const uint8_t* panel = w.data + p * pbytes;
    // The header is read a little per block while the quants stream; fetching it up front keeps
    // the quants one clean sequential stream for the hardware prefetcher.
    for (uint64_t o = 0; o < qoff; o += 64) __builtin_prefetch(panel + o);
    const uint32_t r0 = p * kPanelRows;
    const uint32_t n_rows = w.rows - r0 < kPanelRows ? w.rows - r0 : kPanelRows;
    for (uint32_t t0 = 0; t0 < n_tokens; t0 += kTile) {
      const uint32_t nt = n_tokens - t0 < uint32_t(kTile) ? n_tokens - t0 : uint32_t(kTile);
      wide_panel_tile<DT, kTile, Dot>(nt, panel, nb, qoff, x + uint64_t(t0) * nb, y + uint64_t(t0) * y_stride + r0,
                                      y_stride, n_rows);
    }
  }
}

template <int kTile, class Dot>
void matmul_wide_dispatch(const WeightView& w, const ActBlock* x, uint32_t n_tokens, float* y, uint32_t y_stride,
                          uint32_t panel_begin, uint32_t panel_end) {
  switch (w.dtype) {
    case DType::Q5:
      matmul_wide_panels<DType::Q5, kTile, Dot>(w, x, n_tokens, y, y_stride, panel_begin, panel_end);
      break;
    case DType::Q5M:
      matmul_wide_panels<DType::Q5M, kTile, Dot>(w, x, n_tokens, y, y_stride, panel_begin, panel_end);
      break;
    case DType::Q4K:
      matmul_wide_panels<DType::Q4K, kTile, Dot>(w, x, n_tokens, y, y_stride, panel_begin, panel_end);
      break;
    case DType::Q5K:
      matmul_wide_panels<DType::Q5K, kTile, Dot>(w, x, n_tokens, y, y_stride, panel_begin, panel_end);
      break;
    case DType::Q6K:
      matmul_wide_panels<DType::Q6K, kTile, Dot>(w, x, n_tokens, y, y_stride, panel_begin, panel_end);
      break;
    default: break;
  }
}

}  // namespace
}  // namespace keel::arm64
