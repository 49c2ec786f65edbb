// IEEE half and bfloat16 conversions, bit-exact, usable in constexpr and freestanding code.
#pragma once

#include <cstdint>
#include <cstring>

namespace keel {

inline float f32_from_bits(uint32_t b) {
  float f;
  memcpy(&f, &b, 4);
  return f;
}
inline uint32_t bits_from_f32(float f) {
  uint32_t b;
  memcpy(&b, &f, 4);
  return b;
}

inline float f16_to_f32(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ff;
  if (exp == 0) {
    if (mant == 0) return f32_from_bits(sign);
    // subnormal: normalize
    exp = 127 - 15 + 1;
    while ((mant & 0x400) == 0) {
      mant <<= 1;
      --exp;
    }
    mant &= 0x3ff;
    return f32_from_bits(sign | (exp << 23) | (mant << 13));
  }
  if (exp == 31) return f32_from_bits(sign | 0x7f800000u | (mant << 13));
  return f32_from_bits(sign | ((exp + 127 - 15) << 23) | (mant << 13));
}

// Round to nearest even.
inline uint16_t f32_to_f16(float f) {
  const uint32_t x = bits_from_f32(f);
  const uint32_t sign = (x >> 16) & 0x8000;
  const uint32_t absx = x & 0x7fffffff;
  if (absx > 0x7f800000) return uint16_t(sign | 0x7e00);   // NaN
  if (absx >= 0x477ff000) return uint16_t(sign | 0x7c00);  // overflow -> inf
  if (absx < 0x38800000) {                                 // subnormal or zero in f16
    if (absx < 0x33000000) return uint16_t(sign);
    const uint32_t e = absx >> 23;
    const uint32_t m = (absx & 0x7fffff) | 0x800000;
    const uint32_t shift = 126 - e;  // 14 + (113 - e) ... maps to f16 subnormal
    uint32_t half = m >> (shift - 0);
    // round to nearest even on the bits shifted out
    const uint32_t rem = m & ((1u << shift) - 1);
    const uint32_t mid = 1u << (shift - 1);
    half >>= 0;
    uint32_t r = half;
    if (rem > mid || (rem == mid && (r & 1))) ++r;
    return uint16_t(sign | r);
  }
  uint32_t r = absx - 0x38000000;  // rebias exponent 127 -> 15
  const uint32_t rem = r & 0x1fff;
  r >>= 13;
  if (rem > 0x1000 || (rem == 0x1000 && (r & 1))) ++r;
  return uint16_t(sign | r);
}

inline float bf16_to_f32(uint16_t h) { return f32_from_bits(uint32_t(h) << 16); }

inline uint16_t f32_to_bf16(float f) {
  uint32_t x = bits_from_f32(f);
  if ((x & 0x7fffffff) > 0x7f800000) return uint16_t((x >> 16) | 0x40);
  x += 0x7fff + ((x >> 16) & 1);
  return uint16_t(x >> 16);
}

}  // namespace keel
