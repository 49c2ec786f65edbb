#include "kernels/dequant.h"

#include <cstring>

#include "core/f16.h"
#include "kernels/panel_quants.h"
#include "model/weight_format.h"

namespace keel {

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
    default: break;
  }
  if (!is_quantized(dtype)) return;

  const uint32_t nb = uint32_t(ceil_div(cols, kQuantBlock));
  const uint8_t* panel = tensor + uint64_t(row / kPanelRows) * panel_bytes(dtype, cols);
  const uint32_t lane = row % kPanelRows;
  const uint8_t* quants = panel + panel_quants_offset(dtype, cols);
  const int32_t z = panel_zero_point(dtype);

  for (uint32_t b = 0; b < nb; ++b) {
    uint8_t u[kQuantBlock];
    unpack_block_u(dtype, quants + uint64_t(b) * quant_block_bytes(dtype), lane, u);
    const BlockParams p = block_params(dtype, panel, cols, b, lane);
    float v[kQuantBlock];
    // The same float operations, in the same order, as GGUF's dequantization of the source
    // block (gguf-py and ggml agree), so a kept tensor decodes bit for bit.
    switch (dtype) {
      case fb::DType::Q4M:
      case fb::DType::Q5M:
        for (uint32_t i = 0; i < kQuantBlock; ++i) v[i] = float(u[i]) * p.d + p.m;
        break;
      case fb::DType::Q4K:
      case fb::DType::Q5K: {
        const float d1 = p.d * float(p.sc[0]), m1 = p.m * float(p.mn);
        for (uint32_t i = 0; i < kQuantBlock; ++i) v[i] = d1 * float(u[i]) - m1;
        break;
      }
      case fb::DType::Q6K:
        for (uint32_t i = 0; i < kQuantBlock; ++i) v[i] = p.d * float(p.sc[i / 16]) * float(int32_t(u[i]) - z);
        break;
      default:
        for (uint32_t i = 0; i < kQuantBlock; ++i) v[i] = float(int32_t(u[i]) - z) * p.d;
        break;
    }
    const uint32_t c0 = b * kQuantBlock;
    const uint32_t n = cols - c0 < kQuantBlock ? cols - c0 : kQuantBlock;
    for (uint32_t i = 0; i < n; ++i) out[c0 + i] = v[i];
  }
}

}  // namespace keel
