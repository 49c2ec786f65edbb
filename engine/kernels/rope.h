// RoPE. Angles: position * inverse frequency is formed in double precision and reduced there,
// so angles stay exact to float precision at positions of 10^7 and beyond, where a float
// product would be off by whole radians. Rotation: the one place a vector's pairs are turned.
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

// Rotates v's first `pairs` pairs in place by the angles (cos[i], sin[i]). A pair is
// (i, i + pairs) with `halves` (GPT-NeoX style), else (2i, 2i + 1) (the original interleaving).
inline void rope_rotate(float* v, uint32_t pairs, bool halves, const float* cos, const float* sin) {
  for (uint32_t i = 0; i < pairs; ++i) {
    const uint32_t a = halves ? i : 2 * i, b = halves ? i + pairs : 2 * i + 1;
    const float x0 = v[a], x1 = v[b];
    v[a] = x0 * cos[i] - x1 * sin[i];
    v[b] = x0 * sin[i] + x1 * cos[i];
  }
}

}  // namespace keel
