// Stage 2 of RocketKV, the pure part: which cached tokens one decode step attends to. The query
// heads of a GQA group share the choice (their KV head's keys are read once). Page summaries
// (KvCache::page_min/page_max) bound a head's q.k from above without reading the keys:
//   q.k <= sum over dims i of (q_i >= 0 ? q_i * max_i : q_i * min_i)
// and only r dimensions are summed (RocketKV's reduced dimensions: an estimate, no longer a
// strict bound over all of q). Two rankings (RocketSelect, docs/kv.md):
// - Group (RocketKV's): the r dimensions where the group's |q| is largest; a page's bound
//   summed over the group's heads.
// - Head: the r dimensions where the group's |q| times the keys' spread is largest (a dimension
//   on which every key has about the same value adds the same to every page, however large q
//   is there: Gemma 3's normalized keys have such dimensions); each head's estimate scaled to a
//   logit (the attention scale over sqrt of the share of |q| the r dimensions hold, the
//   temperature correction of RocketKV and SparQ) and taken relative to that head's best page;
//   a page ranks by the head that wants it most.
#pragma once

#include <cstdint>

namespace keel {

// dims[0..r) = the r dimensions with the largest spread[i] * sum over the group's heads of
// |q[g][i]| (ties: the lower dimension), in increasing order. q: [group][head_dim]; spread:
// [head_dim] (null: all 1). r <= head_dim.
void rocketkv_choose_dims(const float* q, uint32_t group, uint32_t head_dim, const float* spread, uint32_t r,
                          uint32_t* dims);

// RocketSelect::Group. bound[j] for pages j in [0, n_pages): the group's summed upper bound
// over dims[0..r) (dims chosen with spread null). mins, maxs as below.
void rocketkv_group_bounds(const float* q, uint32_t group, uint32_t head_dim, const uint32_t* dims, uint32_t r,
                           const float* mins, const float* maxs, uint32_t stride, uint32_t n_pages, float* bound);

// RocketSelect::Head, the next two.
// est[g * est_stride + j] for pages j in [0, n_pages): head g's upper bound of q_g.k over
// dims[0..r), times scale / sqrt(share_g), share_g = sum over dims of |q_g| / sum of |q_g|.
// mins, maxs: [head_dim][stride] (page j of dimension i at i * stride + j).
void rocketkv_head_estimates(const float* q, uint32_t group, uint32_t head_dim, const uint32_t* dims, uint32_t r,
                             float scale, const float* mins, const float* maxs, uint32_t stride, uint32_t n_pages,
                             float* est, uint64_t est_stride);

// score[j] = max over heads g of (est[g][j] - max over pages of est[g]): a page's estimated
// log-probability under the head that favours it most, each head's normalizer taken as its
// largest term.
void rocketkv_page_scores(const float* est, uint32_t group, uint64_t est_stride, uint32_t n_pages, float* score);

// Pages by decreasing score (ties: the lower page) until they hold at least k tokens
// (tokens[j] per page); order[0..m) = the chosen pages in increasing order, m returned.
// `order` holds n_pages entries. Every page when they hold k tokens or fewer in all.
uint32_t rocketkv_select_pages(const float* score, const uint32_t* tokens, uint32_t n_pages, uint32_t k,
                               uint32_t* order);

}  // namespace keel
