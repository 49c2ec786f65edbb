// RoPE. Angles: position * inverse frequency is formed in double precision and reduced there,
// so angles stay exact to float precision at positions of 10^7 and beyond, where a float
// product would be off by whole radians. Rotation: the one place a vector's pairs are turned.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/kv_type.h"

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

// Turns `n` consecutive cached key rows of `type` (head_dim numbers each) by one set of angles:
// each row dequantized into tmp[head_dim], rotated and stored again (a re-rotation of keys that
// moved alike).
inline void rope_rotate_rows(KvType type, uint16_t* rows, uint32_t n, uint32_t head_dim, uint32_t pairs, bool halves,
                             const float* cos, const float* sin, float* tmp) {
  const uint64_t row_halves = kv_row_halves(type, head_dim);
  for (uint32_t i = 0; i < n; ++i) {
    uint16_t* row = rows + i * row_halves;
    kv_dequantize_row(type, row, head_dim, tmp);
    rope_rotate(tmp, pairs, halves, cos, sin);
    kv_quantize_row(type, tmp, head_dim, row);
  }
}

}  // namespace keel
