#include "kv/rocketkv_select.h"

#include <cmath>
#include <cstring>

namespace keel {
namespace {

typedef float f32x8 __attribute__((vector_size(32)));

// The summary rows the next accumulation will read, fetched while this one runs: one
// dimension's row is a few KB, too short for the hardware prefetcher to reach speed on before
// it ends. Null: nothing.
struct Next {
  const float* x = nullptr;
  const float* y = nullptr;
};

inline void fetch(const Next& next, uint32_t j) {
  if (next.x) __builtin_prefetch(next.x + j);
  if (next.y) __builtin_prefetch(next.y + j);
}

// acc[j] += a * x[j] + b * y[j] over n pages, eight at a time in the compiler's generic vectors
// (SSE on the x86 baseline, plain code where there is no SIMD): element for element the same
// operations as the scalar tail, so the result does not depend on where a page falls.
void accumulate(float* acc, float a, const float* x, float b, const float* y, uint32_t n, const Next& next) {
  uint32_t j = 0;
  for (; j + 8 <= n; j += 8) {
    if (j % 16 == 0) fetch(next, j);  // a cache line of each
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
void accumulate(float* acc, float a, const float* x, uint32_t n, const Next& next) {
  uint32_t j = 0;
  for (; j + 8 <= n; j += 8) {
    if (j % 16 == 0) fetch(next, j);
    f32x8 s, u;
    memcpy(&s, acc + j, sizeof s);
    memcpy(&u, x + j, sizeof u);
    s += a * u;
    memcpy(acc + j, &s, sizeof s);
  }
  for (; j < n; ++j) acc[j] += a * x[j];
}

// An unsigned key in the order of the floats (-0 taken as +0, as the comparisons take it).
inline uint32_t order_key(float x) {
  x += 0.0f;
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  return u & 0x80000000u ? ~u : u | 0x80000000u;
}

inline float from_order_key(uint32_t u) {
  u = u & 0x80000000u ? u & 0x7fffffffu : ~u;
  float x;
  memcpy(&x, &u, sizeof x);
  return x;
}

// The m-th largest of x[0..n) (1 <= m <= n), found digit by digit of its key from the top. The
// bits all keys share (the scores of one step span a few binades) are skipped; each digit's
// histogram picks the digit and keeps the candidates that share the digits so far (in
// `scratch`, n entries). *equal_wanted = how many of the values equal to it rank within the
// first m, *equal_all = how many there are.
float mth_largest(const float* x, uint32_t n, uint32_t m, uint32_t* scratch, uint32_t* equal_wanted,
                  uint32_t* equal_all) {
  constexpr uint32_t kDigitBits = 8, kBins = 1u << kDigitBits;
  uint32_t lo = 0xffffffffu, hi = 0;
  for (uint32_t j = 0; j < n; ++j) {
    const uint32_t key = order_key(x[j]);
    scratch[j] = key;
    lo = key < lo ? key : lo;
    hi = key > hi ? key : hi;
  }
  uint32_t prefix = lo & hi, need = m, n_cand = n;
  if (lo != hi) {
    // Digits end at bit `top` of the highest bit where the keys differ, whole digits below.
    int top = 31;
    while (((lo ^ hi) >> top) == 0) --top;
    // A shift by 32 is undefined: when the keys differ in the top bit, no bits are shared.
    prefix = top == 31 ? 0 : hi >> (top + 1) << (top + 1);
    for (int shift = top + 1 - int(kDigitBits); shift > -int(kDigitBits); shift -= int(kDigitBits)) {
      const uint32_t at = shift > 0 ? uint32_t(shift) : 0, bits = uint32_t(shift + int(kDigitBits)) - at;
      const uint32_t mask = (1u << bits) - 1;
      // Four histograms, summed after: runs of equal digits would otherwise chain every
      // increment through the same counter.
      uint32_t count[4][kBins] = {};
      uint32_t j = 0;
      for (; j + 4 <= n_cand; j += 4) {
        ++count[0][(scratch[j] >> at) & mask];
        ++count[1][(scratch[j + 1] >> at) & mask];
        ++count[2][(scratch[j + 2] >> at) & mask];
        ++count[3][(scratch[j + 3] >> at) & mask];
      }
      for (; j < n_cand; ++j) ++count[0][(scratch[j] >> at) & mask];
      uint32_t digit = mask;
      for (;; --digit) {
        const uint32_t c = count[0][digit] + count[1][digit] + count[2][digit] + count[3][digit];
        if (c >= need) break;
        need -= c;
      }
      prefix |= digit << at;
      // In place (kept <= j): four keys are loaded before any of them is stored, so no load
      // waits on the store before it.
      uint32_t kept = 0;
      for (j = 0; j + 4 <= n_cand; j += 4) {
        const uint32_t k0 = scratch[j], k1 = scratch[j + 1], k2 = scratch[j + 2], k3 = scratch[j + 3];
        scratch[kept] = k0;
        kept += ((k0 >> at) & mask) == digit;
        scratch[kept] = k1;
        kept += ((k1 >> at) & mask) == digit;
        scratch[kept] = k2;
        kept += ((k2 >> at) & mask) == digit;
        scratch[kept] = k3;
        kept += ((k3 >> at) & mask) == digit;
      }
      for (; j < n_cand; ++j) {
        const uint32_t key = scratch[j];
        scratch[kept] = key;
        kept += ((key >> at) & mask) == digit;
      }
      n_cand = kept;
      if (at == 0) break;
    }
  }
  *equal_wanted = need;
  *equal_all = n_cand;
  return from_order_key(prefix);
}

// out[0..m) = the indices of the m largest of x[0..n) (1 <= m <= n; equal values: the lower
// index first), in increasing order; `out` holds n entries (scratch until written). Returns
// the m-th largest and sets *last_tie to the last index taken that equals it.
float take_top(const float* x, uint32_t n, uint32_t m, uint32_t* out, uint32_t* last_tie) {
  uint32_t ties = 0, equal = 0;  // values equal to the cut: taken (lowest first), in all
  const float cut = mth_largest(x, n, m, out, &ties, &equal);
  // The last index equal to the cut that is taken: usually every such one is.
  uint32_t tie_limit = n - 1;
  if (ties < equal) {
    for (uint32_t j = 0, seen = 0; j < n; ++j) {
      seen += x[j] == cut;
      if (seen == ties) {
        tie_limit = j;
        break;
      }
    }
  }
  // Branch-free: which entries are taken is as good as random to a predictor.
  uint32_t taken = 0, last = 0;
  for (uint32_t j = 0; j < n; ++j) {
    const float v = x[j];
    const uint32_t equal_taken = (v == cut) & (j <= tie_limit), take = (v > cut) | equal_taken;
    last = equal_taken ? j : last;
    out[taken] = j;
    taken += take;
  }
  *last_tie = last;
  return cut;
}

// The group's heads on dimension i: the positive coefficients meet the page maximum, the
// negative ones its minimum.
void group_coefficients(const float* q, uint32_t group, uint32_t head_dim, uint32_t i, float* pos, float* neg) {
  *pos = 0.0f, *neg = 0.0f;
  for (uint32_t g = 0; g < group; ++g) {
    const float x = q[uint64_t(g) * head_dim + i];
    if (x >= 0.0f) {
      *pos += x;
    } else {
      *neg += x;
    }
  }
}

}  // namespace

void rocketkv_choose_dims(const float* q, uint32_t group, uint32_t head_dim, const float* spread, uint32_t r,
                          uint32_t* dims) {
  constexpr uint32_t kMaxDims = 1024;
  float weight[kMaxDims];
  uint32_t top[kMaxDims];
  const uint32_t d = head_dim < kMaxDims ? head_dim : kMaxDims;
  for (uint32_t i = 0; i < d; ++i) {
    float w = 0.0f;
    for (uint32_t g = 0; g < group; ++g) {
      const float x = q[uint64_t(g) * head_dim + i];
      w += x < 0.0f ? -x : x;
    }
    weight[i] = spread ? w * spread[i] : w;
  }
  if (r > d) r = d;
  if (r == 0) return;
  uint32_t last_tie;
  take_top(weight, d, r, top, &last_tie);
  for (uint32_t i = 0; i < r; ++i) dims[i] = top[i];
}

void rocketkv_group_bounds(const float* q, uint32_t group, uint32_t head_dim, const uint32_t* dims, uint32_t r,
                           const float* mins, const float* maxs, uint32_t stride, uint32_t n_pages, float* bound) {
  for (uint32_t j = 0; j < n_pages; ++j) bound[j] = 0.0f;
  float pos = 0.0f, neg = 0.0f;
  if (r > 0) group_coefficients(q, group, head_dim, dims[0], &pos, &neg);
  for (uint32_t a = 0; a < r; ++a) {
    const uint32_t i = dims[a];
    const float* lo = mins + uint64_t(i) * stride;
    const float* hi = maxs + uint64_t(i) * stride;
    // A summary row whose coefficient is zero (every head of the group has the same sign on i)
    // is not read.
    float next_pos = 0.0f, next_neg = 0.0f;
    Next next;
    if (a + 1 < r) {
      const uint32_t i_next = dims[a + 1];
      group_coefficients(q, group, head_dim, i_next, &next_pos, &next_neg);
      if (next_pos != 0.0f) next.x = maxs + uint64_t(i_next) * stride;
      if (next_neg != 0.0f) next.y = mins + uint64_t(i_next) * stride;
    }
    if (neg == 0.0f) {
      accumulate(bound, pos, hi, n_pages, next);
    } else if (pos == 0.0f) {
      accumulate(bound, neg, lo, n_pages, next);
    } else {
      accumulate(bound, pos, hi, neg, lo, n_pages, next);
    }
    pos = next_pos, neg = next_neg;
  }
}

void rocketkv_head_estimates(const float* q, uint32_t group, uint32_t head_dim, const uint32_t* dims, uint32_t r,
                             float scale, const float* mins, const float* maxs, uint32_t stride, uint32_t n_pages,
                             float* est, uint64_t est_stride) {
  // A positive coefficient meets the page maximum, a negative one its minimum.
  const auto row = [&](uint32_t g, uint32_t a) {
    const uint32_t i = dims[a];
    return (q[uint64_t(g) * head_dim + i] >= 0.0f ? maxs : mins) + uint64_t(i) * stride;
  };
  for (uint32_t g = 0; g < group; ++g) {
    const float* qg = q + uint64_t(g) * head_dim;
    float* e = est + g * est_stride;
    float all = 0.0f, chosen = 0.0f;
    for (uint32_t i = 0; i < head_dim; ++i) all += std::fabs(qg[i]);
    for (uint32_t a = 0; a < r; ++a) chosen += std::fabs(qg[dims[a]]);
    const float t = chosen > 0.0f ? scale / std::sqrt(chosen / all) : scale;
    for (uint32_t j = 0; j < n_pages; ++j) e[j] = 0.0f;
    for (uint32_t a = 0; a < r; ++a) {
      Next next;
      if (a + 1 < r) {
        next.x = row(g, a + 1);
      } else if (g + 1 < group) {
        next.x = row(g + 1, 0);
      }
      accumulate(e, qg[dims[a]] * t, row(g, a), n_pages, next);
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
  // radix selection over the scores, and one pass in page order takes the pages above it and,
  // lowest first, those equal to it, so the set comes out in increasing order. (Sorting page
  // indices by score was most of a decode step's selection time at a few thousand pages per
  // head; a comparison-based selection still mispredicts about every other branch.)
  uint32_t m = k == 0 ? 0 : max_tokens == 0 ? n_pages : (k + max_tokens - 1) / max_tokens;
  if (m >= n_pages) {
    for (uint32_t j = 0; j < n_pages; ++j) order[j] = j;
    return n_pages;
  }
  if (m == 0) return 0;
  uint32_t last_tie = 0, n = m;
  float cut = take_top(score, n_pages, m, order, &last_tie);
  uint64_t held = 0;
  for (uint32_t i = 0; i < m; ++i) held += tokens[order[i]];
  // Shorter pages (the last of the prefix, the ring's newest) may leave it short: the next best
  // pages, one at a time. Everything after (cut, last_tie) in the score order is unchosen.
  while (n < n_pages && held < k) {
    uint32_t best = n_pages;
    for (uint32_t j = 0; j < n_pages; ++j) {
      const bool unchosen = score[j] < cut || (score[j] == cut && j > last_tie);
      if (unchosen && (best == n_pages || score[j] > score[best])) best = j;
    }
    if (best == n_pages) break;  // only unordered scores (NaN) left
    cut = score[best], last_tie = best;
    uint32_t at = n++;
    for (; at > 0 && order[at - 1] > best; --at) order[at] = order[at - 1];
    order[at] = best;
    held += tokens[best];
  }
  return n;
}

}  // namespace keel
