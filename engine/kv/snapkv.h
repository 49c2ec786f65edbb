// SnapKV token selection (SnapKV; per KV head as in RocketKV's SnapKV++), the pure part: given
// each candidate token's observation score (attention it received from the last w queries,
// summed over those queries and over the query heads of one GQA group), smooth the scores with
// a 1-D max-pool and keep the `keep` highest, returned in original order.
#pragma once

#include <cstdint>

namespace keel {

// Pooling kernel for `candidates` tokens of which `keep` survive. Fixed: `kernel` (odd, >= 1).
// Adaptive (kernel == 0): 2 * ceil(candidates / keep) + 1, clamped to [3, 31], so the pooling
// widens as compression gets stronger (a kept token carries its neighbourhood).
uint32_t snapkv_kernel(uint32_t kernel, uint32_t candidates, uint32_t keep);

// scores[0..n) -> out[0..keep) indices in increasing order. pooled[i] = max(scores[j]) for
// |i - j| <= kernel / 2 (window clipped at the ends). Top `keep` by pooled score; ties go to the
// earlier token. `work` holds n floats and `order` n uint32 (scratch). keep >= n keeps all.
// Returns the number of indices written (min(keep, n)).
uint32_t snapkv_select(const float* scores, uint32_t n, uint32_t keep, uint32_t kernel, float* work, uint32_t* order,
                       uint32_t* out);

// Max-pooling over positions instead of array neighbours, for candidates that are not one
// contiguous stretch of text: pooled[i] = max(scores[j]) over the j with |position(j) -
// position(i)| <= kernel / 2. position(i) (int64_t) must not decrease with i. Selecting from
// `pooled` with kernel 1 then keeps what SnapKV over the whole text would keep among these
// candidates if the tokens missing between them scored nothing.
template <class PositionOf>
void snapkv_pool_by_position(const float* scores, uint32_t n, uint32_t kernel, PositionOf position, float* pooled) {
  const int64_t half = int64_t((kernel | 1u) / 2);
  uint32_t lo = 0, hi = 0;
  for (uint32_t i = 0; i < n; ++i) {
    const int64_t p = position(i);
    while (position(lo) < p - half) ++lo;
    if (hi < i) hi = i;
    while (hi + 1 < n && position(hi + 1) <= p + half) ++hi;
    float m = scores[lo];
    for (uint32_t j = lo + 1; j <= hi; ++j) m = scores[j] > m ? scores[j] : m;
    pooled[i] = m;
  }
}

}  // namespace keel
