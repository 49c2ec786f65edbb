// The loads both AVX-512 matmul translation units use (matmul_avx512.cpp, matmul_wide_avx512.cpp).
// Internal linkage on purpose: an inline function with external linkage shared with the AVX2
// units could be merged by the linker into this copy, which an AVX2-only CPU cannot run.
#pragma once

#include <cstdint>
#include <cstring>

#include "kernels/x86/avx512_intrin.h"

namespace keel::x86 {
namespace {

inline int32_t load_i32(const void* p) {
  int32_t v;
  memcpy(&v, p, 4);
  return v;
}
inline __m512i load512(const void* p) { return _mm512_loadu_si512(p); }
// Sixteen f16 (a panel's scales) as f32.
inline __m512 load_f16x16(const uint8_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
// One activation group's 4 int8 in every 32-bit lane: the operand against 4 bytes of 16 rows.
inline __m512i bcast4(const int8_t* q) { return _mm512_set1_epi32(load_i32(q)); }

}  // namespace
}  // namespace keel::x86
