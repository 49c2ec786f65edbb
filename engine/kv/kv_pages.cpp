// KvCache's page summaries (kv_cache.h, "Page summaries"): the element-wise minimum and maximum
// of the keys of each page, which sparse decode attention bounds q.k with. A page is always
// recomputed whole from its rows: a ring overwrite can lower a maximum, which no running update
// could undo. A decode step touches one page per (layer, head), P rows.
#include <cmath>
#include <cstdint>

#include "kv/kv_cache.h"

namespace keel {
namespace {

constexpr uint32_t kMaxPageRow = 1024;  // numbers of one key (the engine's largest head)

}  // namespace

void KvCache::page_sizes(uint32_t* tokens) const {
  // Every page is whole but the last of the prefix and the last of the ring.
  const uint32_t p = shape_.page_tokens, pre = prefix_pages(), n = page_count();
  for (uint32_t j = 0; j < n; ++j) tokens[j] = p;
  if (pre > 0) tokens[pre - 1] = prefix_ - (pre - 1) * p;
  if (n > pre) tokens[n - 1] = ring_len_ - (n - 1 - pre) * p;
}

void KvCache::refresh_pages(uint32_t l, uint32_t h, uint32_t prefix, uint32_t ring_len, uint32_t first, uint32_t last) {
  const uint32_t p = shape_.page_tokens, hd = shape_.head_dim, stride = shape_.max_pages;
  const uint32_t pre = (prefix + p - 1) / p;
  float* mins = pages_ + slab_pages(l, h) * 2 * hd;
  float* maxs = mins + uint64_t(hd) * stride;
  const uint16_t* k = keys(l, h);
  float lo[kMaxPageRow], hi[kMaxPageRow], x[kMaxPageRow];
  for (uint32_t page = first; page < last; ++page) {
    uint32_t begin, end;
    if (page < pre) {
      begin = page * p;
      end = (page + 1) * p < prefix ? (page + 1) * p : prefix;
    } else {
      const uint32_t r = page - pre;
      begin = prefix + r * p;
      end = prefix + ((r + 1) * p < ring_len ? (r + 1) * p : ring_len);
    }
    for (uint32_t i = 0; i < hd; ++i) {
      lo[i] = INFINITY;
      hi[i] = -INFINITY;
    }
    for (uint32_t e = begin; e < end; ++e) {
      kv_dequantize_row(shape_.kv_type, k + uint64_t(e) * row_halves_, hd, x);
      for (uint32_t i = 0; i < hd; ++i) {
        lo[i] = x[i] < lo[i] ? x[i] : lo[i];
        hi[i] = x[i] > hi[i] ? x[i] : hi[i];
      }
    }
    for (uint32_t i = 0; i < hd; ++i) {
      mins[uint64_t(i) * stride + page] = lo[i];
      maxs[uint64_t(i) * stride + page] = hi[i];
    }
  }
}

void KvCache::refresh_all_pages(uint32_t l, uint32_t h, uint32_t prefix, uint32_t ring_len) {
  const uint32_t p = shape_.page_tokens;
  refresh_pages(l, h, prefix, ring_len, 0, (prefix + p - 1) / p + (ring_len + p - 1) / p);
}

void KvCache::count_key(uint32_t l, uint32_t h, uint32_t e, double sign) {
  const uint32_t hd = shape_.head_dim;
  double* sum = moments_ + (uint64_t(l) * shape_.n_kv_heads + h) * 2 * hd;
  double* sq = sum + hd;
  float x[kMaxPageRow];
  kv_dequantize_row(shape_.kv_type, keys(l, h) + uint64_t(e) * row_halves_, hd, x);
  for (uint32_t i = 0; i < hd; ++i) {
    sum[i] += sign * x[i];
    sq[i] += sign * double(x[i]) * x[i];
  }
}

void KvCache::recount_keys(uint32_t l, uint32_t h, uint32_t n) {
  double* m = moments_ + (uint64_t(l) * shape_.n_kv_heads + h) * 2 * shape_.head_dim;
  for (uint32_t i = 0; i < 2 * shape_.head_dim; ++i) m[i] = 0.0;
  for (uint32_t e = 0; e < n; ++e) count_key(l, h, e, 1.0);
}

void KvCache::key_spread(uint32_t l, uint32_t h, float* spread) const {
  const uint32_t hd = shape_.head_dim, n = visible();
  const double* sum = key_moments(l, h);
  const double* sq = sum + hd;
  for (uint32_t i = 0; i < hd; ++i) {
    const double mean = n ? sum[i] / n : 0.0, var = n ? sq[i] / n - mean * mean : 0.0;
    spread[i] = var > 0.0 ? float(std::sqrt(var)) : 0.0f;
  }
}

void KvCache::after_append(uint32_t n) {
  if (!pages_ || ring_len_ == 0) return;
  // The newest m ring entries were written: ring slots (ring_head_ + ring_len_ - m + i) % cap.
  const uint32_t cap = ring_capacity(), p = shape_.page_tokens, pre = prefix_pages();
  const uint32_t m = n < ring_len_ ? n : ring_len_;
  for (uint32_t l = 0; l < shape_.n_layers; ++l) {
    for (uint32_t h = 0; h < shape_.n_kv_heads; ++h) {
      if (m >= ring_len_) {
        refresh_all_pages(l, h, prefix_, ring_len_);
        continue;
      }
      uint32_t done = UINT32_MAX;
      for (uint32_t i = 0; i < m; ++i) {
        const uint32_t page = pre + (ring_head_ + ring_len_ - m + i) % cap / p;
        if (page == done) continue;
        refresh_pages(l, h, prefix_, ring_len_, page, page + 1);
        done = page;
      }
    }
  }
}

}  // namespace keel
