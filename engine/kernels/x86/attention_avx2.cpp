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

void scores_avx2(const float* q, const uint16_t* k, uint32_t n, uint32_t hd, float scale, float* s) {
  const uint32_t hd8 = hd & ~7u;
  uint32_t j = 0;
  if (hd8 == hd && hd <= 16) {
    // Small heads, eight keys at a time: eight independent FMA chains instead of one or two
    // FMAs per key and a horizontal sum each (stories260K's 8-wide heads waited on latency).
    // Wider heads keep the per-key loop: its chains are long enough to overlap across keys.
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

}  // namespace

const AttentionKernels* attention_kernels_x86_avx2_table() {
  static const AttentionKernels k{"avx2", scores_avx2, weighted_sum_avx2, to_half_avx2, weighted_sum_more_avx2};
  return &k;
}

}  // namespace keel
