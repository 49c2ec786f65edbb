// Byte sizes of the weight formats of docs/format.md. Shared by the verifier, the kernels and
// the converter so that all three agree on every layout by construction.
#pragma once

#include <cstdint>

#include "keel_generated.h"

namespace keel {

constexpr uint32_t kQuantBlock = 32;  // elements per scale block along cols
constexpr uint32_t kPanelRows = 16;   // rows per panel
constexpr uint32_t kPanelGroup = 4;   // consecutive cols per lane

constexpr uint64_t ceil_div(uint64_t a, uint64_t b) { return (a + b - 1) / b; }
constexpr uint64_t align64(uint64_t n) { return (n + 63) & ~uint64_t(63); }

constexpr bool is_quantized(fb::DType t) { return t == fb::DType::Q8 || t == fb::DType::Q4 || t == fb::DType::Q4M; }

constexpr uint32_t float_elem_bytes(fb::DType t) {
  return t == fb::DType::F32 ? 4 : (t == fb::DType::F16 || t == fb::DType::BF16) ? 2 : 0;
}

// Offset of the quants inside a panel (scales [+ mins], padded to 64).
constexpr uint64_t panel_quants_offset(fb::DType t, uint64_t cols) {
  const uint64_t nb = ceil_div(cols, kQuantBlock);
  return align64(nb * kPanelRows * 2 * (t == fb::DType::Q4M ? 2 : 1));
}

constexpr uint64_t panel_bytes(fb::DType t, uint64_t cols) {
  const uint64_t nb = ceil_div(cols, kQuantBlock);
  const uint64_t quant_bytes_per_block = (t == fb::DType::Q8) ? 512 : 256;
  return panel_quants_offset(t, cols) + nb * quant_bytes_per_block;
}

// Bytes of a tensor of `rows` x `cols` (a vector is rows = 1) in the given dtype; 0 when the
// dtype is unknown. Callers bound rows/cols first so the products cannot overflow.
constexpr uint64_t tensor_bytes(fb::DType t, uint64_t rows, uint64_t cols) {
  if (is_quantized(t)) return ceil_div(rows, kPanelRows) * panel_bytes(t, cols);
  return rows * cols * float_elem_bytes(t);
}

constexpr fb::Layout layout_for(fb::DType t) { return is_quantized(t) ? fb::Layout::Panel16x4 : fb::Layout::RowMajor; }

}  // namespace keel
