// SnapKV compression of a slot's cache (docs/kv.md): score every cached entry by the attention
// the last `window` queries give it (during a chunked prefill: the prompt's own last queries,
// computed ahead, instead), per KV head (summed over the query heads of its GQA group), keep
// sinks + the newest tokens + the best-scored others, compact them into the prefix.
//
// (layer, KV head) pairs are independent: they run on the thread pool, each worker with its
// own score rows and compaction buffer from the plan. The query rotations depend only on the
// query, so their cos/sin are formed once per compression, not once per head.
#include <cinttypes>
#include <cmath>
#include <cstring>

#include "core/check.h"
#include "core/f16.h"
#include "kv/snapkv.h"
#include "llm/rope.h"
#include "llm/transformer.h"

namespace keel {
namespace {

// v' = R(angle) v for each rotated pair, cos/sin given ([pairs] each).
void rotate_with(float* v, uint32_t pairs, bool halves, const float* cs, const float* sn) {
  for (uint32_t i = 0; i < pairs; ++i) {
    const uint32_t x = halves ? i : 2 * i, y = halves ? i + pairs : 2 * i + 1;
    const float v0 = v[x], v1 = v[y];
    v[x] = v0 * cs[i] - v1 * sn[i];
    v[y] = v0 * sn[i] + v1 * cs[i];
  }
}

void rotate_key_trampoline(void* self, uint16_t* key, int64_t from, int64_t to) {
  static_cast<const Transformer*>(self)->rotate_key(key, from, to);
}

}  // namespace

void Transformer::rotate_key(uint16_t* key, int64_t from, int64_t to) const {
  float tmp[kMaxHeadDim], cs[kMaxHeadDim / 2], sn[kMaxHeadDim / 2];
  const uint32_t hd = shape_.head_dim, pairs = rope_dim_ / 2;
  for (uint32_t i = 0; i < hd; ++i) tmp[i] = f16_to_f32(key[i]);
  rope_angles(double(to - from), inv_freq_, pairs, cs, sn);
  rotate_with(tmp, pairs, rope_halves_, cs, sn);
  for (uint32_t i = 0; i < hd; ++i) key[i] = f32_to_f16(tmp[i]);
}

struct Transformer::SnapJob {
  Transformer* self;
  KvCache* kv;
  uint32_t total, staged, w, first, look, s, tail, ring_keep, candidates, keep_c, pool_kernel, tasks;
  int64_t last;
};

void Transformer::snap_task(void* ctx, size_t worker) {
  const SnapJob& j = *static_cast<const SnapJob*>(ctx);
  const uint32_t pairs_total = j.self->shape_.n_layers * j.self->shape_.n_kv_heads;
  for (uint32_t i = uint32_t(worker); i < pairs_total; i += j.tasks) {
    j.self->snap_head(j, uint32_t(worker), i / j.self->shape_.n_kv_heads, i % j.self->shape_.n_kv_heads);
  }
}

void Transformer::snap_head(const SnapJob& j, uint32_t worker, uint32_t l, uint32_t h) {
  KvCache& kv = *j.kv;
  const uint32_t hd = shape_.head_dim, pairs = rope_dim_ / 2, group = shape_.n_heads / shape_.n_kv_heads;
  const uint32_t total = j.total, prefix = kv.prefix();
  const uint64_t cap = capacity_;
  float* row = snap_row_ + worker * cap;
  float* acc = snap_acc_ + worker * cap;
  float* pooled = snap_pool_ + worker * cap;
  uint32_t* order = snap_order_ + worker * cap;
  uint32_t* keep = snap_keep_ + worker * cap;
  void* compact = static_cast<uint8_t*>(snap_compact_) + worker * cap * (uint64_t(hd) * 4 + 4);
  const VectorKernels& vk = *backend_.vector;
  const uint16_t* keys = kv.keys(l, h);
  const int32_t* pos = kv.positions(l, h);
  const float scale = 1.0f / std::sqrt(float(hd));
  float qt[kMaxHeadDim], qc[kMaxHeadDim];
  for (uint32_t p = 0; p < total; ++p) acc[p] = 0.0f;

  // One query row: rotated at `t` against ring and staging (original positions) and at cache
  // index `c` against the prefix; entries after `t` are masked (causal; only ring and staging
  // can be). Rows are softmaxed, so every query carries the same weight. Scores accumulate in
  // physical order and are put in logical order (where neighbours are neighbours) at the end.
  auto add_query = [&](const float* q, int64_t t, const float* rope_t, const float* rope_c) {
    memcpy(qt, q, hd * 4);
    memcpy(qc, q, hd * 4);
    rotate_with(qt, pairs, rope_halves_, rope_t, rope_t + pairs);
    rotate_with(qc, pairs, rope_halves_, rope_c, rope_c + pairs);
    if (prefix > 0) backend_.attention->scores(qc, keys, prefix, hd, scale, row);
    backend_.attention->scores(qt, keys + uint64_t(prefix) * hd, total - prefix, hd, scale, row + prefix);
    for (uint32_t p = prefix; p < total; ++p) {
      if (pos[p] > t) row[p] = -INFINITY;
    }
    vk.softmax(row, total);
    vk.add(acc, row, total, acc);
  };
  const uint64_t rope_row = uint64_t(pairs) * 4;  // cos and sin at t, then at c
  for (uint32_t i = j.first; i < j.w + j.look; ++i) {
    const bool own = i < j.w;
    const float* q_all = own ? kv.observation(l, j.last - (j.w - 1 - i)) : kv.lookahead(l, i - j.w);
    const int64_t t = own ? j.last - (j.w - 1 - i) : j.last + 1 + (i - j.w);
    const float* r = snap_rope_ + i * rope_row;
    for (uint32_t g = 0; g < group; ++g) add_query(q_all + uint64_t(h * group + g) * hd, t, r, r + 2 * pairs);
  }
  for (uint32_t i = 0; i < total; ++i) row[i] = acc[kv.physical(i)];

  // Keep sinks, the best candidates, the tail; all in logical (= original) order.
  const uint32_t s = j.s;
  for (uint32_t i = 0; i < s; ++i) keep[i] = i;
  const uint32_t got = snapkv_select(row + s, j.candidates, j.keep_c, j.pool_kernel, pooled, order, keep + s);
  for (uint32_t i = 0; i < got; ++i) keep[s + i] += s;
  for (uint32_t i = 0; i < j.tail; ++i) keep[s + got + i] = total - j.tail + i;
  kv.compact_head(l, h, keep, s + got + j.tail, j.ring_keep, j.staged, rotate_key_trampoline, this, compact);
}

Error Transformer::compress_snapkv(KvCache& kv, uint32_t staged, uint32_t target, uint32_t sinks, uint32_t window,
                                   uint32_t kernel, bool lookahead, uint32_t recent) {
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
  // The newest `tail` entries are kept whole: the observation window, and the recent ring
  // (snapstream) when it is longer; the ring part stays a ring.
  const uint32_t ring_keep = recent < kv.ring_len() + staged ? recent : kv.ring_len() + staged;
  const uint32_t tail = ring_keep > w ? ring_keep : w;
  const uint32_t s = sinks < total - tail ? sinks : total - tail;
  const uint32_t look = lookahead ? kv.lookahead_count() : 0;
  KEEL_ENSURE(target >= s + tail, Status::BudgetTooSmall,
              "SnapKV target of %" PRIu32 " entries cannot hold %" PRIu32 " sinks and the last %" PRIu32 " tokens",
              target, s, tail);
  KEEL_ENSURE(w + look <= 2 * obs, Status::Internal, "%" PRIu32 " observation queries; the plan holds %" PRIu32,
              w + look, 2 * obs);

  // The observers: the prompt's last queries when they were computed ahead (the chunk's own
  // window only stays whole), else the window's own queries, as SnapKV defines them.
  const uint32_t first = look > 0 ? w : 0;

  // Rotations of every observation query: at its position t (against ring and staging) and at
  // its cache index c (against the prefix). The window's own queries sit at their cache
  // indices total - w + i; the lookahead queries are placed right behind the cache, where they
  // will be, at cache distance, when the end of the prompt arrives.
  const uint32_t pairs = rope_dim_ / 2;
  for (uint32_t i = first; i < w + look; ++i) {
    const bool own = i < w;
    const int64_t t = own ? last - (w - 1 - i) : last + 1 + (i - w);
    const int64_t c = own ? int64_t(total - w + i) : int64_t(total) + (i - w);
    float* r = snap_rope_ + uint64_t(i) * pairs * 4;
    rope_angles(double(t), inv_freq_, pairs, r, r + pairs);
    rope_angles(double(c), inv_freq_, pairs, r + 2 * pairs, r + 3 * pairs);
  }

  SnapJob j{};
  j.self = this;
  j.kv = &kv;
  j.total = total;
  j.staged = staged;
  j.w = w;
  j.first = first;
  j.look = look;
  j.s = s;
  j.tail = tail;
  j.ring_keep = ring_keep;
  j.candidates = total - tail - s;
  j.keep_c = target - s - tail;
  j.pool_kernel = snapkv_kernel(kernel, j.candidates, j.keep_c);
  j.last = last;
  const uint32_t heads = shape_.n_layers * shape_.n_kv_heads;
  const uint32_t threads = pool_ ? uint32_t(pool_->threads) : 1;
  j.tasks = heads < threads ? heads : threads;
  parallel_for(pool_, j.tasks, snap_task, &j);
  kv.finish_compact(target, ring_keep, staged);
  return Error();
}

}  // namespace keel
