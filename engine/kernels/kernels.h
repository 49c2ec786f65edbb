// The kernel interface: one table of function pointers per instruction-set level (ref; x86
// AVX2, AVX-512 VNNI; arm64 NEON, dotprod, i8mm), chosen once at start. Kernels never allocate, never know about
// threads and never fail: the caller validates shapes (the loader and the planner already did) and splits the row
// panels of a matrix across workers.
//
//   y[t][r] = sum_c W[r][c] * x[t][c]     t in [0, n_tokens), r in the given panels
//
// Quantized weights (Q8, Q4, Q4M) multiply activations quantized per token by
// `quantize_act` (dynamic, blocks of 32: int8 values, f32 scale, int32 block sum for the
// zero-point and min corrections); integer dot products are exact in int32, then each block
// adds d_w * d_a * isum in f32. Float weights (F32, F16, BF16) multiply f32 activations.
#pragma once

#include <cstdint>

#include "kernels/act_block.h"
#include "model/weight_format.h"

namespace keel {

// ActBlock and act_blocks are in kernels/act_block.h; a block pairs with one weight block.
static_assert(kActBlockValues == kQuantBlock, "an activation block covers one weight quantization block");

// Bytes of the quantized activations of `n_tokens` tokens (what the planner reserves).
constexpr uint64_t act_bytes(uint32_t cols, uint32_t n_tokens = 1) {
  return uint64_t(act_blocks(cols)) * sizeof(ActBlock) * n_tokens;
}

// A weight matrix in one of the formats of docs/format.md. Field order matches
// keel::TensorView so one converts to the other by aggregate initialization.
struct WeightView {
  fb::DType dtype = fb::DType::F32;
  uint32_t rows = 0;
  uint32_t cols = 0;
  const uint8_t* data = nullptr;  // 64-byte aligned for the packed formats
};

// Work is split in panels of 16 rows for every dtype (the last one may be partial).
constexpr uint32_t panel_count(uint32_t rows) { return (rows + kPanelRows - 1) / kPanelRows; }

struct MatmulKernels {
  const char* name;  // "ref", "avx2", "avx512vnni", "neon", "neon-dotprod", "neon-i8mm"

  // x[cols] -> out[act_blocks(cols)]. Per block: d = max|x| / 127, q = round-to-nearest-even
  // (x * (1 / d)); a block whose max|x| is below 1e-30 is all zero with d = 0. Every backend
  // produces bit-identical blocks.
  void (*quantize_act)(const float* x, uint32_t cols, ActBlock* out);

  // Q8 / Q4 / Q4M weights. x: [n_tokens][act_blocks(w.cols)] ActBlocks, token t at
  // x + t * act_blocks(w.cols). y: [n_tokens][y_stride] floats. Writes (overwrites) rows
  // [16 * panel_begin, min(16 * panel_end, w.rows)) of every token and nothing else.
  void (*matmul)(const WeightView& w, const ActBlock* x, uint32_t n_tokens, float* y, uint32_t y_stride,
                 uint32_t panel_begin, uint32_t panel_end);

  // F32 / F16 / BF16 row-major weights. x: [n_tokens][x_stride] floats (x_stride >= w.cols).
  // Same output contract as `matmul`.
  void (*matmul_f)(const WeightView& w, const float* x, uint32_t n_tokens, uint32_t x_stride, float* y,
                   uint32_t y_stride, uint32_t panel_begin, uint32_t panel_end);
};

// Element-wise and reduction ops of the transformer, over f32.
struct VectorKernels {
  const char* name;
  // out[i] = x[i] / sqrt(mean(x^2) + eps) * w[i]; out may alias x.
  void (*rmsnorm)(const float* x, const float* w, uint32_t n, float eps, float* out);
  // In place, numerically stable (max subtracted first); -inf entries give exactly 0.
  void (*softmax)(float* x, uint32_t n);
  // SwiGLU: out[i] = silu(gate[i]) * up[i], silu(g) = g / (1 + exp(-g)); out may alias either.
  void (*silu_mul)(const float* gate, const float* up, uint32_t n, float* out);
  // out[i] = a[i] + b[i]; out may alias a or b.
  void (*add)(const float* a, const float* b, uint32_t n, float* out);
  // x[i] *= s.
  void (*scale)(float* x, uint32_t n, float s);
  // sum_i a[i] * b[i] (attention q . k over head_dim).
  float (*dot)(const float* a, const float* b, uint32_t n);
  // y[i] += a * x[i] (attention sum_j p_j v_j).
  void (*axpy)(float a, const float* x, uint32_t n, float* y);
  // GeGLU (Gemma): out[i] = gelu_tanh(gate[i]) * up[i], with gelu_tanh(g) = g/2 (1 + tanh(u)),
  // u = sqrt(2/pi) (g + 0.044715 g^3), computed as g / (1 + exp(-2u)); out may alias either.
  void (*gelu_mul)(const float* gate, const float* up, uint32_t n, float* out);
};

// The portable oracle; always available.
const MatmulKernels& kernels_ref();
const VectorKernels& vector_kernels_ref();

// The fastest x86 table the CPU supports: AVX-512 VNNI (with AVX-512 BW/VL) when present,
// else AVX2 + FMA + F16C; nullptr when the CPU has neither or the build has no x86 kernels.
const MatmulKernels* kernels_x86();
const VectorKernels* vector_kernels_x86();

// A specific x86 level, nullptr when the CPU (or the build) lacks it. For tests and benchmarks.
const MatmulKernels* kernels_x86_avx2();
const MatmulKernels* kernels_x86_avx512();

// The arm64 tables (engine/kernels/arm64/), in three tiers; each accessor is nullptr when the
// CPU (Linux: getauxval; bare metal: the features the build targets) or the build lacks it:
//   neon          Armv8.0 Advanced SIMD, which every 64-bit Arm core has (Cortex-A53, A72)
//   neon-dotprod  + SDOT/UDOT and half-precision arithmetic (Armv8.2: Cortex-A55, A76, Neoverse-N1)
//   neon-i8mm     + SMMLA 8-bit matrix multiply-accumulate (Armv8.6, optional from 8.2:
//                 Cortex-A710, Neoverse-V1); multi-token (prefill) rows use it
const MatmulKernels* kernels_arm64();  // the widest tier the CPU has
const MatmulKernels* kernels_arm64_neon();
const MatmulKernels* kernels_arm64_dotprod();
const MatmulKernels* kernels_arm64_i8mm();
const VectorKernels* vector_kernels_arm64();

// The fastest SIMD tables of this CPU: kernels_x86() on x86, kernels_arm64() on arm64; nullptr
// when there are none (the `native` backend then reports itself unsupported).
const MatmulKernels* kernels_native();
const VectorKernels* vector_kernels_native();

// kernels_native() when available, else kernels_ref().
const MatmulKernels& kernels_best();
const VectorKernels& vector_kernels_best();

}  // namespace keel
