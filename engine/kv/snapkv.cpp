#include "kv/snapkv.h"

namespace keel {

uint32_t snapkv_kernel(uint32_t kernel, uint32_t candidates, uint32_t keep) {
  if (kernel != 0) return kernel | 1u;
  if (keep == 0) return 31;
  uint32_t k = 2 * ((candidates + keep - 1) / keep) + 1;
  if (k < 3) k = 3;
  if (k > 31) k = 31;
  return k;
}

namespace {

// Higher pooled score first; equal scores: earlier token first.
inline bool before(const float* pooled, uint32_t a, uint32_t b) {
  return pooled[a] > pooled[b] || (pooled[a] == pooled[b] && a < b);
}

void sift_down(const float* pooled, uint32_t* heap, uint32_t n, uint32_t i) {
  // Min-heap by `before`: the root is the weakest of the kept candidates.
  for (;;) {
    uint32_t w = i;
    const uint32_t l = 2 * i + 1, r = l + 1;
    if (l < n && before(pooled, heap[w], heap[l])) w = l;
    if (r < n && before(pooled, heap[w], heap[r])) w = r;
    if (w == i) return;
    const uint32_t t = heap[i];
    heap[i] = heap[w];
    heap[w] = t;
    i = w;
  }
}

}  // namespace

uint32_t snapkv_select(const float* scores, uint32_t n, uint32_t keep, uint32_t kernel, float* pooled, uint32_t* heap,
                       uint32_t* out) {
  if (keep >= n) {
    for (uint32_t i = 0; i < n; ++i) out[i] = i;
    return n;
  }
  if (keep == 0) return 0;
  const uint32_t half = (kernel | 1u) / 2;
  for (uint32_t i = 0; i < n; ++i) {
    const uint32_t lo = i >= half ? i - half : 0, hi = i + half < n ? i + half : n - 1;
    float m = scores[lo];
    for (uint32_t j = lo + 1; j <= hi; ++j) m = scores[j] > m ? scores[j] : m;
    pooled[i] = m;
  }
  // Keep the best `keep` in a heap whose root is the weakest kept one.
  for (uint32_t i = 0; i < keep; ++i) heap[i] = i;
  for (uint32_t i = keep / 2; i-- > 0;) sift_down(pooled, heap, keep, i);
  for (uint32_t i = keep; i < n; ++i) {
    if (before(pooled, i, heap[0])) {
      heap[0] = i;
      sift_down(pooled, heap, keep, 0);
    }
  }
  // Original order: mark and sweep.
  for (uint32_t i = 0; i < n; ++i) pooled[i] = 0.0f;
  for (uint32_t i = 0; i < keep; ++i) pooled[heap[i]] = 1.0f;
  uint32_t k = 0;
  for (uint32_t i = 0; i < n; ++i) {
    if (pooled[i] != 0.0f) out[k++] = i;
  }
  return k;
}

}  // namespace keel
