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

}  // namespace keel
