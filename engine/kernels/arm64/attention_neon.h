// What the arm64 attention tiers share: f16 loads, the query quantized to int8 for scores over
// q8/q4 rows, the row formats as policies, and the scores over quantized rows, templated on the
// integer dot product (NEON SMULL in the Armv8.0 table, SDOT in the dotprod one). The integer
// sums are exact and the f32 arithmetic after them is the same, so both tables give the same
// scores, bit for bit.
//
// Internal linkage on purpose: each tier's translation unit compiles its own copy with its own
// -march, where one inline function with external linkage could be replaced at link time by the
// copy built for a wider tier.
#pragma once

#include <arm_neon.h>

#include <cstdint>

#include "core/f16.h"
#include "core/kv_type.h"
#include "kernels/attention.h"
#include "kernels/unrolled.h"

namespace keel::arm64 {
namespace {  // NOLINT(google-build-namespaces): see above

inline float32x4_t load_half4(const uint16_t* p) { return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(p))); }

// The halves at first[0], first[stride], first[2 stride], first[3 stride] (one scale or minimum
// of four rows), as f32.
inline float32x4_t load_halves_strided(const uint16_t* first, uint64_t stride) {
  uint16x4_t h = vdup_n_u16(first[0]);
  h = vset_lane_u16(first[stride], h, 1);
  h = vset_lane_u16(first[2 * stride], h, 2);
  h = vset_lane_u16(first[3 * stride], h, 3);
  return vcvt_f32_f16(vreinterpret_f16_u16(h));
}

// The half at index i of four rows, as f32.
inline float32x4_t halves_of(const uint16_t* const rows[4], uint32_t i) {
  uint16x4_t h = vdup_n_u16(rows[0][i]);
  h = vset_lane_u16(rows[1][i], h, 1);
  h = vset_lane_u16(rows[2][i], h, 2);
  h = vset_lane_u16(rows[3][i], h, 3);
  return vcvt_f32_f16(vreinterpret_f16_u16(h));
}

// Quantized rows with groups of 32 (head_dim a multiple of 32) and at most kMaxGroups of them
// (Gemma 3's 256); other heads take the ref kernels.
constexpr uint32_t kMaxGroups = 8;

inline bool quant_fast_path(uint32_t hd) { return kv_group(hd) == 32 && hd / 32 <= kMaxGroups; }

// The query per group of 32: int8 numbers with scale max|q| / 127 (the x86 kernels' rule),
// rounded to nearest even; the f32 sum per group for q4's minimum term.
struct QueryQ8 {
  alignas(16) int8_t q[32 * kMaxGroups];
  float d[kMaxGroups];
  float sum[kMaxGroups];
};

inline void quantize_query(const float* x, uint32_t groups, QueryQ8& out) {
  for (uint32_t g = 0; g < groups; ++g) {
    const float* xg = x + 32 * g;
    float amax = 0.0f, sum = 0.0f;
    for (uint32_t i = 0; i < 32; ++i) {
      const float a = xg[i] < 0.0f ? -xg[i] : xg[i];
      amax = a > amax ? a : amax;
      sum += xg[i];
    }
    const float d = amax / 127.0f, inv = d > 0.0f ? 1.0f / d : 0.0f;
    // |x * inv| <= 127 (up to rounding, which stays below 127.5): the int8 cast is exact.
    for (uint32_t i = 0; i < 32; ++i) out.q[32 * g + i] = int8_t(vcvtns_s32_f32(xg[i] * inv));
    out.d[g] = d;
    out.sum[g] = sum;
  }
}

// A group's 32 numbers as two vectors of int8: numbers 0..15 and 16..31 (the query's order).
// q8: [groups scales][hd int8], values within +-127 (kv_quantize_row).
struct Q8Rows {
  static constexpr KvType kType = KvType::Q8;
  static constexpr bool kHasMin = false;
  static constexpr uint32_t kGroupBytes = 32;
  static const uint8_t* numbers(const uint16_t* row, uint32_t groups) {
    return reinterpret_cast<const uint8_t*>(row + groups);
  }
  static int8x16x2_t group(const uint8_t* g) {
    return {{vld1q_s8(reinterpret_cast<const int8_t*>(g)), vld1q_s8(reinterpret_cast<const int8_t*>(g + 16))}};
  }
};

// q4: [groups scales][groups minima][hd / 2 bytes]; a group's byte b holds number b in its low
// nibble and b + 16 in its high one.
struct Q4Rows {
  static constexpr KvType kType = KvType::Q4;
  static constexpr bool kHasMin = true;
  static constexpr uint32_t kGroupBytes = 16;
  static const uint8_t* numbers(const uint16_t* row, uint32_t groups) {
    return reinterpret_cast<const uint8_t*>(row + 2 * groups);
  }
  static int8x16x2_t group(const uint8_t* g) {
    const uint8x16_t x = vld1q_u8(g);
    return {{vreinterpretq_s8_u8(vandq_u8(x, vdupq_n_u8(15))), vreinterpretq_s8_u8(vshrq_n_u8(x, 4))}};
  }
};

// Scores of G quantized queries (query i's scores at s + i * s_stride) against n rows, four
// keys at a time. Dot::dot(key, query) gives an int32x4 whose lanes sum to the exact integer dot
// product of a group. Every key goes through a block of four (the last block repeats its last
// key in the missing lanes and stores only the keys it has), and per key the f32 operations
// are lane-wise, so a score does not depend on G, on n or on where its key falls in a block.
template <class Rows, class Dot, uint32_t G>
void scores_quant_rows(const QueryQ8* qq, const uint16_t* k, uint32_t n, uint32_t hd, float scale, float* s,
                       uint64_t s_stride) {
  const uint32_t groups = hd / 32, row = kv_row_halves(Rows::kType, hd);
  const float32x4_t sc = vdupq_n_f32(scale);
  for (uint32_t j = 0; j < n; j += 4) {
    const uint32_t keys = n - j < 4 ? n - j : 4;
    const uint16_t* kr[4];
    for (uint32_t r = 0; r < 4; ++r) kr[r] = k + uint64_t(j + (r < keys ? r : keys - 1)) * row;
    float32x4_t acc[G];
    unrolled<G>([&](auto g) { acc[g] = vdupq_n_f32(0.0f); });
    for (uint32_t b = 0; b < groups; ++b) {
      int32x4_t part[G][4];
      unrolled<4>([&](auto r) {
        const int8x16x2_t key = Rows::group(Rows::numbers(kr[r], groups) + b * Rows::kGroupBytes);
        unrolled<G>([&](auto g) {
          const int8x16x2_t qv = {{vld1q_s8(qq[g].q + 32 * b), vld1q_s8(qq[g].q + 32 * b + 16)}};
          part[g][r] = Dot::dot(key, qv);
        });
      });
      const float32x4_t dk = halves_of(kr, b);
      const float32x4_t mk = Rows::kHasMin ? halves_of(kr, groups + b) : dk;
      unrolled<G>([&](auto g) {
        // Keys 0..3's totals, exact in int32 (at most 32 * 127 * 127 per group).
        const int32x4_t tot = vpaddq_s32(vpaddq_s32(part[g][0], part[g][1]), vpaddq_s32(part[g][2], part[g][3]));
        acc[g] = vfmaq_f32(acc[g], vmulq_n_f32(dk, qq[g].d[b]), vcvtq_f32_s32(tot));
        if constexpr (Rows::kHasMin) acc[g] = vfmaq_f32(acc[g], mk, vdupq_n_f32(qq[g].sum[b]));
      });
    }
    unrolled<G>([&](auto g) {
      float* out = s + g * s_stride + j;
      const float32x4_t v = vmulq_f32(acc[g], sc);
      if (keys == 4) {
        vst1q_f32(out, v);
      } else {
        float lanes[4];
        vst1q_f32(lanes, v);
        for (uint32_t r = 0; r < keys; ++r) out[r] = lanes[r];
      }
    });
  }
}

// Scores over quantized rows for the table's single-query and grouped entries; heads outside
// the fast path take ref, query by query.
template <class Rows, class Dot>
void scores_quant_group(const float* q, uint32_t g, const uint16_t* k, uint32_t n, uint32_t hd, float scale, float* s,
                        uint64_t s_stride) {
  if (!quant_fast_path(hd)) {
    const KvScoresFn one = attention_kernels_ref().scores_of(Rows::kType);
    for (uint32_t i = 0; i < g; ++i) one(q + uint64_t(i) * hd, k, n, hd, scale, s + i * s_stride);
    return;
  }
  for_query_blocks<3>(g, [&](uint32_t i, auto size) {
    QueryQ8 qq[size];
    for (uint32_t x = 0; x < size; ++x) quantize_query(q + uint64_t(i + x) * hd, hd / 32, qq[x]);
    scores_quant_rows<Rows, Dot, size>(qq, k, n, hd, scale, s + i * s_stride, s_stride);
  });
}

template <class Rows, class Dot>
void scores_quant(const float* q, const uint16_t* k, uint32_t n, uint32_t hd, float scale, float* s) {
  scores_quant_group<Rows, Dot>(q, 1, k, n, hd, scale, s, 0);
}

}  // namespace
}  // namespace keel::arm64
