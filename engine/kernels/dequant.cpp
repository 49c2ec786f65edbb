#include "kernels/dequant.h"

#include <cstring>

#include "core/f16.h"
#include "model/weight_format.h"

namespace keel {

namespace {

inline uint16_t load_u16(const uint8_t* p) {
  uint16_t v;
  memcpy(&v, p, 2);
  return v;
}

}  // namespace

void dequantize_row(fb::DType dtype, const uint8_t* tensor, uint32_t rows, uint32_t cols, uint32_t row, float* out) {
  (void)rows;
  switch (dtype) {
    case fb::DType::F32: memcpy(out, tensor + uint64_t(row) * cols * 4, uint64_t(cols) * 4); return;
    case fb::DType::F16: {
      const uint8_t* src = tensor + uint64_t(row) * cols * 2;
      for (uint32_t c = 0; c < cols; ++c) out[c] = f16_to_f32(load_u16(src + 2 * c));
      return;
    }
    case fb::DType::BF16: {
      const uint8_t* src = tensor + uint64_t(row) * cols * 2;
      for (uint32_t c = 0; c < cols; ++c) out[c] = bf16_to_f32(load_u16(src + 2 * c));
      return;
    }
    case fb::DType::Q8:
    case fb::DType::Q4:
    case fb::DType::Q4M: break;
  }
  if (!is_quantized(dtype)) return;

  const uint32_t nb = uint32_t(ceil_div(cols, kQuantBlock));
  const uint8_t* panel = tensor + uint64_t(row / kPanelRows) * panel_bytes(dtype, cols);
  const uint32_t lane = row % kPanelRows;
  const uint8_t* scales = panel;                                // [nb][16] f16
  const uint8_t* mins = panel + uint64_t(nb) * kPanelRows * 2;  // [nb][16] f16, Q4M
  const uint8_t* quants = panel + panel_quants_offset(dtype, cols);

  for (uint32_t b = 0; b < nb; ++b) {
    const float d = f16_to_f32(load_u16(scales + (b * kPanelRows + lane) * 2));
    float u[kQuantBlock];
    if (dtype == fb::DType::Q8) {
      // [nb][8][16][4]: byte [b][g][r][j] = u(col 32b + 4g + j)
      const uint8_t* q = quants + uint64_t(b) * 512 + lane * 4;
      for (uint32_t g = 0; g < 8; ++g)
        for (uint32_t j = 0; j < 4; ++j) u[4 * g + j] = float(int32_t(q[g * 64 + j]) - 128) * d;
    } else {
      // [nb][4][16][4]: low nibble col 32b + 8c + j, high nibble col 32b + 8c + 4 + j
      const uint8_t* q = quants + uint64_t(b) * 256 + lane * 4;
      if (dtype == fb::DType::Q4) {
        for (uint32_t c = 0; c < 4; ++c)
          for (uint32_t j = 0; j < 4; ++j) {
            const uint8_t byte = q[c * 64 + j];
            u[8 * c + j] = float(int32_t(byte & 15) - 8) * d;
            u[8 * c + 4 + j] = float(int32_t(byte >> 4) - 8) * d;
          }
      } else {
        const float m = f16_to_f32(load_u16(mins + (b * kPanelRows + lane) * 2));
        for (uint32_t c = 0; c < 4; ++c)
          for (uint32_t j = 0; j < 4; ++j) {
            const uint8_t byte = q[c * 64 + j];
            u[8 * c + j] = float(byte & 15) * d + m;
            u[8 * c + 4 + j] = float(byte >> 4) * d + m;
          }
      }
    }
    const uint32_t c0 = b * kQuantBlock;
    const uint32_t n = cols - c0 < kQuantBlock ? cols - c0 : kQuantBlock;
    for (uint32_t i = 0; i < n; ++i) out[c0 + i] = u[i];
  }
}

}  // namespace keel
