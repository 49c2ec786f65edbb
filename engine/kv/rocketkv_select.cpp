#include "kv/rocketkv_select.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace keel {
namespace {

// acc[j] += a * x[j] + b * y[j] over n pages, eight at a time in the compiler's generic vectors
// (SSE on the x86 baseline, plain code where there is no SIMD): element for element the same
// operations as the scalar tail, so the result does not depend on where a page falls.
void accumulate(float* acc, float a, const float* x, float b, const float* y, uint32_t n) {
  typedef float f32x8 __attribute__((vector_size(32)));
  uint32_t j = 0;
  for (; j + 8 <= n; j += 8) {
    f32x8 s, u, v;
    memcpy(&s, acc + j, sizeof s);
    memcpy(&u, x + j, sizeof u);
    memcpy(&v, y + j, sizeof v);
    s += a * u + b * v;
    memcpy(acc + j, &s, sizeof s);
  }
  for (; j < n; ++j) acc[j] += a * x[j] + b * y[j];
}

// acc[j] += a * x[j], the same way.
void accumulate(float* acc, float a, const float* x, uint32_t n) {
  typedef float f32x8 __attribute__((vector_size(32)));
  uint32_t j = 0;
  for (; j + 8 <= n; j += 8) {
    f32x8 s, u;
    memcpy(&s, acc + j, sizeof s);
    memcpy(&u, x + j, sizeof u);
    s += a * u;
    memcpy(acc + j, &s, sizeof s);
  }
  for (; j < n; ++j) acc[j] += a * x[j];
}

}  // namespace

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
    accumulate(bound, pos, hi, neg, lo, n_pages);
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
      accumulate(e, x, src, n_pages);
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
  uint32_t max_tokens = 0;
  for (uint32_t j = 0; j < n_pages; ++j) max_tokens = tokens[j] > max_tokens ? tokens[j] : max_tokens;
  // No page holds more than max_tokens, so the chosen prefix of the score order (decreasing
  // score, the lower page first among equals) is at least m = ceil(k / max_tokens) pages long.
  // Only the chosen set matters (it is returned by index): the m-th best score is found by a
  // linear selection over the scores themselves, and one pass in page order takes the pages
  // above it and, lowest first, those equal to it, so the set comes out in increasing order.
  // (Sorting page indices by score, then the chosen ones by index, was most of a decode step's
  // selection time at a few thousand pages per head.)
  uint32_t m = k == 0 ? 0 : max_tokens == 0 ? n_pages : (k + max_tokens - 1) / max_tokens;
  if (m >= n_pages) {
    for (uint32_t j = 0; j < n_pages; ++j) order[j] = j;
    return n_pages;
  }
  if (m == 0) return 0;
  float* sorted = reinterpret_cast<float*>(order);  // scratch until order is written below
  for (uint32_t j = 0; j < n_pages; ++j) sorted[j] = score[j];
  std::nth_element(sorted, sorted + (n_pages - m), sorted + n_pages);
  float cut = sorted[n_pages - m];  // the m-th largest
  uint32_t ties = m;
  for (uint32_t j = 0; j < n_pages; ++j) ties -= score[j] > cut;
  uint32_t n = 0, last_tie = 0;
  uint64_t held = 0;
  for (uint32_t j = 0; j < n_pages; ++j) {
    if (score[j] > cut || (score[j] == cut && ties > 0)) {
      if (score[j] == cut) --ties, last_tie = j;
      order[n++] = j;
      held += tokens[j];
    }
  }
  // Shorter pages (the last of the prefix, the ring's newest) may leave it short: the next best
  // pages, one at a time. Everything after (cut, last_tie) in the score order is unchosen.
  while (n < n_pages && held < k) {
    uint32_t best = n_pages;
    for (uint32_t j = 0; j < n_pages; ++j) {
      const bool unchosen = score[j] < cut || (score[j] == cut && j > last_tie);
      if (unchosen && (best == n_pages || score[j] > score[best])) best = j;
    }
    cut = score[best], last_tie = best;
    uint32_t at = n++;
    for (; at > 0 && order[at - 1] > best; --at) order[at] = order[at - 1];
    order[at] = best;
    held += tokens[best];
  }
  return n;
}

}  // namespace keel
