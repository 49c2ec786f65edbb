// Attention over an f16 KV cache, for one query head: scores against cached keys and the
// probability-weighted sum of cached values. Ref (portable) and x86 (F16C + FMA) tables.
#pragma once

#include <cstdint>

namespace keel {

struct AttentionKernels {
  const char* name;
  // scores[j] = scale * dot(q, k_j), k: [n][head_dim] halves.
  void (*scores)(const float* q, const uint16_t* k, uint32_t n, uint32_t head_dim, float scale, float* scores);
  // out[head_dim] = sum_j p[j] * v_j, v: [n][head_dim] halves (out overwritten).
  void (*weighted_sum)(const float* p, const uint16_t* v, uint32_t n, uint32_t head_dim, float* out);
  // out[i] = half(x[i]), round to nearest even.
  void (*to_half)(const float* x, uint32_t n, uint16_t* out);
  // out[head_dim] += sum_j p[j] * v_j, continuing each output's accumulation in weighted_sum's
  // own order, so that weighted_sum over [0, a) then this over [a, n) equals weighted_sum over
  // [0, n) bit for bit (the x86 table: for head_dim a multiple of 8 other than 8). The dataflow
  // backend sums value tiles with it.
  void (*weighted_sum_more)(const float* p, const uint16_t* v, uint32_t n, uint32_t head_dim, float* out);
};

const AttentionKernels& attention_kernels_ref();
// nullptr when the CPU or the build lacks AVX2/F16C/FMA.
const AttentionKernels* attention_kernels_x86();

}  // namespace keel
