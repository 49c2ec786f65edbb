// The quantized activation block, alone in a header that includes nothing, so that llm/plan.h
// (a header firmware compiles alone) sizes the `xq` region by the kernels' own type.
#pragma once

#include <cstdint>

namespace keel {

// Activations per block: the weights' quantization block (kernels.h checks kQuantBlock).
constexpr uint32_t kActBlockValues = 32;

// One block of 32 quantized activations: x[i] ~= d * q[i], q in [-127, 127].
// Columns past the logical length are q = 0, so they contribute nothing to any dot product.
struct ActBlock {
  float d;
  int32_t sum;  // sum of q[0..31]
  int8_t q[kActBlockValues];
};
static_assert(sizeof(ActBlock) == 40, "ActBlock is packed: f32 scale, i32 sum, 32 x i8");

// Activation blocks of one token: x has `cols` floats, quantized into act_blocks(cols) blocks.
constexpr uint32_t act_blocks(uint32_t cols) { return (cols + kActBlockValues - 1) / kActBlockValues; }

}  // namespace keel
