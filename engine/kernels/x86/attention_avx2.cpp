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

void scores_avx2(const float* q, const uint16_t* k, uint32_t n, uint32_t hd, float scale, float* s) {
  const uint32_t hd8 = hd & ~7u;
  for (uint32_t j = 0; j < n; ++j) {
    const uint16_t* kj = k + uint64_t(j) * hd;
    __m256 acc = _mm256_setzero_ps();
    for (uint32_t i = 0; i < hd8; i += 8) {
      const __m256 kv = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kj + i)));
      acc = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), kv, acc);
    }
    float t = hsum(acc);
    for (uint32_t i = hd8; i < hd; ++i) t += q[i] * f16_to_f32(kj[i]);
    s[j] = t * scale;
  }
}

void weighted_sum_avx2(const float* p, const uint16_t* v, uint32_t n, uint32_t hd, float* out) {
  const uint32_t hd8 = hd & ~7u;
  for (uint32_t i = 0; i < hd; ++i) out[i] = 0.0f;
  if (hd8 == hd && hd <= 128) {
    // Keep the whole output row in registers (up to 16 x 8 lanes).
    __m256 acc[16];
    const uint32_t nv = hd / 8;
    for (uint32_t b = 0; b < nv; ++b) acc[b] = _mm256_setzero_ps();
    for (uint32_t j = 0; j < n; ++j) {
      const __m256 pj = _mm256_set1_ps(p[j]);
      const uint16_t* vj = v + uint64_t(j) * hd;
      for (uint32_t b = 0; b < nv; ++b) {
        const __m256 vv = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(vj + 8 * b)));
        acc[b] = _mm256_fmadd_ps(pj, vv, acc[b]);
      }
    }
    for (uint32_t b = 0; b < nv; ++b) _mm256_storeu_ps(out + 8 * b, acc[b]);
    return;
  }
  for (uint32_t j = 0; j < n; ++j) {
    const __m256 pj = _mm256_set1_ps(p[j]);
    const uint16_t* vj = v + uint64_t(j) * hd;
    uint32_t i = 0;
    for (; i < hd8; i += 8) {
      const __m256 vv = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(vj + i)));
      _mm256_storeu_ps(out + i, _mm256_fmadd_ps(pj, vv, _mm256_loadu_ps(out + i)));
    }
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
  static const AttentionKernels k{"avx2", scores_avx2, weighted_sum_avx2, to_half_avx2};
  return &k;
}

}  // namespace keel
