// Attention over the KV cache, for one query head: scores against cached keys and the
// probability-weighted sum of cached values, for each row format of core/kv_type.h (f16, q8,
// q4; the quantized kernels read the stored rows directly, no dequantized copy). Ref
// (portable), x86 (AVX2 + F16C + FMA; AVX-512 VNNI) and arm64 (NEON; dotprod) tables.
#pragma once

#include <cstdint>

#include "core/kv_type.h"

namespace keel {

// scores[j] = scale * dot(q, k_j) over n rows k of `head_dim` numbers.
using KvScoresFn = void (*)(const float* q, const uint16_t* k, uint32_t n, uint32_t head_dim, float scale,
                            float* scores);
// out[head_dim] = sum_j p[j] * v_j over n rows v (out overwritten). p[j] >= 0 (attention
// probabilities): the AVX-512 quantized sums scale their integer coefficients as unsigned.
using KvWeightedSumFn = void (*)(const float* p, const uint16_t* v, uint32_t n, uint32_t head_dim, float* out);

using KvScoresGroupFn = void (*)(const float* q, uint32_t g, const uint16_t* k, uint32_t n, uint32_t head_dim,
                                 float scale, float* s, uint64_t s_stride);
using KvWeightedSumGroupFn = void (*)(const float* p, uint64_t p_stride, uint32_t g, const uint16_t* v, uint32_t n,
                                      uint32_t head_dim, float* out);

struct AttentionKernels {
  const char* name;
  KvScoresFn scores;             // f16 rows
  KvWeightedSumFn weighted_sum;  // f16 rows
  // out[i] = half(x[i]), round to nearest even.
  void (*to_half)(const float* x, uint32_t n, uint16_t* out);
  // out[head_dim] += sum_j p[j] * v_j, continuing each output's accumulation in weighted_sum's
  // own order, so that weighted_sum over [0, a) then this over [a, n) equals weighted_sum over
  // [0, n) bit for bit (the x86 table: for head_dim a multiple of 8 other than 8). The dataflow
  // backend sums value tiles with it.
  void (*weighted_sum_more)(const float* p, const uint16_t* v, uint32_t n, uint32_t head_dim, float* out);
  KvScoresFn scores_q8;
  KvWeightedSumFn weighted_sum_q8;
  KvScoresFn scores_q4;
  KvWeightedSumFn weighted_sum_q4;
  // Grouped-query attention over f16 rows: the g queries of the heads that share one KV head,
  // each row converted once for all of them. Query i at q + i * head_dim, its scores at
  // s + i * s_stride; probabilities of query i at p + i * p_stride, its output at
  // out + i * head_dim. Each query's results are bit for bit what `scores` and `weighted_sum`
  // give for it alone. nullptr where a table has none (callers then take the queries one by one).
  KvScoresGroupFn scores_group = nullptr;
  KvWeightedSumGroupFn weighted_sum_group = nullptr;
  // The same over q8 and q4 rows, with the same contract against scores_q8 / weighted_sum_q8 and
  // scores_q4 / weighted_sum_q4: each row is loaded (and, for the weighted sums, its bytes
  // interleaved) once for the g queries; every query quantizes its own query or coefficients.
  KvScoresGroupFn scores_q8_group = nullptr;
  KvWeightedSumGroupFn weighted_sum_q8_group = nullptr;
  KvScoresGroupFn scores_q4_group = nullptr;
  KvWeightedSumGroupFn weighted_sum_q4_group = nullptr;
  // n consecutive f16 rows of head_dim numbers turned in place by one set of RoPE angles
  // (cos[pairs], sin[pairs]; a pair is (i, i + pairs) with `halves`, else (2i, 2i + 1)), bit for
  // bit what rope_rotate_rows (kernels/rope.h) gives for KvType::F16 in the engine's build.
  void (*rotate_rows)(uint16_t* rows, uint32_t n, uint32_t head_dim, uint32_t pairs, bool halves, const float* cos,
                      const float* sin) = nullptr;

  KvScoresFn scores_of(KvType t) const { return t == KvType::Q8 ? scores_q8 : t == KvType::Q4 ? scores_q4 : scores; }
  KvWeightedSumFn weighted_sum_of(KvType t) const {
    return t == KvType::Q8 ? weighted_sum_q8 : t == KvType::Q4 ? weighted_sum_q4 : weighted_sum;
  }
  // nullptr where the table has no grouped entry for rows of type t.
  KvScoresGroupFn scores_group_of(KvType t) const {
    return t == KvType::Q8 ? scores_q8_group : t == KvType::Q4 ? scores_q4_group : scores_group;
  }
  KvWeightedSumGroupFn weighted_sum_group_of(KvType t) const {
    return t == KvType::Q8 ? weighted_sum_q8_group : t == KvType::Q4 ? weighted_sum_q4_group : weighted_sum_group;
  }
};

const AttentionKernels& attention_kernels_ref();
// nullptr when the CPU or the build lacks AVX2/F16C/FMA. The best table the CPU runs: the
// AVX-512 VNNI one when present (integer scores and weighted sums over q8/q4 rows of 64
// numbers; its f16 entries are the AVX2 table's own functions), else AVX2.
const AttentionKernels* attention_kernels_x86();
const AttentionKernels* attention_kernels_x86_avx2();
// nullptr without AVX-512 F/BW/VL/DQ/VNNI.
const AttentionKernels* attention_kernels_x86_avx512();
// arm64: the widest tier the CPU has (kernels.h names the tiers), and each tier alone.
const AttentionKernels* attention_kernels_arm64();
const AttentionKernels* attention_kernels_arm64_neon();
const AttentionKernels* attention_kernels_arm64_dotprod();
// attention_kernels_x86() on x86, attention_kernels_arm64() on arm64, else nullptr.
const AttentionKernels* attention_kernels_native();

}  // namespace keel
