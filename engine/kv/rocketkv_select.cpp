#include "kv/rocketkv_select.h"

#include <algorithm>
#include <cmath>

namespace keel {

void rocketkv_choose_dims(const float* q, uint32_t group, uint32_t head_dim, const float* spread, uint32_t r,
                          uint32_t* dims) {
  constexpr uint32_t kMaxDims = 1024;
  float weight[kMaxDims];
  uint32_t idx[kMaxDims];
  const uint32_t d = head_dim < kMaxDims ? head_dim : kMaxDims;
  for (uint32_t i = 0; i < d; ++i) {
    float w = 0.0f;
    for (uint32_t g = 0; g < group; ++g) {
      const float x = q[uint64_t(g) * head_dim + i];
      w += x < 0.0f ? -x : x;
    }
    weight[i] = spread ? w * spread[i] : w;
    idx[i] = i;
  }
  if (r > d) r = d;
  std::partial_sort(idx, idx + r, idx + d,
                    [&](uint32_t a, uint32_t b) { return weight[a] > weight[b] || (weight[a] == weight[b] && a < b); });
  std::sort(idx, idx + r);
  for (uint32_t i = 0; i < r; ++i) dims[i] = idx[i];
}

void rocketkv_group_bounds(const float* q, uint32_t group, uint32_t head_dim, const uint32_t* dims, uint32_t r,
                           const float* mins, const float* maxs, uint32_t stride, uint32_t n_pages, float* bound) {
  for (uint32_t j = 0; j < n_pages; ++j) bound[j] = 0.0f;
  for (uint32_t a = 0; a < r; ++a) {
    const uint32_t i = dims[a];
    const float* lo = mins + uint64_t(i) * stride;
    const float* hi = maxs + uint64_t(i) * stride;
    // The group's heads on one dimension: the positive coefficients meet the page maximum, the
    // negative ones its minimum.
    float pos = 0.0f, neg = 0.0f;
    for (uint32_t g = 0; g < group; ++g) {
      const float x = q[uint64_t(g) * head_dim + i];
      if (x >= 0.0f) {
        pos += x;
      } else {
        neg += x;
      }
    }
    for (uint32_t j = 0; j < n_pages; ++j) bound[j] += pos * hi[j] + neg * lo[j];
  }
}

void rocketkv_head_estimates(const float* q, uint32_t group, uint32_t head_dim, const uint32_t* dims, uint32_t r,
                             float scale, const float* mins, const float* maxs, uint32_t stride, uint32_t n_pages,
                             float* est, uint64_t est_stride) {
  for (uint32_t g = 0; g < group; ++g) {
    const float* qg = q + uint64_t(g) * head_dim;
    float* e = est + g * est_stride;
    float all = 0.0f, chosen = 0.0f;
    for (uint32_t i = 0; i < head_dim; ++i) all += std::fabs(qg[i]);
    for (uint32_t a = 0; a < r; ++a) chosen += std::fabs(qg[dims[a]]);
    const float t = chosen > 0.0f ? scale / std::sqrt(chosen / all) : scale;
    for (uint32_t j = 0; j < n_pages; ++j) e[j] = 0.0f;
    for (uint32_t a = 0; a < r; ++a) {
      const uint32_t i = dims[a];
      const float x = qg[i] * t;
      // A positive coefficient meets the page maximum, a negative one its minimum.
      const float* src = (qg[i] >= 0.0f ? maxs : mins) + uint64_t(i) * stride;
      for (uint32_t j = 0; j < n_pages; ++j) e[j] += x * src[j];
    }
  }
}

void rocketkv_page_scores(const float* est, uint32_t group, uint64_t est_stride, uint32_t n_pages, float* score) {
  for (uint32_t j = 0; j < n_pages; ++j) score[j] = -INFINITY;
  for (uint32_t g = 0; g < group; ++g) {
    const float* e = est + g * est_stride;
    float best = -INFINITY;
    for (uint32_t j = 0; j < n_pages; ++j) best = e[j] > best ? e[j] : best;
    for (uint32_t j = 0; j < n_pages; ++j) {
      const float s = e[j] - best;
      score[j] = s > score[j] ? s : score[j];
    }
  }
}

uint32_t rocketkv_select_pages(const float* score, const uint32_t* tokens, uint32_t n_pages, uint32_t k,
                               uint32_t* order) {
  const auto before = [&](uint32_t a, uint32_t b) { return score[a] > score[b] || (score[a] == score[b] && a < b); };
  uint32_t max_tokens = 0;
  for (uint32_t j = 0; j < n_pages; ++j) {
    order[j] = j;
    max_tokens = tokens[j] > max_tokens ? tokens[j] : max_tokens;
  }
  // No page holds more than max_tokens, so the chosen prefix of the score order is at least
  // ceil(k / max_tokens) pages long. Only the chosen set matters (it is returned by index), so a
  // linear selection finds those pages instead of a sort of every page (the sort was most of a
  // decode step's selection time at a few thousand pages per head).
  uint32_t m = k == 0 ? 0 : max_tokens == 0 ? n_pages : (k + max_tokens - 1) / max_tokens;
  if (m > n_pages) m = n_pages;
  if (m > 0 && m < n_pages) std::nth_element(order, order + m - 1, order + n_pages, before);
  uint64_t held = 0;
  for (uint32_t i = 0; i < m; ++i) held += tokens[order[i]];
  // Shorter pages (the last of the prefix, the ring's newest) may leave it short: the next best
  // pages, one at a time.
  while (m < n_pages && held < k) {
    std::swap(order[m], *std::min_element(order + m, order + n_pages, before));
    held += tokens[order[m++]];
  }
  std::sort(order, order + m);
  return m;
}

}  // namespace keel
