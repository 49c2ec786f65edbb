// The loads both AVX2 matmul translation units use (matmul_avx2.cpp, matmul_wide_avx2.cpp), with
// internal linkage for the reason kernels/unaligned_load.h gives.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "kernels/unaligned_load.h"

namespace keel::x86 {
namespace {

inline __m256i loadu256(const void* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
// Eight f16 (a panel half's scales) as f32.
inline __m256 load_f16x8(const uint8_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
// One activation group's 4 int8 in every 32-bit lane: the operand against 4 bytes of 8 rows.
inline __m256i bcast4(const int8_t* q) { return _mm256_set1_epi32(load_i32(q)); }

}  // namespace
}  // namespace keel::x86
