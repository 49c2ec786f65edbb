// The attention query quantized for integer scores against a quantized KV cache: int8 per group
// of 32 numbers with scale max|q|/127. Shared by the AVX2 and AVX-512 kernels so that both round
// the query the same way and give the same scores.
#pragma once

#include <cmath>
#include <cstdint>

// Internal linkage on purpose: each ISA's translation unit is compiled with its own target flags,
// and one shared inline definition could be the AVX-512 copy inside the AVX2 kernels.
namespace keel::x86 {
namespace {

// Heads of up to 256 numbers (Gemma 3's); longer heads take the ref kernels.
constexpr uint32_t kQueryMaxGroups = 8;

struct QueryQ8 {
  alignas(64) int8_t q[32 * kQueryMaxGroups];
  float d[kQueryMaxGroups];        // q[i] ~ d * int8
  float sum[kQueryMaxGroups];      // the f32 query's sum per group (q4's minimum term)
  int32_t sum_q[kQueryMaxGroups];  // the int8 numbers' sum per group (q8's +128 offset)
};

inline void quantize_query(const float* x, uint32_t groups, QueryQ8& out) {
  for (uint32_t g = 0; g < groups; ++g) {
    const float* xg = x + 32 * g;
    float amax = 0.0f, sum = 0.0f;
    for (uint32_t i = 0; i < 32; ++i) {
      // std::fmax's result (a NaN is passed over) without its library call.
      const float a = std::fabs(xg[i]);
      amax = a > amax ? a : amax;
      sum += xg[i];
    }
    const float d = amax / 127.0f, inv = d > 0.0f ? 1.0f / d : 0.0f;
    int32_t sum_q = 0;
    for (uint32_t i = 0; i < 32; ++i) sum_q += out.q[32 * g + i] = int8_t(std::nearbyint(xg[i] * inv));
    out.d[g] = d;
    out.sum[g] = sum;
    out.sum_q[g] = sum_q;
  }
}

}  // namespace
}  // namespace keel::x86
