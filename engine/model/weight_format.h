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

constexpr uint32_t kSuperBlock = 256;  // columns per K-quant superblock (8 blocks)

constexpr bool is_kquant(fb::DType t) { return t == fb::DType::Q4K || t == fb::DType::Q5K || t == fb::DType::Q6K; }

constexpr bool is_quantized(fb::DType t) {
  return t == fb::DType::Q8 || t == fb::DType::Q4 || t == fb::DType::Q4M || t == fb::DType::Q5 || t == fb::DType::Q5M ||
         is_kquant(t);
}

// The formats whose value bits go beyond one nibble: a plane of 1 (5-bit) or 2 (6-bit) high
// bits per element follows each block's nibbles (docs/format.md "High-bit planes").
constexpr uint32_t high_bits(fb::DType t) {
  return (t == fb::DType::Q5 || t == fb::DType::Q5M || t == fb::DType::Q5K) ? 1 : t == fb::DType::Q6K ? 2 : 0;
}

constexpr uint32_t float_elem_bytes(fb::DType t) {
  return t == fb::DType::F32 ? 4 : (t == fb::DType::F16 || t == fb::DType::BF16) ? 2 : 0;
}

// Quant bytes of one block of 32 columns x 16 rows: Q8 one byte per element; the others 256
// nibble bytes, then 64 bytes per high bit.
constexpr uint32_t quant_block_bytes(fb::DType t) { return t == fb::DType::Q8 ? 512 : 256 + 64 * high_bits(t); }

// Bytes of a panel's header (scales, mins) before padding to 64. K-quants hold per superblock
// f16 d (and f16 dmin) for 16 rows, then per block u8 scales (and u8 mins) for 16 rows; Q6K
// int8 scales for both 16-column halves of each block.
constexpr uint64_t panel_header_bytes(fb::DType t, uint64_t cols) {
  const uint64_t nb = ceil_div(cols, kQuantBlock);
  const uint64_t ns = ceil_div(cols, kSuperBlock);
  switch (t) {
    case fb::DType::Q4M:
    case fb::DType::Q5M: return nb * kPanelRows * 4;
    case fb::DType::Q4K:
    case fb::DType::Q5K: return ns * kPanelRows * 4 + nb * kPanelRows * 2;
    case fb::DType::Q6K: return ns * kPanelRows * 2 + nb * kPanelRows * 2;
    default: return nb * kPanelRows * 2;
  }
}

// Offset of the quants inside a panel (the header padded to 64).
constexpr uint64_t panel_quants_offset(fb::DType t, uint64_t cols) { return align64(panel_header_bytes(t, cols)); }

constexpr uint64_t panel_bytes(fb::DType t, uint64_t cols) {
  return panel_quants_offset(t, cols) + ceil_div(cols, kQuantBlock) * quant_block_bytes(t);
}

// Bytes of a tensor of `rows` x `cols` (a vector is rows = 1) in the given dtype; 0 when the
// dtype is unknown. Callers bound rows/cols first so the products cannot overflow.
constexpr uint64_t tensor_bytes(fb::DType t, uint64_t rows, uint64_t cols) {
  if (is_quantized(t)) return ceil_div(rows, kPanelRows) * panel_bytes(t, cols);
  return rows * cols * float_elem_bytes(t);
}

constexpr fb::Layout layout_for(fb::DType t) { return is_quantized(t) ? fb::Layout::Panel16x4 : fb::Layout::RowMajor; }

}  // namespace keel
