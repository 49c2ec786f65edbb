// The loads both AVX2 matmul translation units use (matmul_avx2.cpp, matmul_wide_avx2.cpp).
// Internal linkage on purpose: each ISA's units are compiled with their own -m flags, and an
// inline function with external linkage shared by an AVX2 and an AVX-512 unit could be merged by
// the linker into the AVX-512 copy, which an AVX2-only CPU cannot run.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace keel::x86 {
namespace {

inline int32_t load_i32(const void* p) {
  int32_t v;
  memcpy(&v, p, 4);
  return v;
}
inline __m256i loadu256(const void* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
// Eight f16 (a panel half's scales) as f32.
inline __m256 load_f16x8(const uint8_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
// One activation group's 4 int8 in every 32-bit lane: the operand against 4 bytes of 8 rows.
inline __m256i bcast4(const int8_t* q) { return _mm256_set1_epi32(load_i32(q)); }

}  // namespace
}  // namespace keel::x86
