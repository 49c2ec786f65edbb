// Stage 2 of RocketKV, the pure part: which cached tokens one decode step attends to. The query
// heads of a GQA group share the choice (their KV head's keys are read once). Page summaries
// (KvCache::page_min/page_max) bound q.k from above without reading the keys:
//   q.k <= sum over dims i of (q_i >= 0 ? q_i * max_i : q_i * min_i)
// and only the r dimensions where the group's |q| is largest are summed (RocketKV's reduced
// dimensions: an estimate, no longer a strict bound over all of q).
#pragma once

#include <cstdint>

namespace keel {

// dims[0..r) = the r dimensions with the largest sum over the group's heads of |q[g][i]|
// (ties: the lower dimension), in increasing order. q: [group][head_dim]. r <= head_dim.
void rocketkv_choose_dims(const float* q, uint32_t group, uint32_t head_dim, uint32_t r, uint32_t* dims);

// bound[j] for pages j in [0, n_pages): the group's summed upper bound over dims[0..r).
// mins, maxs: [head_dim][stride] (page j of dimension i at i * stride + j).
void rocketkv_page_bounds(const float* q, uint32_t group, uint32_t head_dim, const uint32_t* dims, uint32_t r,
                          const float* mins, const float* maxs, uint32_t stride, uint32_t n_pages, float* bound);

// Pages by decreasing bound (ties: the lower page) until they hold at least k tokens
// (tokens[j] per page); order[0..m) = the chosen pages in increasing order, m returned.
// `order` holds n_pages entries. Every page when they hold k tokens or fewer in all.
uint32_t rocketkv_select_pages(const float* bound, const uint32_t* tokens, uint32_t n_pages, uint32_t k,
                               uint32_t* order);

}  // namespace keel
