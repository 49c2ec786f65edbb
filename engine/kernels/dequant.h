// Decoding of one row of a weight tensor to f32, for every dtype of docs/format.md. Used by the
// embedding lookup (a token's embedding is one row) and by tests as the definition of what a
// packed tensor means.
#pragma once

#include <cstdint>

#include "keel_generated.h"

namespace keel {

// out[0..cols) = row `row` of the [rows, cols] tensor `tensor` (row < rows). Exact: the
// quantized formats give the values of docs/format.md "Weight formats" in f32,
// bit-identical to GGUF's dequantization of the block each was kept from (Q8_0, Q4_0, Q4_1,
// Q5_0, Q5_1, Q4_K, Q5_K, Q6_K).
void dequantize_row(fb::DType dtype, const uint8_t* tensor, uint32_t rows, uint32_t cols, uint32_t row, float* out);

}  // namespace keel
