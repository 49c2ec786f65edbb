// RoPE angles. position * inverse frequency is formed in double precision and reduced there,
// so angles stay exact to float precision at positions of 10^7 and beyond, where a float
// product would be off by whole radians.
#pragma once

#include <cmath>
#include <cstdint>

namespace keel {

inline void rope_angles(double position, const double* inv_freq, uint32_t pairs, float* cos_out, float* sin_out) {
  for (uint32_t i = 0; i < pairs; ++i) {
    const double a = position * inv_freq[i];
    cos_out[i] = float(std::cos(a));
    sin_out[i] = float(std::sin(a));
  }
}

}  // namespace keel
