// The loads both AVX-512 matmul translation units use (matmul_avx512.cpp, matmul_wide_avx512.cpp),
// with internal linkage for the reason kernels/unaligned_load.h gives.
#pragma once

#include <cstdint>

#include "kernels/unaligned_load.h"
#include "kernels/x86/avx512_intrin.h"

namespace keel::x86 {
namespace {

inline __m512i load512(const void* p) { return _mm512_loadu_si512(p); }
// Sixteen f16 (a panel's scales) as f32.
inline __m512 load_f16x16(const uint8_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
// One activation group's 4 int8 in every 32-bit lane: the operand against 4 bytes of 16 rows.
inline __m512i bcast4(const int8_t* q) { return _mm512_set1_epi32(load_i32(q)); }

}  // namespace
}  // namespace keel::x86
