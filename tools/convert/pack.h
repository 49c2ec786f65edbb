// Writing weight tensors in the storage formats of docs/format.md ("Weight formats"): lossless
// repacking of GGUF blocks, quantization of f32 weights, and float conversion. Every function
// writes exactly keel::tensor_bytes(dst, rows, cols) bytes (cols = n for vectors).
#pragma once

#include <cstdint>
#include <string>

#include "convert/source_model.h"
#include "keel_generated.h"

namespace keel::convert {

// Repacks a row-major [rows, cols] tensor of GGUF blocks into Panel16x4 without changing a bit
// of any value: Q8_0 -> Q8 (u = q + 128), Q4_0 -> Q4, Q4_1 -> Q4M (scales and mins copied as
// f16 bits). cols must be a multiple of 32 (GGUF's block size); rows past the last panel
// boundary are padding (scale 0, min 0, u = zero point). The 5-bit and K-quant types go to
// pack_wide_from_ggml_blocks. Returns false with `error` set when the pair of types is not a
// lossless one, the sizes disagree with the shape, or cols is not a multiple of the block.
bool pack_from_ggml_blocks(SrcType src, const uint8_t* src_bytes, uint64_t src_len, uint64_t rows, uint64_t cols,
                           keel::fb::DType dst, uint8_t* out, uint64_t out_len, std::string& error);

// The checks both packers make before writing: `dst` is the lossless target `expected`, cols is a
// whole number of source blocks (`block_elems` values in `block_bytes` bytes), `src_len` and
// `out_len` agree with [rows, cols]. Returns false with `error` naming what was found.
bool check_ggml_pack(SrcType src, keel::fb::DType expected, keel::fb::DType dst, uint64_t src_len, uint64_t rows,
                     uint64_t cols, uint64_t block_elems, uint64_t block_bytes, uint64_t out_len, std::string& error);

// The same for GGUF's 5-bit and K-quant blocks: Q5_0 -> Q5, Q5_1 -> Q5M, Q4_K -> Q4K,
// Q5_K -> Q5K, Q6_K -> Q6K (f16 scales, mins, 6-bit or int8 sub-block scales and integer quants
// copied). cols must be a multiple of the source's block (32 or 256). Padding rows are all zero.
bool pack_wide_from_ggml_blocks(SrcType src, const uint8_t* src_bytes, uint64_t src_len, uint64_t rows, uint64_t cols,
                                keel::fb::DType dst, uint8_t* out, uint64_t out_len, std::string& error);

// Quantizes a row-major f32 [rows, cols] matrix (any rows, any cols) into Q8, Q4 or Q4M,
// packed. Per block of 32 (statistics over the block's real columns only):
//   Q8:  d = f16(amax / 127); q = clamp(round_half_away(x / d), -127, 127); u = q + 128.
//   Q4:  mx = the element of largest magnitude (first one on ties); d = f16(mx / -8);
//        u = clamp(floor(x / d + 8.5), 0, 15)             (GGUF Q4_0's rule)
//   Q4M: d = f16((max - min) / 15); m = f16(min); u = clamp(round_half_away((x - m) / d), 0, 15)
// Each u is computed with the f16-rounded d (and m) actually stored, so the error per element
// is at most d / 2 (Q4: d where u clamps at 15). A block whose d rounds to 0 stores u = zero
// point (value 0; Q4M: u = 0, value m). d is clamped to the largest finite f16.
// Columns past `cols` are padding: Q8/Q4 store the zero point (value exactly 0); Q4M stores u = 0
// (value m), which contributes 0 because padded activations are 0 (quantize_act pads with 0).
void quantize_pack(const float* src, uint64_t rows, uint64_t cols, keel::fb::DType dst, uint8_t* out);

// n floats to F32 (copy), F16 or BF16 (round to nearest even), row-major.
void convert_float(const float* src, uint64_t n, keel::fb::DType dst, uint8_t* out);

}  // namespace keel::convert
