// exp(x) for f32 without libm (the engine builds freestanding): range reduction
// x = n ln2 + r, |r| <= ln2/2, and a degree-6 polynomial on r; about 1 ulp in the normal range.
// The coefficients are the well-known Cephes expf minimax polynomial. The SIMD versions evaluate
// the same constants in the same order.
#pragma once

#include <cstdint>
#include <cstring>

namespace keel::expf_poly {

constexpr float kMaxInput = 88.0f;            // keeps n <= 127: the result stays finite
constexpr float kMinInput = -87.3365447504f;  // below this the result flushes to 0
constexpr float kLog2e = 1.44269504088896341f;
constexpr float kLn2Hi = 0.693359375f;  // exact in 9 bits, so n * kLn2Hi is exact
constexpr float kLn2Lo = -2.12194440e-4f;
constexpr float kRoundMagic = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
constexpr float kP0 = 1.9875691500e-4f;
constexpr float kP1 = 1.3981999507e-3f;
constexpr float kP2 = 8.3334519073e-3f;
constexpr float kP3 = 4.1665795894e-2f;
constexpr float kP4 = 1.6666665459e-1f;
constexpr float kP5 = 5.0000001201e-1f;

inline float exp_ref(float x) {
  if (!(x >= kMinInput)) return x != x ? x : 0.0f;  // NaN stays NaN, tiny and -inf give 0
  if (x > kMaxInput) x = kMaxInput;
  const float n = (x * kLog2e + kRoundMagic) - kRoundMagic;  // nearest integer, |n| <= 127
  float r = x - n * kLn2Hi;
  r = r - n * kLn2Lo;
  float p = kP0;
  p = p * r + kP1;
  p = p * r + kP2;
  p = p * r + kP3;
  p = p * r + kP4;
  p = p * r + kP5;
  p = p * (r * r) + r + 1.0f;
  const uint32_t bits = uint32_t(int32_t(n) + 127) << 23;
  float scale;
  memcpy(&scale, &bits, 4);
  return p * scale;
}

}  // namespace keel::expf_poly
