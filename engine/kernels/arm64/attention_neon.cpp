// NEON attention over the cache (Armv8.0: f16 <-> f32 with FCVTL/FCVTN, no f16 arithmetic).
//
// Every kernel is a template over the number G of queries it takes together; the single-query
// entries are G = 1 and the grouped entries run blocks of queries through the same code, each
// row loaded and converted once for the block. Per query the operations are the same for any G
// and in the same order, so a grouped query's results are its single-query bits.
//
//   f16 scores: keys four at a time (two for blocks of three or four queries, whose chains
//     would not fit the registers with four); per key two 4-lane FMA chains over the head
//     (lanes 0..3 and 4..7 of each 8 numbers), added and reduced pairwise, the last
//     head_dim % 4 numbers added after; the last block of keys repeats its last key, so a score
//     does not depend on how many keys one call or one step takes.
//   f16 weighted sums: one FMA chain per output lane over the rows in order, in column passes
//     over blocks of rows (the chain carried in `out` between them, which is exact), so
//     weighted_sum_more continues weighted_sum bit for bit for every head_dim.
//   q8/q4 scores: the query quantized to int8 per group of 32 (attention_neon.h), exact int32
//     dot products (SMULL/SMLAL pairs, widened pairwise); the dotprod table's SDOT gives the
//     same integers and so the same scores.
//   q8/q4 weighted sums: f32, out = sum_j (p_j d_j) v_j (+ p_j m_j for q4), the numbers widened
//     to f32 and added into the output chains row by row.
#include <arm_neon.h>

#include "core/f16.h"
#include "kernels/arm64/arm64_tables.h"
#include "kernels/arm64/attention_neon.h"

namespace keel::arm64 {
namespace {

// ---- f16 rows ----

// Scores of G queries (query g at q + g * hd, its scores at s + g * s_stride), K keys a step
// (4 or 2). With K = 2 the two keys stand in for all four lanes of the reduction, so every key
// goes through the same additions as with K = 4.
template <uint32_t G, uint32_t K = 4>
void scores_f16_rows(const float* q, const uint16_t* k, uint32_t n, uint32_t hd, float scale, float* s,
                     uint64_t s_stride) {
  static_assert(K == 4 || K == 2);
  const uint32_t hd8 = hd & ~7u, hd4 = hd & ~3u;
  for (uint32_t j = 0; j < n; j += K) {
    const uint32_t keys = n - j < K ? n - j : K;
    const uint16_t* kr[4];
    for (uint32_t r = 0; r < 4; ++r) kr[r] = k + uint64_t(j + (r % K < keys ? r % K : keys - 1)) * hd;
    float32x4_t a0[G][K], a1[G][K];
    unrolled<G>([&](auto g) { unrolled<K>([&](auto r) { a0[g][r] = a1[g][r] = vdupq_n_f32(0.0f); }); });
    uint32_t i = 0;
    for (; i < hd8; i += 8) {
      unrolled<K>([&](auto r) {
        const uint16x8_t h = vld1q_u16(kr[r] + i);
        const float32x4_t lo = vcvt_f32_f16(vreinterpret_f16_u16(vget_low_u16(h)));
        const float32x4_t hi = vcvt_f32_f16(vreinterpret_f16_u16(vget_high_u16(h)));
        unrolled<G>([&](auto g) {
          a0[g][r] = vfmaq_f32(a0[g][r], vld1q_f32(q + uint64_t(g) * hd + i), lo);
          a1[g][r] = vfmaq_f32(a1[g][r], vld1q_f32(q + uint64_t(g) * hd + i + 4), hi);
        });
      });
    }
    if (i < hd4) {
      unrolled<K>([&](auto r) {
        const float32x4_t lo = load_half4(kr[r] + i);
        unrolled<G>([&](auto g) { a0[g][r] = vfmaq_f32(a0[g][r], vld1q_f32(q + uint64_t(g) * hd + i), lo); });
      });
    }
    unrolled<G>([&](auto g) {
      float32x4_t t[4];
      unrolled<4>([&](auto r) { t[r] = vaddq_f32(a0[g][r % K], a1[g][r % K]); });
      // Per key (l0 + l1) + (l2 + l3), four keys in one vector.
      float32x4_t tot = vpaddq_f32(vpaddq_f32(t[0], t[1]), vpaddq_f32(t[2], t[3]));
      for (uint32_t e = hd4; e < hd; ++e) {
        const float32x4_t kv = halves_of(kr, e);
        tot = vaddq_f32(tot, vmulq_n_f32(kv, q[uint64_t(g) * hd + e]));
      }
      const float32x4_t v = vmulq_n_f32(tot, scale);
      float* out = s + g * s_stride + j;
      if (keys == 4) {
        vst1q_f32(out, v);
      } else if (keys == 2) {
        vst1_f32(out, vget_low_f32(v));
      } else {
        float lanes[4];
        vst1q_f32(lanes, v);
        for (uint32_t r = 0; r < keys; ++r) out[r] = lanes[r];
      }
    });
  }
}

void scores_f16(const float* q, const uint16_t* k, uint32_t n, uint32_t hd, float scale, float* s) {
  scores_f16_rows<1>(q, k, n, hd, scale, s, 0);
}

// Up to four queries at a time, so that Gemma 3's group of four (and SmolLM2's three) reads
// each key once: 16 accumulators for two queries of four keys, or four queries of two keys,
// beside the keys' halves and the query vectors, fit the 32 registers.
void scores_f16_group(const float* q, uint32_t g, const uint16_t* k, uint32_t n, uint32_t hd, float scale, float* s,
                      uint64_t s_stride) {
  for_query_blocks<4>(g, [&](uint32_t i, auto size) {
    constexpr uint32_t kKeys = size <= 2 ? 4 : 2;
    scores_f16_rows<size, kKeys>(q + uint64_t(i) * hd, k, n, hd, scale, s + i * s_stride, s_stride);
  });
}

// Rows per block of the weighted sums, which make one pass over a block per column strip: the
// block stays in L1 between the passes.
constexpr uint32_t kRowBlock = 64;

// W vectors of 4 lanes from lane c on, G queries (probabilities at p + g * p_stride, outputs
// at out + g * hd), over rows [j0, j1): each lane's chain continues from `out`.
template <uint32_t G, uint32_t W>
void weighted_sum_f16_lanes(const float* p, uint64_t p_stride, const uint16_t* v, uint32_t j0, uint32_t j1, uint32_t hd,
                            uint32_t c, float* out) {
  float32x4_t acc[G][W];
  unrolled<G>([&](auto g) { unrolled<W>([&](auto w) { acc[g][w] = vld1q_f32(out + uint64_t(g) * hd + c + 4 * w); }); });
  for (uint32_t j = j0; j < j1; ++j) {
    float32x4_t pj[G];
    unrolled<G>([&](auto g) { pj[g] = vdupq_n_f32(p[g * p_stride + j]); });
    const uint16_t* vj = v + uint64_t(j) * hd + c;
    unrolled<W>([&](auto w) {
      const float32x4_t x = load_half4(vj + 4 * w);
      unrolled<G>([&](auto g) { acc[g][w] = vfmaq_f32(acc[g][w], pj[g], x); });
    });
  }
  unrolled<G>([&](auto g) { unrolled<W>([&](auto w) { vst1q_f32(out + uint64_t(g) * hd + c + 4 * w, acc[g][w]); }); });
}

// The lanes past the last whole vector: the same fused chain per lane, one lane at a time.
template <uint32_t G>
void weighted_sum_f16_tail(const float* p, uint64_t p_stride, const uint16_t* v, uint32_t j0, uint32_t j1, uint32_t hd,
                           uint32_t c, float* out) {
  for (uint32_t g = 0; g < G; ++g) {
    for (uint32_t e = c; e < hd; ++e) {
      float acc = out[uint64_t(g) * hd + e];
      for (uint32_t j = j0; j < j1; ++j)
        acc = __builtin_fmaf(p[g * p_stride + j], f16_to_f32(v[uint64_t(j) * hd + e]), acc);
      out[uint64_t(g) * hd + e] = acc;
    }
  }
}

// out[g] += sum_j p_j v_j for G queries; the chains continue from `out`.
template <uint32_t G>
void weighted_sum_f16_more(const float* p, uint64_t p_stride, const uint16_t* v, uint32_t n, uint32_t hd, float* out) {
  // Strips as wide as the registers allow: 64 lanes for one query, 32 for two, 16 for three or
  // four.
  constexpr uint32_t W = G == 1 ? 16 : G == 2 ? 8 : 4;
  for (uint32_t j0 = 0; j0 < n; j0 += kRowBlock) {
    const uint32_t j1 = n - j0 < kRowBlock ? n : j0 + kRowBlock;
    uint32_t c = 0;
    for (; c + 4 * W <= hd; c += 4 * W) weighted_sum_f16_lanes<G, W>(p, p_stride, v, j0, j1, hd, c, out);
    for (; c + 4 <= hd; c += 4) weighted_sum_f16_lanes<G, 1>(p, p_stride, v, j0, j1, hd, c, out);
    if (c < hd) weighted_sum_f16_tail<G>(p, p_stride, v, j0, j1, hd, c, out);
  }
}

void weighted_sum_f16(const float* p, const uint16_t* v, uint32_t n, uint32_t hd, float* out) {
  for (uint32_t i = 0; i < hd; ++i) out[i] = 0.0f;
  weighted_sum_f16_more<1>(p, 0, v, n, hd, out);
}

void weighted_sum_more_f16(const float* p, const uint16_t* v, uint32_t n, uint32_t hd, float* out) {
  weighted_sum_f16_more<1>(p, 0, v, n, hd, out);
}

void weighted_sum_f16_group(const float* p, uint64_t p_stride, uint32_t g, const uint16_t* v, uint32_t n, uint32_t hd,
                            float* out) {
  for (uint64_t i = 0; i < uint64_t(g) * hd; ++i) out[i] = 0.0f;
  for_query_blocks<4>(g, [&](uint32_t i, auto size) {
    weighted_sum_f16_more<size>(p + i * p_stride, p_stride, v, n, hd, out + uint64_t(i) * hd);
  });
}

void to_half_neon(const float* x, uint32_t n, uint16_t* out) {
  // FCVTN rounds by FPCR, round to nearest even unless a caller changed it (none does).
  uint32_t i = 0;
  for (; i + 4 <= n; i += 4) vst1_u16(out + i, vreinterpret_u16_f16(vcvt_f16_f32(vld1q_f32(x + i))));
  for (; i < n; ++i) out[i] = f32_to_f16(x[i]);
}

// f16 rows turned by one set of RoPE angles, four pairs a vector: products rounded one by one
// (the engine is built without contraction on Arm) and halves converted by FCVTL / FCVTN, so
// the bits are the scalar rope_rotate_rows'. Interleaved pairs are split and joined by LD2 / ST2.
void rotate_rows_neon(uint16_t* rows, uint32_t n, uint32_t head_dim, uint32_t pairs, bool halves, const float* cos,
                      const float* sin) {
  auto turn = [&](float32x4_t x0, float32x4_t x1, uint32_t i, float32x4_t& a, float32x4_t& b) {
    const float32x4_t c = vld1q_f32(cos + i), s = vld1q_f32(sin + i);
    a = vsubq_f32(vmulq_f32(x0, c), vmulq_f32(x1, s));
    b = vaddq_f32(vmulq_f32(x0, s), vmulq_f32(x1, c));
  };
  auto widen = [](uint16x4_t h) { return vcvt_f32_f16(vreinterpret_f16_u16(h)); };
  auto narrow = [](float32x4_t f) { return vreinterpret_u16_f16(vcvt_f16_f32(f)); };
  for (uint32_t r = 0; r < n; ++r) {
    uint16_t* row = rows + uint64_t(r) * head_dim;
    uint32_t i = 0;
    for (; i + 4 <= pairs; i += 4) {
      float32x4_t a, b;
      if (halves) {
        turn(widen(vld1_u16(row + i)), widen(vld1_u16(row + pairs + i)), i, a, b);
        vst1_u16(row + i, narrow(a));
        vst1_u16(row + pairs + i, narrow(b));
      } else {
        const uint16x4x2_t xy = vld2_u16(row + 2 * i);
        turn(widen(xy.val[0]), widen(xy.val[1]), i, a, b);
        vst2_u16(row + 2 * i, uint16x4x2_t{{narrow(a), narrow(b)}});
      }
    }
    for (; i < pairs; ++i) {
      const uint32_t ia = halves ? i : 2 * i, ib = halves ? i + pairs : 2 * i + 1;
      const float x0 = f16_to_f32(row[ia]), x1 = f16_to_f32(row[ib]);
      row[ia] = f32_to_f16(x0 * cos[i] - x1 * sin[i]);
      row[ib] = f32_to_f16(x0 * sin[i] + x1 * cos[i]);
    }
  }
}

// ---- quantized rows ----

// The exact int32 dot product of a group: SMULL/SMLAL pairs (|k|, |q| <= 127, so a pair's sum
// fits int16), then widened pairwise.
struct SmullDot {
  static int32x4_t dot(const int8x16x2_t& k, const int8x16x2_t& q) {
    const int16x8_t a = vmlal_high_s8(vmull_s8(vget_low_s8(k.val[0]), vget_low_s8(q.val[0])), k.val[0], q.val[0]);
    const int16x8_t b = vmlal_high_s8(vmull_s8(vget_low_s8(k.val[1]), vget_low_s8(q.val[1])), k.val[1], q.val[1]);
    return vpadalq_s16(vpaddlq_s16(a), b);
  }
};

// A group's numbers 16h..16h+15 as four f32 vectors.
inline void widen16(const int8x16_t x, float32x4_t out[4]) {
  const int16x8_t lo = vmovl_s8(vget_low_s8(x)), hi = vmovl_high_s8(x);
  out[0] = vcvtq_f32_s32(vmovl_s16(vget_low_s16(lo)));
  out[1] = vcvtq_f32_s32(vmovl_high_s16(lo));
  out[2] = vcvtq_f32_s32(vmovl_s16(vget_low_s16(hi)));
  out[3] = vcvtq_f32_s32(vmovl_high_s16(hi));
}

// Weighted sums of G queries over quantized rows: per group and half group (16 lanes, four
// vectors), rows in blocks of kRowBlock, each lane's chain over the rows in order carried in
// `out`. q8 adds (p_j d_j) v_j with one FMA. q4 adds the row's whole term, fma(p_j d_j, v_j,
// p_j m_j), rounded once before it meets the sum: the scaled numbers and the minima are each
// far larger than the values they stand for (a group with an outlier has d v ~ -m ~ 25 where
// x ~ 1), so summing them in separate chains would round at their size n times and lose the
// difference.
template <class Rows, uint32_t G>
void weighted_sum_quant_rows(const float* p, uint64_t p_stride, const uint16_t* v, uint32_t n, uint32_t hd,
                             float* out) {
  const uint32_t groups = hd / 32, row = kv_row_halves(Rows::kType, hd);
  for (uint64_t i = 0; i < uint64_t(G) * hd; ++i) out[i] = 0.0f;
  for (uint32_t j0 = 0; j0 < n; j0 += kRowBlock) {
    const uint32_t j1 = n - j0 < kRowBlock ? n : j0 + kRowBlock;
    for (uint32_t b = 0; b < groups; ++b) {
      for (uint32_t h = 0; h < 2; ++h) {
        float32x4_t acc[G][4];
        unrolled<G>([&](auto g) {
          unrolled<4>([&](auto w) { acc[g][w] = vld1q_f32(out + uint64_t(g) * hd + 32 * b + 16 * h + 4 * w); });
        });
        for (uint32_t j = j0; j < j1; ++j) {
          const uint16_t* vj = v + uint64_t(j) * row;
          const float d = f16_to_f32(vj[b]);
          const float m = Rows::kHasMin ? f16_to_f32(vj[groups + b]) : 0.0f;
          float32x4_t x[4];
          widen16(Rows::group(Rows::numbers(vj, groups) + b * Rows::kGroupBytes).val[h], x);
          unrolled<G>([&](auto g) {
            const float pj = p[g * p_stride + j];
            const float32x4_t c = vdupq_n_f32(pj * d);
            if constexpr (Rows::kHasMin) {
              const float32x4_t pm = vdupq_n_f32(pj * m);
              unrolled<4>([&](auto w) { acc[g][w] = vaddq_f32(acc[g][w], vfmaq_f32(pm, c, x[w])); });
            } else {
              unrolled<4>([&](auto w) { acc[g][w] = vfmaq_f32(acc[g][w], c, x[w]); });
            }
          });
        }
        unrolled<G>([&](auto g) {
          unrolled<4>([&](auto w) { vst1q_f32(out + uint64_t(g) * hd + 32 * b + 16 * h + 4 * w, acc[g][w]); });
        });
      }
    }
  }
}

template <class Rows>
void weighted_sum_quant_group(const float* p, uint64_t p_stride, uint32_t g, const uint16_t* v, uint32_t n, uint32_t hd,
                              float* out) {
  if (!quant_fast_path(hd)) {
    const KvWeightedSumFn one = attention_kernels_ref().weighted_sum_of(Rows::kType);
    for (uint32_t i = 0; i < g; ++i) one(p + i * p_stride, v, n, hd, out + uint64_t(i) * hd);
    return;
  }
  // Three queries: 12 accumulators, 4 widened vectors and the coefficients.
  for_query_blocks<3>(g, [&](uint32_t i, auto size) {
    weighted_sum_quant_rows<Rows, size>(p + i * p_stride, p_stride, v, n, hd, out + uint64_t(i) * hd);
  });
}

template <class Rows>
void weighted_sum_quant(const float* p, const uint16_t* v, uint32_t n, uint32_t hd, float* out) {
  weighted_sum_quant_group<Rows>(p, 0, 1, v, n, hd, out);
}

}  // namespace

const AttentionKernels& attention_neon_table() {
  static const AttentionKernels table{"neon",
                                      scores_f16,
                                      weighted_sum_f16,
                                      to_half_neon,
                                      weighted_sum_more_f16,
                                      scores_quant<Q8Rows, SmullDot>,
                                      weighted_sum_quant<Q8Rows>,
                                      scores_quant<Q4Rows, SmullDot>,
                                      weighted_sum_quant<Q4Rows>,
                                      scores_f16_group,
                                      weighted_sum_f16_group,
                                      scores_quant_group<Q8Rows, SmullDot>,
                                      weighted_sum_quant_group<Q8Rows>,
                                      scores_quant_group<Q4Rows, SmullDot>,
                                      weighted_sum_quant_group<Q4Rows>,
                                      rotate_rows_neon};
  return table;
}

}  // namespace keel::arm64
