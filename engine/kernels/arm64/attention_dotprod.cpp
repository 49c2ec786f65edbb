// Attention over q8/q4 rows with SDOT/UDOT (Armv8.2 dotprod), for heads of 32 to 256 numbers, a
// multiple of 32; other heads and the f16 entries are the NEON table's functions, so f16 results
// do not depend on the tier.
//
// Scores: the NEON table's (attention_neon.h) with SDOT for the int32 group sums: the same
// integers, hence the same scores, bit for bit.
//
// Weighted sums: out = sum_j p_j (d_j v_j + m_j). Per whole block of 16 rows and group, the
// coefficients c_j = p_j d_j are quantized to 16 bits against the block's largest S,
// c_j ~ (S / 65535) u_j, u_j = round(65535 c_j / S), and split into two bytes; four rows'
// numbers are interleaved (two zip levels) so that each 32-bit lane holds one number of the
// four rows, and UDOT by element sums u_j v_j over the four rows per output lane, for the high
// bytes, then (the sums shifted by 8) the low bytes. UDOT multiplies unsigned bytes: q8's numbers
// are read as v + 128 and 128 * sum(u_j) is taken back. The int32 sums are exact (below 2^28); the
// block's scale S / 65535 is applied once per block in f32. The only added error is the rounding
// of u_j: at most S / 131070 per coefficient, times |v_j| for each row (kv_quant_test states the
// bound). q4's minima are summed in f32 (sum_j p_j m_j per group). Rows past the last whole
// block are summed in f32.
//
// The table takes these for q8 only; its q4 weighted sums are the NEON table's (f32). In a q4
// group d v and the minimum m are each much larger than the value they stand for where a group
// has outliers, and the coefficient rounding meets d v but not m, so it is not small against
// the result: SmolLM2 with a q4 cache, 256 tokens of an essay, perplexity 35.06 with these
// against 33.00 with the f32 sums (33.37 ref), where q8 (no minimum) is unaffected.
#include <arm_neon.h>

#include "core/f16.h"
#include "kernels/arm64/arm64_tables.h"
#include "kernels/arm64/attention_neon.h"

namespace keel::arm64 {
namespace {

struct SdotDot {
  static int32x4_t dot(const int8x16x2_t& k, const int8x16x2_t& q) {
    return vdotq_s32(vdotq_s32(vdupq_n_s32(0), k.val[0], q.val[0]), k.val[1], q.val[1]);
  }
};

constexpr uint32_t kBlock = 16;

// Numbers 16h..16h+15 of a group as unsigned bytes: q8's flipped to v + 128.
template <class Rows>
inline uint8x16_t unsigned_half(const uint8_t* group, uint32_t h) {
  if constexpr (Rows::kType == KvType::Q8) {
    return veorq_u8(vld1q_u8(group + 16 * h), vdupq_n_u8(0x80));
  } else {
    const uint8x16_t x = vld1q_u8(group);
    return h == 0 ? vandq_u8(x, vdupq_n_u8(15)) : vshrq_n_u8(x, 4);
  }
}

// One query's coefficients of one group over a block of 16 rows.
struct BlockCoef {
  uint8x16_t high, low;  // byte r: the high / low byte of u_r
  float step;            // S / 65535
  uint32_t sum_u;        // sum of u_r (q8's +128 correction)
};

inline BlockCoef block_coef(const float* p, const float32x4_t d[4]) {
  float32x4_t c[4];
  for (uint32_t k = 0; k < 4; ++k) c[k] = vmulq_f32(vld1q_f32(p + 4 * k), d[k]);
  // Probabilities and scales are >= 0: the largest coefficient is the scale's reference.
  const float largest = vmaxvq_f32(vmaxq_f32(vmaxq_f32(c[0], c[1]), vmaxq_f32(c[2], c[3])));
  const float32x4_t to_u = vdupq_n_f32(largest > 0.0f ? 65535.0f / largest : 0.0f);
  uint32x4_t u[4];
  for (uint32_t k = 0; k < 4; ++k) u[k] = vminq_u32(vcvtnq_u32_f32(vmulq_f32(c[k], to_u)), vdupq_n_u32(65535));
  const uint16x8_t u01 = vcombine_u16(vmovn_u32(u[0]), vmovn_u32(u[1]));
  const uint16x8_t u23 = vcombine_u16(vmovn_u32(u[2]), vmovn_u32(u[3]));
  BlockCoef out;
  out.high = vcombine_u8(vshrn_n_u16(u01, 8), vshrn_n_u16(u23, 8));
  out.low = vcombine_u8(vmovn_u16(u01), vmovn_u16(u23));
  out.step = largest / 65535.0f;
  out.sum_u = vaddvq_u32(vaddq_u32(vaddq_u32(u[0], u[1]), vaddq_u32(u[2], u[3])));
  return out;
}

// G queries' weighted sums (probabilities at p + g * p_stride, outputs at out + g * hd). Rows
// are loaded and interleaved once per block for all of them; each query quantizes its own
// coefficients and keeps its own sums, as the single query (G = 1) does, so its results are
// the same bits for any G.
template <class Rows, uint32_t G>
void weighted_sum_blocks(const float* p, uint64_t p_stride, const uint16_t* v, uint32_t n, uint32_t hd, float* out) {
  const uint32_t groups = hd / 32, row = kv_row_halves(Rows::kType, hd);
  float32x4_t mins[G][kMaxGroups];
  for (uint32_t g = 0; g < G; ++g)
    for (uint32_t b = 0; b < groups; ++b) mins[g][b] = vdupq_n_f32(0.0f);
  for (uint64_t i = 0; i < uint64_t(G) * hd; ++i) out[i] = 0.0f;
  uint32_t j = 0;
  for (; j + kBlock <= n; j += kBlock) {
    const uint16_t* rows = v + uint64_t(j) * row;
    for (uint32_t b = 0; b < groups; ++b) {
      float32x4_t d[4];
      for (uint32_t k = 0; k < 4; ++k) d[k] = load_halves_strided(rows + uint64_t(4 * k) * row + b, row);
      BlockCoef coef[G];
      for (uint32_t g = 0; g < G; ++g) {
        const float* pg = p + g * p_stride + j;
        coef[g] = block_coef(pg, d);
        if constexpr (Rows::kHasMin) {
          for (uint32_t k = 0; k < 4; ++k) {
            const float32x4_t m = load_halves_strided(rows + uint64_t(4 * k) * row + groups + b, row);
            mins[g][b] = vfmaq_f32(mins[g][b], vld1q_f32(pg + 4 * k), m);
          }
        }
      }
      for (uint32_t h = 0; h < 2; ++h) {
        // hi[g][t], lo[g][t]: lane e holds number 16h + 4t + e's sum over the block's rows.
        uint32x4_t hi[G][4], lo[G][4];
        unrolled<G>([&](auto g) { unrolled<4>([&](auto t) { hi[g][t] = lo[g][t] = vdupq_n_u32(0); }); });
        unrolled<4>([&](auto k) {
          const uint16_t* quad = rows + uint64_t(4 * k) * row;
          uint8x16_t r[4];
          for (uint32_t e = 0; e < 4; ++e)
            r[e] = unsigned_half<Rows>(Rows::numbers(quad + uint64_t(e) * row, groups) + b * Rows::kGroupBytes, h);
          // x[t]'s 32-bit lane e: number 4t + e of rows 0..3, one byte each.
          const uint8x16_t z0 = vzip1q_u8(r[0], r[1]), z1 = vzip2q_u8(r[0], r[1]);
          const uint8x16_t z2 = vzip1q_u8(r[2], r[3]), z3 = vzip2q_u8(r[2], r[3]);
          uint8x16_t x[4];
          x[0] = vreinterpretq_u8_u16(vzip1q_u16(vreinterpretq_u16_u8(z0), vreinterpretq_u16_u8(z2)));
          x[1] = vreinterpretq_u8_u16(vzip2q_u16(vreinterpretq_u16_u8(z0), vreinterpretq_u16_u8(z2)));
          x[2] = vreinterpretq_u8_u16(vzip1q_u16(vreinterpretq_u16_u8(z1), vreinterpretq_u16_u8(z3)));
          x[3] = vreinterpretq_u8_u16(vzip2q_u16(vreinterpretq_u16_u8(z1), vreinterpretq_u16_u8(z3)));
          // Element k of the coefficients holds rows 4k..4k+3's bytes.
          unrolled<G>([&](auto g) {
            unrolled<4>([&](auto t) {
              hi[g][t] = vdotq_laneq_u32(hi[g][t], x[t], coef[g].high, decltype(k)::value);
              lo[g][t] = vdotq_laneq_u32(lo[g][t], x[t], coef[g].low, decltype(k)::value);
            });
          });
        });
        unrolled<G>([&](auto g) {
          // sum u (v + 128) <= 16 * 65535 * 255 < 2^28: exact in 32 bits; q8 then takes
          // 128 sum(u) back (modulo 2^32, the true sum fits int32).
          const uint32x4_t bias = vdupq_n_u32(Rows::kType == KvType::Q8 ? 128 * coef[g].sum_u : 0);
          const float32x4_t step = vdupq_n_f32(coef[g].step);
          unrolled<4>([&](auto t) {
            const uint32x4_t sum = vsubq_u32(vaddq_u32(vshlq_n_u32(hi[g][t], 8), lo[g][t]), bias);
            float* o = out + uint64_t(g) * hd + 32 * b + 16 * h + 4 * t;
            vst1q_f32(o, vfmaq_f32(vld1q_f32(o), vcvtq_f32_s32(vreinterpretq_s32_u32(sum)), step));
          });
        });
      }
    }
  }
  if constexpr (Rows::kHasMin) {
    for (uint32_t g = 0; g < G; ++g) {
      for (uint32_t b = 0; b < groups; ++b) {
        const float32x4_t m = vdupq_n_f32(vaddvq_f32(mins[g][b]));
        float* o = out + uint64_t(g) * hd + 32 * b;
        for (uint32_t w = 0; w < 8; ++w) vst1q_f32(o + 4 * w, vaddq_f32(vld1q_f32(o + 4 * w), m));
      }
    }
  }
  // The rows past the last whole block, in f32: out += fma(c, v, m), lane by lane (the row's
  // term rounded once before it meets the sum, as the NEON table adds it).
  for (; j < n; ++j) {
    const uint16_t* vj = v + uint64_t(j) * row;
    const uint8_t* numbers = Rows::numbers(vj, groups);
    for (uint32_t g = 0; g < G; ++g) {
      const float pj = p[g * p_stride + j];
      for (uint32_t b = 0; b < groups; ++b) {
        const float32x4_t c = vdupq_n_f32(pj * f16_to_f32(vj[b]));
        const float32x4_t m = vdupq_n_f32(Rows::kHasMin ? pj * f16_to_f32(vj[groups + b]) : 0.0f);
        const int8x16x2_t x = Rows::group(numbers + b * Rows::kGroupBytes);
        for (uint32_t h = 0; h < 2; ++h) {
          const int16x8_t lo = vmovl_s8(vget_low_s8(x.val[h])), hi = vmovl_high_s8(x.val[h]);
          const int32x4_t w[4] = {vmovl_s16(vget_low_s16(lo)), vmovl_high_s16(lo), vmovl_s16(vget_low_s16(hi)),
                                  vmovl_high_s16(hi)};
          for (uint32_t t = 0; t < 4; ++t) {
            float* o = out + uint64_t(g) * hd + 32 * b + 16 * h + 4 * t;
            vst1q_f32(o, vaddq_f32(vld1q_f32(o), vfmaq_f32(m, c, vcvtq_f32_s32(w[t]))));
          }
        }
      }
    }
  }
}

template <class Rows>
void weighted_sum_group(const float* p, uint64_t p_stride, uint32_t g, const uint16_t* v, uint32_t n, uint32_t hd,
                        float* out) {
  if (!quant_fast_path(hd)) {
    const KvWeightedSumFn one = attention_neon_table().weighted_sum_of(Rows::kType);
    for (uint32_t i = 0; i < g; ++i) one(p + i * p_stride, v, n, hd, out + uint64_t(i) * hd);
    return;
  }
  // Two queries: 16 integer accumulators, the four interleaved vectors and the rows' bytes.
  for_query_blocks<2>(g, [&](uint32_t i, auto size) {
    weighted_sum_blocks<Rows, size>(p + i * p_stride, p_stride, v, n, hd, out + uint64_t(i) * hd);
  });
}

template <class Rows>
void weighted_sum_one(const float* p, const uint16_t* v, uint32_t n, uint32_t hd, float* out) {
  weighted_sum_group<Rows>(p, 0, 1, v, n, hd, out);
}

}  // namespace

const AttentionKernels& attention_dotprod_table() {
  static const AttentionKernels table = [] {
    const AttentionKernels& neon = attention_neon_table();
    return AttentionKernels{"neon-dotprod",
                            neon.scores,
                            neon.weighted_sum,
                            neon.to_half,
                            neon.weighted_sum_more,
                            scores_quant<Q8Rows, SdotDot>,
                            weighted_sum_one<Q8Rows>,
                            scores_quant<Q4Rows, SdotDot>,
                            neon.weighted_sum_q4,
                            neon.scores_group,
                            neon.weighted_sum_group,
                            scores_quant_group<Q8Rows, SdotDot>,
                            weighted_sum_group<Q8Rows>,
                            scores_quant_group<Q4Rows, SdotDot>,
                            neon.weighted_sum_q4_group,
                            neon.rotate_rows};
  }();
  return table;
}

}  // namespace keel::arm64
