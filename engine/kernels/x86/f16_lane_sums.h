// The f16 attention kernels' row loads and horizontal sums, shared by the AVX2 and the AVX-512
// translation units so that both add in exactly the same order (the grouped-query kernels of
// the AVX-512 table give the AVX2 single-query kernels' bits). Internal linkage on purpose:
// each unit compiles its own copy with its own ISA flags, where one inline function with
// external linkage could be replaced at link time by the other unit's wider encoding.
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace keel {
namespace {  // NOLINT(google-build-namespaces): see above

inline float hsum(__m256 v) {
  __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
  lo = _mm_add_ps(lo, hi);
  lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
  lo = _mm_add_ss(lo, _mm_shuffle_ps(lo, lo, 1));
  return _mm_cvtss_f32(lo);
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

}  // namespace
}  // namespace keel
