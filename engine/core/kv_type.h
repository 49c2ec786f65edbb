// How one cached key or value row (one token, one KV head, head_dim numbers) is stored
// (docs/kv.md, "Quantized cache"). Every row is self-contained: the ring overwrites a row,
// compaction moves a row, a re-rotation rewrites a row, and none of them touches a neighbour.
//
//   f16  [head_dim] IEEE half
//   q8   [groups] f16 scale d, then [head_dim] int8 q:  x = d * q        (symmetric)
//   q4   [groups] f16 scale d, [groups] f16 minimum m, then [head_dim / 2] bytes; within a
//        group of g numbers byte b holds element b in its low nibble and element b + g/2 in its
//        high nibble:                                   x = d * q + m    (asymmetric)
//
// A group is 32 numbers of the row (the whole row when head_dim is not a multiple of 32), so a
// row's bytes are always even and rows are addressed in 16-bit units like f16 rows.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/f16.h"

namespace keel {

enum class KvType : uint8_t { F16, Q8, Q4 };

constexpr uint32_t kv_group(uint32_t head_dim) { return head_dim % 32 == 0 ? 32 : head_dim; }
constexpr uint32_t kv_groups(uint32_t head_dim) { return head_dim / kv_group(head_dim); }
constexpr uint32_t kv_row_bytes(KvType t, uint32_t head_dim) {
  return t == KvType::Q8   ? head_dim + 2 * kv_groups(head_dim)
         : t == KvType::Q4 ? head_dim / 2 + 4 * kv_groups(head_dim)
                           : 2 * head_dim;
}
// The row in 16-bit units (the cache's addressing unit).
constexpr uint32_t kv_row_halves(KvType t, uint32_t head_dim) { return kv_row_bytes(t, head_dim) / 2; }
// Whether a head size can be stored as `t`: q4 packs pairs of a group's halves into bytes, and
// a row must be a whole number of 16-bit units.
constexpr bool kv_type_fits(KvType t, uint32_t head_dim) {
  return head_dim >= 2 && (t != KvType::Q4 || (kv_group(head_dim) % 2 == 0 && head_dim % 4 == 0));
}

inline const char* kv_type_name(KvType t) { return t == KvType::Q8 ? "q8" : t == KvType::Q4 ? "q4" : "f16"; }
inline bool parse_kv_type(const char* name, KvType& out) {
  if (strcmp(name, "f16") == 0) {
    out = KvType::F16;
  } else if (strcmp(name, "q8") == 0) {
    out = KvType::Q8;
  } else if (strcmp(name, "q4") == 0) {
    out = KvType::Q4;
  } else {
    return false;
  }
  return true;
}

// Stores x[head_dim] as one row of type `t` at `row`. Scales are rounded to half first and the
// numbers quantized with the rounded scale, so the stored pair reproduces x as closely as the
// format allows.
inline void kv_quantize_row(KvType t, const float* x, uint32_t head_dim, uint16_t* row) {
  const uint32_t g = kv_group(head_dim), groups = head_dim / g;
  if (t == KvType::F16) {
    for (uint32_t i = 0; i < head_dim; ++i) row[i] = f32_to_f16(x[i]);
    return;
  }
  uint16_t* scales = row;
  if (t == KvType::Q8) {
    int8_t* q = reinterpret_cast<int8_t*>(row + groups);
    for (uint32_t b = 0; b < groups; ++b) {
      const float* xb = x + b * g;
      float amax = 0.0f;
      for (uint32_t i = 0; i < g; ++i) amax = std::fmax(amax, std::fabs(xb[i]));
      const uint16_t dh = f32_to_f16(amax / 127.0f);
      const float d = f16_to_f32(dh);
      const float inv = d > 0.0f ? 1.0f / d : 0.0f;
      scales[b] = dh;
      for (uint32_t i = 0; i < g; ++i) {
        float v = std::nearbyint(xb[i] * inv);
        v = v > 127.0f ? 127.0f : v < -127.0f ? -127.0f : v;
        q[b * g + i] = int8_t(v);
      }
    }
    return;
  }
  uint16_t* mins = row + groups;
  uint8_t* q = reinterpret_cast<uint8_t*>(row + 2 * groups);
  const uint32_t half = g / 2;
  for (uint32_t b = 0; b < groups; ++b) {
    const float* xb = x + b * g;
    float lo = xb[0], hi = xb[0];
    for (uint32_t i = 1; i < g; ++i) {
      lo = std::fmin(lo, xb[i]);
      hi = std::fmax(hi, xb[i]);
    }
    const uint16_t mh = f32_to_f16(lo), dh = f32_to_f16((hi - lo) / 15.0f);
    const float m = f16_to_f32(mh), d = f16_to_f32(dh);
    const float inv = d > 0.0f ? 1.0f / d : 0.0f;
    scales[b] = dh;
    mins[b] = mh;
    uint8_t* qb = q + b * half;
    for (uint32_t i = 0; i < half; ++i) {
      float a = std::nearbyint((xb[i] - m) * inv), c = std::nearbyint((xb[i + half] - m) * inv);
      a = a < 0.0f ? 0.0f : a > 15.0f ? 15.0f : a;
      c = c < 0.0f ? 0.0f : c > 15.0f ? 15.0f : c;
      qb[i] = uint8_t(uint32_t(a) | (uint32_t(c) << 4));
    }
  }
}

// The numbers a row of type `t` stands for.
inline void kv_dequantize_row(KvType t, const uint16_t* row, uint32_t head_dim, float* x) {
  const uint32_t g = kv_group(head_dim), groups = head_dim / g;
  if (t == KvType::F16) {
    for (uint32_t i = 0; i < head_dim; ++i) x[i] = f16_to_f32(row[i]);
    return;
  }
  if (t == KvType::Q8) {
    const int8_t* q = reinterpret_cast<const int8_t*>(row + groups);
    for (uint32_t b = 0; b < groups; ++b) {
      const float d = f16_to_f32(row[b]);
      for (uint32_t i = 0; i < g; ++i) x[b * g + i] = d * float(q[b * g + i]);
    }
    return;
  }
  const uint8_t* q = reinterpret_cast<const uint8_t*>(row + 2 * groups);
  const uint32_t half = g / 2;
  for (uint32_t b = 0; b < groups; ++b) {
    const float d = f16_to_f32(row[b]), m = f16_to_f32(row[groups + b]);
    const uint8_t* qb = q + b * half;
    for (uint32_t i = 0; i < half; ++i) {
      x[b * g + i] = d * float(qb[i] & 15) + m;
      x[b * g + i + half] = d * float(qb[i] >> 4) + m;
    }
  }
}

}  // namespace keel
