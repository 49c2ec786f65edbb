// The f16 grouped-query attention kernels (the g queries that share a KV head, each row
// converted once for all of them), shared by the AVX2 and AVX-512 translation units: the same
// 256-bit operations, taken kBlock queries at a time, where kBlock is what the unit's registers
// hold (AVX2's 16: three; AVX-512VL's 32: four, so a 4-query group such as Gemma 3's reads each
// row once instead of twice). Per query every FMA is the single-query kernel's with the same
// operands, in the same order along each chain (a score's chain runs over the head dims of its
// key, a weighted sum's over the rows for each output lane), so the results are its bits,
// whatever the block. Internal linkage on purpose: each unit compiles its own copy with its own
// ISA flags (f16_lane_sums.h).
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "kernels/attention.h"
#include "kernels/unrolled.h"
#include "kernels/x86/f16_lane_sums.h"

namespace keel {
namespace {  // NOLINT(google-build-namespaces): see above

// Rows per block of the weighted sums, which make one pass over a block per 32 output lanes: a
// block stays in L1 between the passes, so a KV head's values stream from L3 or DRAM once.
constexpr uint32_t kGroupRows = 64;

// Rows kPrefetchRows ahead toward L1, `count` of them from `rows` (each row_bytes long), none
// past `end`: a call streams a KV head's rows once from L3 or DRAM, and the hardware
// prefetchers stop at each 4 KiB page, so the arithmetic would otherwise wait on every page.
constexpr uint32_t kPrefetchRows = 128;

inline void prefetch_rows(const void* rows, const void* end, uint32_t count, uint64_t row_bytes) {
  const char* ahead = static_cast<const char*>(rows) + kPrefetchRows * row_bytes;
  const char* stop = ahead + count * row_bytes;
  if (stop > static_cast<const char*>(end)) stop = static_cast<const char*>(end);
  for (; ahead < stop; ahead += 64) _mm_prefetch(ahead, _MM_HINT_T0);
}

// The single-query f16 scores kernel's path for head_dim a multiple of 8 above 16, for G
// queries: each eight keys taken as two halves of four, whose chains end in the same shuffle
// tree; the last n % 8 keys go through `one` (the single-query kernel), as it takes them.
template <uint32_t G>
void scores_f16_block(const float* q, const uint16_t* k, uint32_t n, uint32_t hd, float scale, float* s,
                      uint64_t s_stride, KvScoresFn one) {
  const __m256 sc = _mm256_set1_ps(scale);
  uint32_t j = 0;
  for (; j + 8 <= n; j += 8) {
    prefetch_rows(k + uint64_t(j) * hd, k + uint64_t(n) * hd, 8, hd * 2);
    alignas(32) float sums[G][8][8];  // [query][key][lane]: the chains' ends, for the shuffle tree
    for (uint32_t half = 0; half < 8; half += 4) {
      const uint16_t* kj = k + uint64_t(j + half) * hd;
      __m256 a[G][4];
      unrolled<G>([&](auto g) { unrolled<4>([&](auto r) { a[g][r] = _mm256_setzero_ps(); }); });
      for (uint32_t i = 0; i < hd; i += 8) {
        unrolled<4>([&](auto r) {
          const __m256 kv = load_half8(kj + uint64_t(r) * hd + i);
          unrolled<G>(
              [&](auto g) { a[g][r] = _mm256_fmadd_ps(_mm256_loadu_ps(q + uint64_t(g) * hd + i), kv, a[g][r]); });
        });
      }
      unrolled<G>([&](auto g) { unrolled<4>([&](auto r) { _mm256_store_ps(sums[g][half + r], a[g][r]); }); });
    }
    for (uint32_t g = 0; g < G; ++g) {
      __m256 acc[8];
      for (uint32_t r = 0; r < 8; ++r) acc[r] = _mm256_load_ps(sums[g][r]);
      _mm256_storeu_ps(s + g * s_stride + j, _mm256_mul_ps(hsum8_in_order(acc), sc));
    }
  }
  for (uint32_t g = 0; g < G; ++g)
    one(q + uint64_t(g) * hd, k + uint64_t(j) * hd, n - j, hd, scale, s + g * s_stride + j);
}

// Grouped scores over f16 rows, kBlock queries at a time; `one` is the unit's single-query
// kernel (it takes the heads this path does not and single queries).
template <uint32_t kBlock>
void scores_f16_group_of(const float* q, uint32_t g, const uint16_t* k, uint32_t n, uint32_t hd, float scale, float* s,
                         uint64_t s_stride, KvScoresFn one) {
  if (hd % 8 != 0 || hd <= 16) {
    for (uint32_t i = 0; i < g; ++i) one(q + uint64_t(i) * hd, k, n, hd, scale, s + i * s_stride);
    return;
  }
  for_query_blocks<kBlock>(g, [&](uint32_t i, auto size) {
    const float* qi = q + uint64_t(i) * hd;
    float* si = s + i * s_stride;
    if constexpr (size == 1) {
      one(qi, k, n, hd, scale, si);
    } else {
      scores_f16_block<size>(qi, k, n, hd, scale, si, s_stride, one);
    }
  });
}

// W eight-lane vectors of G queries' outputs from lane c on, over rows [j0, j1): the chains are
// carried in `out` between blocks (zeroed before the first, which adds to +0 as a chain
// started from zero does).
template <uint32_t G, uint32_t W>
void weighted_sum_f16_lanes(const float* p, uint64_t p_stride, const uint16_t* v, uint32_t j0, uint32_t j1, uint32_t hd,
                            uint32_t c, float* out) {
  __m256 acc[G][W];
  unrolled<G>(
      [&](auto g) { unrolled<W>([&](auto w) { acc[g][w] = _mm256_loadu_ps(out + uint64_t(g) * hd + c + 8 * w); }); });
  for (uint32_t j = j0; j < j1; ++j) {
    __m256 pj[G];
    unrolled<G>([&](auto g) { pj[g] = _mm256_broadcast_ss(p + g * p_stride + j); });
    const uint16_t* vj = v + uint64_t(j) * hd + c;
    unrolled<W>([&](auto w) {
      const __m256 vv = load_half8(vj + 8 * w);
      unrolled<G>([&](auto g) { acc[g][w] = _mm256_fmadd_ps(pj[g], vv, acc[g][w]); });
    });
  }
  unrolled<G>(
      [&](auto g) { unrolled<W>([&](auto w) { _mm256_storeu_ps(out + uint64_t(g) * hd + c + 8 * w, acc[g][w]); }); });
}

template <uint32_t G>
void weighted_sum_f16_block(const float* p, uint64_t p_stride, const uint16_t* v, uint32_t n, uint32_t hd, float* out) {
  for (uint32_t i = 0; i < G * hd; ++i) out[i] = 0.0f;
  for (uint32_t j0 = 0; j0 < n; j0 += kGroupRows) {
    const uint32_t j1 = n - j0 < kGroupRows ? n : j0 + kGroupRows;
    prefetch_rows(v + uint64_t(j0) * hd, v + uint64_t(n) * hd, kGroupRows, hd * 2);
    uint32_t c = 0;
    for (; c + 32 <= hd; c += 32) weighted_sum_f16_lanes<G, 4>(p, p_stride, v, j0, j1, hd, c, out);
    for (; c < hd; c += 8) weighted_sum_f16_lanes<G, 1>(p, p_stride, v, j0, j1, hd, c, out);
  }
}

// Grouped weighted sums over f16 rows, kBlock queries at a time. The single-query kernel runs
// one chain per output lane over the rows for head dims that are multiples of 8 other than 8;
// other heads, and no rows (zeros), go to `one` query by query.
template <uint32_t kBlock>
void weighted_sum_f16_group_of(const float* p, uint64_t p_stride, uint32_t g, const uint16_t* v, uint32_t n,
                               uint32_t hd, float* out, KvWeightedSumFn one) {
  if (hd % 8 != 0 || hd == 8 || n == 0) {
    for (uint32_t i = 0; i < g; ++i) one(p + i * p_stride, v, n, hd, out + uint64_t(i) * hd);
    return;
  }
  for_query_blocks<kBlock>(g, [&](uint32_t i, auto size) {
    weighted_sum_f16_block<size>(p + i * p_stride, p_stride, v, n, hd, out + uint64_t(i) * hd);
  });
}

}  // namespace
}  // namespace keel
