// SnapKV compression of a slot's cache (docs/kv.md): score every cached entry by the attention
// the last `window` queries give it, per KV head (summed over the query heads of its GQA
// group), keep sinks + window + the best-scored others, compact them into the prefix.
#include <cmath>
#include <cstring>

#include "core/check.h"
#include "core/f16.h"
#include "kv/snapkv.h"
#include "llm/transformer.h"

namespace keel {
namespace {

void rotate_pairs(float* v, uint32_t pairs, bool halves, const double* inv_freq, double delta) {
  for (uint32_t i = 0; i < pairs; ++i) {
    const double a = delta * inv_freq[i];
    const float c = float(std::cos(a)), s = float(std::sin(a));
    const uint32_t x = halves ? i : 2 * i, y = halves ? i + pairs : 2 * i + 1;
    const float v0 = v[x], v1 = v[y];
    v[x] = v0 * c - v1 * s;
    v[y] = v0 * s + v1 * c;
  }
}

void rotate_key_trampoline(void* self, uint16_t* key, int64_t from, int64_t to) {
  static_cast<const Transformer*>(self)->rotate_key(key, from, to);
}

}  // namespace

void Transformer::rotate_key(uint16_t* key, int64_t from, int64_t to) const {
  float tmp[kMaxHeadDim];
  const uint32_t hd = shape_.head_dim;
  for (uint32_t i = 0; i < hd; ++i) tmp[i] = f16_to_f32(key[i]);
  rotate_pairs(tmp, rope_dim_ / 2, rope_halves_, inv_freq_, double(to - from));
  for (uint32_t i = 0; i < hd; ++i) key[i] = f32_to_f16(tmp[i]);
}

Error Transformer::compress_snapkv(KvCache& kv, uint32_t staged, uint32_t target, uint32_t sinks, uint32_t window,
                                   uint32_t kernel) {
  KEEL_ENSURE(snap_row_ != nullptr, Status::InvalidArgument, "SnapKV compression without SnapKV buffers in the plan");
  const uint32_t total = kv.visible() + staged;
  if (total <= target) return Error();
  const uint32_t obs = kv.shape().obs_window;
  const int64_t last = kv.next_position() - 1;
  // Observation queries: the last `w` tokens, all of which the cache still holds (the window is
  // always kept), at logical indices total - w .. total - 1.
  uint32_t w = window < obs ? window : obs;
  if (int64_t(w) > last + 1) w = uint32_t(last + 1);
  if (w > total) w = total;
  const uint32_t s = sinks < total - w ? sinks : total - w;
  KEEL_ENSURE(target >= s + w, Status::BudgetTooSmall,
              "SnapKV target of %u entries cannot hold %u sinks and a %u-token window", target, s, w);
  const uint32_t candidates = total - w - s;
  const uint32_t keep_c = target - s - w;
  const uint32_t pool_kernel = snapkv_kernel(kernel, candidates, keep_c);
  const uint32_t hd = shape_.head_dim, pairs = rope_dim_ / 2, group = shape_.n_heads / shape_.n_kv_heads;
  const uint32_t prefix = kv.prefix(), ring = kv.ring_len(), cap_ring = kv.ring_capacity();
  const float scale = 1.0f / std::sqrt(float(hd));
  float qt[kMaxHeadDim], qc[kMaxHeadDim];
  // Physical order is prefix, ring slots, staging; logical order is prefix, ring oldest
  // first, staging. Scores are accumulated by logical index, where neighbours are neighbours.
  auto logical_of = [&](uint32_t phys) -> uint32_t {
    if (phys < prefix || phys >= prefix + ring) return phys;
    const uint32_t head = kv.physical(prefix) - prefix;  // ring slot of the oldest entry
    return prefix + (phys - prefix + cap_ring - head) % cap_ring;
  };

  for (uint32_t l = 0; l < shape_.n_layers; ++l) {
    for (uint32_t h = 0; h < shape_.n_kv_heads; ++h) {
      const uint16_t* keys = kv.keys(l, h);
      const int32_t* pos = kv.positions(l, h);
      for (uint32_t i = 0; i < total; ++i) snap_acc_[i] = 0.0f;
      for (uint32_t i = 0; i < w; ++i) {
        const int64_t t = last - (w - 1 - i);
        const uint32_t c = total - w + i;  // the query's own cache index
        const float* q_all = kv.observation(l, t);
        for (uint32_t g = 0; g < group; ++g) {
          const float* q = q_all + uint64_t(h * group + g) * hd;
          memcpy(qt, q, hd * 4);
          memcpy(qc, q, hd * 4);
          rotate_pairs(qt, pairs, rope_halves_, inv_freq_, double(t));
          rotate_pairs(qc, pairs, rope_halves_, inv_freq_, double(c));
          // Causal: the query sees entries with positions <= t, i.e. logical indices <= c.
          if (prefix > 0) backend_.attention->scores(qc, keys, prefix, hd, scale, snap_row_);
          backend_.attention->scores(qt, keys + uint64_t(prefix) * hd, total - prefix, hd, scale, snap_row_ + prefix);
          float mx = -INFINITY;
          for (uint32_t p = 0; p < total; ++p) {
            if (pos[p] > t) snap_row_[p] = -INFINITY;
            mx = snap_row_[p] > mx ? snap_row_[p] : mx;
          }
          double sum = 0;
          for (uint32_t p = 0; p < total; ++p) {
            const float e = snap_row_[p] == -INFINITY ? 0.0f : std::exp(snap_row_[p] - mx);
            snap_row_[p] = e;
            sum += e;
          }
          const float inv = float(1.0 / sum);
          for (uint32_t p = 0; p < total; ++p) snap_acc_[logical_of(p)] += snap_row_[p] * inv;
        }
      }
      // Keep sinks, the best candidates, the window; all in logical (= original) order.
      uint32_t* keep = snap_keep_;
      for (uint32_t i = 0; i < s; ++i) keep[i] = i;
      const uint32_t got = snapkv_select(snap_acc_ + s, candidates, keep_c, pool_kernel, snap_pool_, snap_order_, keep + s);
      for (uint32_t i = 0; i < got; ++i) keep[s + i] += s;
      for (uint32_t i = 0; i < w; ++i) keep[s + got + i] = total - w + i;
      kv.compact_head(l, h, keep, s + got + w, staged, rotate_key_trampoline, this, snap_compact_);
    }
  }
  kv.finish_compact(target, staged);
  return Error();
}

}  // namespace keel
