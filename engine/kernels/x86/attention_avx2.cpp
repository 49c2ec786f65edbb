// AVX2 + F16C + FMA attention over the f16 cache. head_dim is a multiple of 8 for every model
// we run (64 for SmolLM2, 8 for stories260K); other sizes take a scalar tail.
#include <immintrin.h>

#include "core/f16.h"
#include "kernels/attention.h"

namespace keel {
namespace {

inline float hsum(__m256 v) {
  __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
  lo = _mm_add_ps(lo, hi);
  lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
  lo = _mm_add_ss(lo, _mm_shuffle_ps(lo, lo, 1));
  return _mm_cvtss_f32(lo);
}

// Eight 8-lane sums to one vector of eight totals: [sum(a[0]), ..., sum(a[7])].
inline __m256 sum8(const __m256* a) {
  const __m256 h01 = _mm256_hadd_ps(a[0], a[1]), h23 = _mm256_hadd_ps(a[2], a[3]);
  const __m256 h45 = _mm256_hadd_ps(a[4], a[5]), h67 = _mm256_hadd_ps(a[6], a[7]);
  const __m256 h03 = _mm256_hadd_ps(h01, h23), h47 = _mm256_hadd_ps(h45, h67);
  return _mm256_add_ps(_mm256_permute2f128_ps(h03, h47, 0x20), _mm256_permute2f128_ps(h03, h47, 0x31));
}

inline __m256 load_half8(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// Eight keys' 8-lane partial sums to their eight totals, in key order, each added exactly as
// hsum adds one vector: ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)). A score is then bit
// for bit the per-key loop's, however many keys are taken together.
inline __m256 hsum8_in_order(const __m256* a) {
  __m256 m[4];  // m[r] = [key 2r: lo + hi | key 2r+1: lo + hi]
  for (int r = 0; r < 4; ++r) {
    m[r] = _mm256_add_ps(_mm256_permute2f128_ps(a[2 * r], a[2 * r + 1], 0x20),
                         _mm256_permute2f128_ps(a[2 * r], a[2 * r + 1], 0x31));
  }
  // Per 128-bit lane: [k(m0 + m2), k(m1 + m3), k'(m0 + m2), k'(m1 + m3)], keys 0,2 | 1,3 and 4,6 | 5,7.
  const __m256 p01 = _mm256_add_ps(_mm256_shuffle_ps(m[0], m[1], _MM_SHUFFLE(1, 0, 1, 0)),
                                   _mm256_shuffle_ps(m[0], m[1], _MM_SHUFFLE(3, 2, 3, 2)));
  const __m256 p23 = _mm256_add_ps(_mm256_shuffle_ps(m[2], m[3], _MM_SHUFFLE(1, 0, 1, 0)),
                                   _mm256_shuffle_ps(m[2], m[3], _MM_SHUFFLE(3, 2, 3, 2)));
  // Totals of keys [0, 2, 4, 6 | 1, 3, 5, 7], then in key order.
  const __m256 t = _mm256_add_ps(_mm256_shuffle_ps(p01, p23, _MM_SHUFFLE(2, 0, 2, 0)),
                                 _mm256_shuffle_ps(p01, p23, _MM_SHUFFLE(3, 1, 3, 1)));
  return _mm256_permutevar8x32_ps(t, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

void scores_avx2(const float* q, const uint16_t* k, uint32_t n, uint32_t hd, float scale, float* s) {
  const uint32_t hd8 = hd & ~7u;
  uint32_t j = 0;
  if (hd8 == hd && hd <= 16) {
    // Small heads, eight keys at a time: eight independent FMA chains instead of one or two
    // FMAs per key and a horizontal sum each (stories260K's 8-wide heads waited on latency).
    const __m256 sc = _mm256_set1_ps(scale);
    for (; j + 8 <= n; j += 8) {
      const uint16_t* kj = k + uint64_t(j) * hd;
      __m256 acc[8];
      for (uint32_t r = 0; r < 8; ++r) acc[r] = _mm256_setzero_ps();
      for (uint32_t i = 0; i < hd; i += 8) {
        const __m256 qv = _mm256_loadu_ps(q + i);
        for (uint32_t r = 0; r < 8; ++r) acc[r] = _mm256_fmadd_ps(qv, load_half8(kj + uint64_t(r) * hd + i), acc[r]);
      }
      _mm256_storeu_ps(s + j, _mm256_mul_ps(sum8(acc), sc));
    }
  }
  if (hd8 == hd && hd > 16) {
    // Wider heads, eight keys at a time: the per-key loop's FMA chains and sums (hsum8_in_order),
    // eight chains in flight and one shuffle tree for eight keys instead of one per key.
    const __m256 sc = _mm256_set1_ps(scale);
    for (; j + 8 <= n; j += 8) {
      const uint16_t* kj = k + uint64_t(j) * hd;
      __m256 acc[8];
      for (uint32_t r = 0; r < 8; ++r) acc[r] = _mm256_setzero_ps();
      for (uint32_t i = 0; i < hd; i += 8) {
        const __m256 qv = _mm256_loadu_ps(q + i);
        for (uint32_t r = 0; r < 8; ++r) acc[r] = _mm256_fmadd_ps(qv, load_half8(kj + uint64_t(r) * hd + i), acc[r]);
      }
      _mm256_storeu_ps(s + j, _mm256_mul_ps(hsum8_in_order(acc), sc));
    }
  }
  for (; j < n; ++j) {
    const uint16_t* kj = k + uint64_t(j) * hd;
    __m256 acc = _mm256_setzero_ps();
    for (uint32_t i = 0; i < hd8; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), load_half8(kj + i), acc);
    float t = hsum(acc);
    for (uint32_t i = hd8; i < hd; ++i) t += q[i] * f16_to_f32(kj[i]);
    s[j] = t * scale;
  }
}

void weighted_sum_avx2(const float* p, const uint16_t* v, uint32_t n, uint32_t hd, float* out) {
  const uint32_t hd8 = hd & ~7u;
  for (uint32_t i = 0; i < hd; ++i) out[i] = 0.0f;
  if (hd == 8) {
    // One vector per value row: four rows in flight so the adds do not wait on each other.
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    uint32_t j = 0;
    for (; j + 4 <= n; j += 4) {
      const uint16_t* vj = v + uint64_t(j) * 8;
      a0 = _mm256_fmadd_ps(_mm256_set1_ps(p[j]), load_half8(vj), a0);
      a1 = _mm256_fmadd_ps(_mm256_set1_ps(p[j + 1]), load_half8(vj + 8), a1);
      a2 = _mm256_fmadd_ps(_mm256_set1_ps(p[j + 2]), load_half8(vj + 16), a2);
      a3 = _mm256_fmadd_ps(_mm256_set1_ps(p[j + 3]), load_half8(vj + 24), a3);
    }
    for (; j < n; ++j) a0 = _mm256_fmadd_ps(_mm256_set1_ps(p[j]), load_half8(v + uint64_t(j) * 8), a0);
    _mm256_storeu_ps(out, _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
    return;
  }
  if (hd8 == hd && hd <= 128) {
    // Keep the whole output row in registers (up to 16 x 8 lanes).
    __m256 acc[16];
    const uint32_t nv = hd / 8;
    for (uint32_t b = 0; b < nv; ++b) acc[b] = _mm256_setzero_ps();
    for (uint32_t j = 0; j < n; ++j) {
      const __m256 pj = _mm256_set1_ps(p[j]);
      const uint16_t* vj = v + uint64_t(j) * hd;
      for (uint32_t b = 0; b < nv; ++b) acc[b] = _mm256_fmadd_ps(pj, load_half8(vj + 8 * b), acc[b]);
    }
    for (uint32_t b = 0; b < nv; ++b) _mm256_storeu_ps(out + 8 * b, acc[b]);
    return;
  }
  for (uint32_t j = 0; j < n; ++j) {
    const __m256 pj = _mm256_set1_ps(p[j]);
    const uint16_t* vj = v + uint64_t(j) * hd;
    uint32_t i = 0;
    for (; i < hd8; i += 8)
      _mm256_storeu_ps(out + i, _mm256_fmadd_ps(pj, load_half8(vj + i), _mm256_loadu_ps(out + i)));
    for (; i < hd; ++i) out[i] += p[j] * f16_to_f32(vj[i]);
  }
}

void weighted_sum_more_avx2(const float* p, const uint16_t* v, uint32_t n, uint32_t hd, float* out) {
  const uint32_t hd8 = hd & ~7u;
  if (hd8 == hd && hd <= 128) {
    // weighted_sum's register path: one fused chain per output, in key order.
    __m256 acc[16];
    const uint32_t nv = hd / 8;
    for (uint32_t b = 0; b < nv; ++b) acc[b] = _mm256_loadu_ps(out + 8 * b);
    for (uint32_t j = 0; j < n; ++j) {
      const __m256 pj = _mm256_set1_ps(p[j]);
      const uint16_t* vj = v + uint64_t(j) * hd;
      for (uint32_t b = 0; b < nv; ++b) acc[b] = _mm256_fmadd_ps(pj, load_half8(vj + 8 * b), acc[b]);
    }
    for (uint32_t b = 0; b < nv; ++b) _mm256_storeu_ps(out + 8 * b, acc[b]);
    return;
  }
  for (uint32_t j = 0; j < n; ++j) {
    const __m256 pj = _mm256_set1_ps(p[j]);
    const uint16_t* vj = v + uint64_t(j) * hd;
    uint32_t i = 0;
    for (; i < hd8; i += 8)
      _mm256_storeu_ps(out + i, _mm256_fmadd_ps(pj, load_half8(vj + i), _mm256_loadu_ps(out + i)));
    for (; i < hd; ++i) out[i] += p[j] * f16_to_f32(vj[i]);
  }
}

void to_half_avx2(const float* x, uint32_t n, uint16_t* out) {
  uint32_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), h);
  }
  for (; i < n; ++i) out[i] = f32_to_f16(x[i]);
}

// Quantized rows (core/kv_type.h) with 32-number groups; other group sizes take the ref kernels.
inline __m256 load_i8x8(const int8_t* p) {
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}
inline __m256 load_u8x8(__m128i bytes) { return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(bytes)); }

void scores_q8_avx2(const float* q, const uint16_t* k, uint32_t n, uint32_t hd, float scale, float* s) {
  if (kv_group(hd) != 32) return attention_kernels_ref().scores_q8(q, k, n, hd, scale, s);
  const uint32_t groups = hd / 32, row = kv_row_halves(KvType::Q8, hd);
  for (uint32_t j = 0; j < n; ++j) {
    const uint16_t* kj = k + uint64_t(j) * row;
    const int8_t* qk = reinterpret_cast<const int8_t*>(kj + groups);
    __m256 acc = _mm256_setzero_ps();
    for (uint32_t b = 0; b < groups; ++b) {
      const float* qb = q + b * 32;
      const int8_t* kb = qk + b * 32;
      __m256 p0 = _mm256_mul_ps(_mm256_loadu_ps(qb), load_i8x8(kb));
      __m256 p1 = _mm256_mul_ps(_mm256_loadu_ps(qb + 8), load_i8x8(kb + 8));
      p0 = _mm256_fmadd_ps(_mm256_loadu_ps(qb + 16), load_i8x8(kb + 16), p0);
      p1 = _mm256_fmadd_ps(_mm256_loadu_ps(qb + 24), load_i8x8(kb + 24), p1);
      acc = _mm256_fmadd_ps(_mm256_set1_ps(f16_to_f32(kj[b])), _mm256_add_ps(p0, p1), acc);
    }
    s[j] = hsum(acc) * scale;
  }
}

void weighted_sum_q8_avx2(const float* p, const uint16_t* v, uint32_t n, uint32_t hd, float* out) {
  if (kv_group(hd) != 32 || hd > 128) return attention_kernels_ref().weighted_sum_q8(p, v, n, hd, out);
  const uint32_t groups = hd / 32, row = kv_row_halves(KvType::Q8, hd);
  __m256 acc[16];
  for (uint32_t b = 0; b < 4 * groups; ++b) acc[b] = _mm256_setzero_ps();
  for (uint32_t j = 0; j < n; ++j) {
    const uint16_t* vj = v + uint64_t(j) * row;
    const int8_t* qv = reinterpret_cast<const int8_t*>(vj + groups);
    for (uint32_t b = 0; b < groups; ++b) {
      const __m256 c = _mm256_set1_ps(p[j] * f16_to_f32(vj[b]));
      const int8_t* vb = qv + b * 32;
      __m256* a = acc + 4 * b;
      a[0] = _mm256_fmadd_ps(c, load_i8x8(vb), a[0]);
      a[1] = _mm256_fmadd_ps(c, load_i8x8(vb + 8), a[1]);
      a[2] = _mm256_fmadd_ps(c, load_i8x8(vb + 16), a[2]);
      a[3] = _mm256_fmadd_ps(c, load_i8x8(vb + 24), a[3]);
    }
  }
  for (uint32_t b = 0; b < 4 * groups; ++b) _mm256_storeu_ps(out + 8 * b, acc[b]);
}

void scores_q4_avx2(const float* q, const uint16_t* k, uint32_t n, uint32_t hd, float scale, float* s) {
  if (kv_group(hd) != 32 || hd > 512) return attention_kernels_ref().scores_q4(q, k, n, hd, scale, s);
  const uint32_t groups = hd / 32, row = kv_row_halves(KvType::Q4, hd);
  // x = d * nibble + m, so q.x = d * (q . nibbles) + m * sum(q) per group.
  float qsum[16];
  for (uint32_t b = 0; b < groups; ++b) {
    float t = 0.0f;
    for (uint32_t i = 0; i < 32; ++i) t += q[b * 32 + i];
    qsum[b] = t;
  }
  const __m128i low4 = _mm_set1_epi8(15);
  for (uint32_t j = 0; j < n; ++j) {
    const uint16_t* kj = k + uint64_t(j) * row;
    const uint8_t* qk = reinterpret_cast<const uint8_t*>(kj + 2 * groups);
    __m256 acc = _mm256_setzero_ps();
    float mins = 0.0f;
    for (uint32_t b = 0; b < groups; ++b) {
      const float* qb = q + b * 32;
      const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qk + b * 16));
      const __m128i lo = _mm_and_si128(x, low4), hi = _mm_and_si128(_mm_srli_epi16(x, 4), low4);
      __m256 p0 = _mm256_mul_ps(_mm256_loadu_ps(qb), load_u8x8(lo));
      __m256 p1 = _mm256_mul_ps(_mm256_loadu_ps(qb + 8), load_u8x8(_mm_srli_si128(lo, 8)));
      p0 = _mm256_fmadd_ps(_mm256_loadu_ps(qb + 16), load_u8x8(hi), p0);
      p1 = _mm256_fmadd_ps(_mm256_loadu_ps(qb + 24), load_u8x8(_mm_srli_si128(hi, 8)), p1);
      acc = _mm256_fmadd_ps(_mm256_set1_ps(f16_to_f32(kj[b])), _mm256_add_ps(p0, p1), acc);
      mins += f16_to_f32(kj[groups + b]) * qsum[b];
    }
    s[j] = (hsum(acc) + mins) * scale;
  }
}

void weighted_sum_q4_avx2(const float* p, const uint16_t* v, uint32_t n, uint32_t hd, float* out) {
  if (kv_group(hd) != 32 || hd > 128) return attention_kernels_ref().weighted_sum_q4(p, v, n, hd, out);
  const uint32_t groups = hd / 32, row = kv_row_halves(KvType::Q4, hd);
  const __m128i low4 = _mm_set1_epi8(15);
  __m256 acc[16];
  float mins[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (uint32_t b = 0; b < 4 * groups; ++b) acc[b] = _mm256_setzero_ps();
  for (uint32_t j = 0; j < n; ++j) {
    const uint16_t* vj = v + uint64_t(j) * row;
    const uint8_t* qv = reinterpret_cast<const uint8_t*>(vj + 2 * groups);
    for (uint32_t b = 0; b < groups; ++b) {
      const __m256 c = _mm256_set1_ps(p[j] * f16_to_f32(vj[b]));
      mins[b] += p[j] * f16_to_f32(vj[groups + b]);
      const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qv + b * 16));
      const __m128i lo = _mm_and_si128(x, low4), hi = _mm_and_si128(_mm_srli_epi16(x, 4), low4);
      __m256* a = acc + 4 * b;
      a[0] = _mm256_fmadd_ps(c, load_u8x8(lo), a[0]);
      a[1] = _mm256_fmadd_ps(c, load_u8x8(_mm_srli_si128(lo, 8)), a[1]);
      a[2] = _mm256_fmadd_ps(c, load_u8x8(hi), a[2]);
      a[3] = _mm256_fmadd_ps(c, load_u8x8(_mm_srli_si128(hi, 8)), a[3]);
    }
  }
  for (uint32_t b = 0; b < 4 * groups; ++b) {
    _mm256_storeu_ps(out + 8 * b, _mm256_add_ps(acc[b], _mm256_set1_ps(mins[b / 4])));
  }
}

}  // namespace

const AttentionKernels* attention_kernels_x86_avx2_table() {
  static const AttentionKernels k{
      "avx2",         scores_avx2,          weighted_sum_avx2, to_half_avx2,        weighted_sum_more_avx2,
      scores_q8_avx2, weighted_sum_q8_avx2, scores_q4_avx2,    weighted_sum_q4_avx2};
  return &k;
}

}  // namespace keel
