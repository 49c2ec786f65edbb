// Reading one (row, block) of a packed panel: the unsigned quants u[32] and the per-block
// parameters, for every quantized dtype of docs/format.md. The scalar definition the ref
// kernels, the row dequantizer and the tests share; SIMD kernels decode the same bytes 16 rows
// at a time.
#pragma once

#include <cstdint>
#include <cstring>

#include "core/f16.h"
#include "kernels/unaligned_load.h"
#include "model/weight_format.h"

namespace keel {

// u[i] of column 32b + i, lane `lane`; `qb` is the block's first quant byte
// (quants + b * quant_block_bytes(t)).
inline void unpack_block_u(fb::DType t, const uint8_t* qb, uint32_t lane, uint8_t u[kQuantBlock]) {
  if (t == fb::DType::Q8) {
    // [8][16][4]: byte [g][r][j] = u(col 4g + j)
    for (uint32_t g = 0; g < 8; ++g)
      for (uint32_t j = 0; j < 4; ++j) u[4 * g + j] = qb[g * 64 + lane * 4 + j];
    return;
  }
  // [4][16][4]: low nibble col 8c + j, high nibble col 8c + 4 + j
  for (uint32_t c = 0; c < 4; ++c)
    for (uint32_t j = 0; j < 4; ++j) {
      const uint8_t byte = qb[c * 64 + lane * 4 + j];
      u[8 * c + j] = byte & 15;
      u[8 * c + 4 + j] = byte >> 4;
    }
  const uint8_t* hp = qb + 256;
  if (high_bits(t) == 1) {
    // [16][4]: bit 2c + h of byte [r][j] is bit 4 of u(col 8c + 4h + j)
    for (uint32_t c = 0; c < 4; ++c)
      for (uint32_t h = 0; h < 2; ++h)
        for (uint32_t j = 0; j < 4; ++j) u[8 * c + 4 * h + j] |= uint8_t(((hp[lane * 4 + j] >> (2 * c + h)) & 1) << 4);
  } else if (high_bits(t) == 2) {
    // [2][16][4]: bits 2(2(c % 2) + h) and the next of byte [c / 2][r][j] are bits 4, 5 of
    // u(col 8c + 4h + j)
    for (uint32_t c = 0; c < 4; ++c)
      for (uint32_t h = 0; h < 2; ++h)
        for (uint32_t j = 0; j < 4; ++j) {
          const uint8_t byte = hp[(c / 2) * 64 + lane * 4 + j];
          u[8 * c + 4 * h + j] |= uint8_t(((byte >> (2 * (2 * (c % 2) + h))) & 3) << 4);
        }
  }
}

// Per-(row, block) parameters of a panel's header. The element value is
//   Q8, Q4, Q5:  d * (u - zero_point)            Q4M, Q5M: d * u + m
//   Q4K, Q5K:    (d * sc) * u - (dmin * mn)      Q6K: (d * sc[i / 16]) * (u - 32)
struct BlockParams {
  float d = 0.0f;      // f16 d (K-quants: of the superblock)
  float m = 0.0f;      // Q4M/Q5M min; K-quant dmin
  int32_t sc[2] = {};  // Q4K/Q5K: sc[0] = 6-bit scale; Q6K: int8 scales of the two halves
  int32_t mn = 0;      // Q4K/Q5K 6-bit min
};

inline BlockParams block_params(fb::DType t, const uint8_t* panel, uint64_t cols, uint32_t b, uint32_t lane) {
  const uint64_t nb = ceil_div(cols, kQuantBlock), ns = ceil_div(cols, kSuperBlock);
  BlockParams p;
  if (is_kquant(t)) {
    const uint32_t s = b / (kSuperBlock / kQuantBlock);
    p.d = f16_to_f32(load_u16(panel + (s * kPanelRows + lane) * 2));
    if (t == fb::DType::Q6K) {
      const uint8_t* sc = panel + ns * kPanelRows * 2;  // [nb][2][16] int8
      p.sc[0] = int8_t(sc[(b * 2 + 0) * kPanelRows + lane]);
      p.sc[1] = int8_t(sc[(b * 2 + 1) * kPanelRows + lane]);
    } else {
      p.m = f16_to_f32(load_u16(panel + ns * kPanelRows * 2 + (s * kPanelRows + lane) * 2));
      const uint8_t* sc = panel + ns * kPanelRows * 4;  // [nb][16] u8, then mins [nb][16] u8
      p.sc[0] = sc[b * kPanelRows + lane];
      p.mn = sc[nb * kPanelRows + b * kPanelRows + lane];
    }
    return p;
  }
  p.d = f16_to_f32(load_u16(panel + (b * kPanelRows + lane) * 2));
  if (t == fb::DType::Q4M || t == fb::DType::Q5M)
    p.m = f16_to_f32(load_u16(panel + nb * kPanelRows * 2 + (b * kPanelRows + lane) * 2));
  return p;
}

// The integer zero point of the formats that have one (value d * (u - z)), else 0.
constexpr int32_t panel_zero_point(fb::DType t) {
  return t == fb::DType::Q8 ? 128 : t == fb::DType::Q4 ? 8 : t == fb::DType::Q5 ? 16 : t == fb::DType::Q6K ? 32 : 0;
}

}  // namespace keel
