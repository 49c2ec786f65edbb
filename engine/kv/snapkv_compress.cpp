// SnapKV compression of a slot's cache (docs/kv.md): score every cached entry by the attention
// the last observation-window queries give it (during a chunked prefill: the prompt's own last
// queries, computed ahead, instead), per KV head (summed over the query heads of its GQA
// group), keep sinks + the newest tokens + the best-scored others, compact them into the prefix.
// What a compression judged by the lookahead evicts waits in the hold; the prompt's last
// compression, judged by the real question, scores it again with the cache.
//
// (layer, KV head) pairs are independent: they run on the thread pool, each worker with its
// own score rows and compaction buffer from the plan. The query rotations depend only on the
// query, so their angles are formed once per compression, not once per head.
#include <algorithm>
#include <cinttypes>

#include "core/check.h"
#include "kv/kv_manager.h"
#include "kv/snapkv.h"

namespace keel {
namespace {

void rotate_keys_trampoline(void* hooks, uint16_t* keys, uint32_t n, int64_t by) {
  static_cast<const KvModelHooks*>(hooks)->rotate_keys(keys, n, by);
}

}  // namespace

struct KvManager::SnapJob {
  KvManager* self;
  KvCache* kv;
  // Observation queries: `obs` of the window's own (the last obs tokens), then `look` lookahead
  // queries; the first `first` of them do not vote.
  uint32_t total, staged, obs, first, look, sinks, tail, ring_keep, candidates, keep_candidates, pool_kernel, tasks;
  int64_t last;
  HoldMode hold;
  uint32_t held;  // entries of the hold scored with the cache (Take), else 0
};

void KvManager::snap_task(void* ctx, size_t worker) {
  const SnapJob& j = *static_cast<const SnapJob*>(ctx);
  const KvShape& s = j.kv->shape();
  const uint32_t pairs_total = s.n_layers * s.n_kv_heads;
  for (uint32_t i = uint32_t(worker); i < pairs_total; i += j.tasks) {
    j.self->snap_head(j, uint32_t(worker), i / s.n_kv_heads, i % s.n_kv_heads);
  }
}

void KvManager::snap_head(const SnapJob& j, uint32_t worker, uint32_t l, uint32_t h) {
  KvCache& kv = *j.kv;
  const KvShape& shape = kv.shape();
  const uint32_t hd = shape.head_dim, pairs = hooks_->rope_pairs();
  const uint32_t group = shape.q_dim / hd / shape.n_kv_heads;
  const uint32_t total = j.total, prefix = kv.index_rotated();
  const uint64_t cap = capacity_, stride = snap_.row_entries;
  float* row = snap_.rows + worker * stride;
  float* sums = snap_.sums + worker * stride;
  float* pooled = snap_.pooled + worker * stride;
  uint32_t* order = snap_.order + worker * stride;
  uint32_t* keep = snap_.keep + worker * stride;
  // Each worker's slice fits the widest row (f16), as the plan sizes it.
  void* compact = snap_.compact + worker * kv_compact_scratch_bytes(cap, kv_row_halves(KvType::F16, hd));
  const uint16_t* keys = kv.keys(l, h);
  const int32_t* pos = kv.positions(l, h);
  const uint32_t held = j.held;
  // Held keys are scored as the ring's are, at their original positions.
  if (held > 0) kv.hold_to_positions(l, h, rotate_keys_trampoline, hooks_);
  const uint16_t* hold_keys = held > 0 ? kv.hold_keys(l, h) : nullptr;
  const int32_t* hold_pos = held > 0 ? kv.hold_positions(l, h) : nullptr;
  for (uint32_t p = 0; p < total + held; ++p) sums[p] = 0.0f;

  // Every query row is softmaxed, so each carries the same weight. Scores accumulate in
  // physical order and are put in logical order (where neighbours are neighbours) at the end.
  const uint64_t rope_row = uint64_t(pairs) * 4;  // cos and sin at t, then at c
  for (uint32_t i = j.first; i < j.obs + j.look; ++i) {
    const bool own = i < j.obs;
    const float* q_all = own ? kv.observation(l, j.last - (j.obs - 1 - i)) : kv.lookahead(l, i - j.obs);
    const int64_t t = own ? j.last - (j.obs - 1 - i) : j.last + 1 + (i - j.obs);
    const float* r = snap_.rope + i * rope_row;
    for (uint32_t g = 0; g < group; ++g) {
      hooks_->attention_row(worker, q_all + uint64_t(h * group + g) * hd, r, r + 2 * pairs, keys, pos, prefix, total,
                            hold_keys, hold_pos, held, t, row);
      for (uint32_t p = 0; p < total + held; ++p) sums[p] += row[p];
    }
  }

  // Keep sinks, the best candidates, the tail; all in logical (= original) order.
  const uint32_t s = j.sinks;
  for (uint32_t i = 0; i < s; ++i) keep[i] = i;
  uint32_t got;
  if (held == 0) {
    for (uint32_t i = 0; i < total; ++i) row[i] = sums[kv.physical(i)];
    got = snapkv_select(row + s, j.candidates, j.keep_candidates, j.pool_kernel, pooled, order, keep + s);
    for (uint32_t i = 0; i < got; ++i) keep[s + i] += s;
  } else {
    uint32_t* ids = snap_.candidates + worker * stride;
    const uint32_t n = merge_hold(j, worker, l, h, sums, row, ids);
    // Pooled over positions: merged, the prefix's survivors and the held entries are array
    // neighbours hundreds of tokens apart, and pooling over the array let a strong entry carry
    // unrelated text far from it (docs/kv.md, "The hold"). `sums` is free once merged.
    snapkv_pool_by_position(
        row, n, j.pool_kernel,
        [&](uint32_t i) -> int64_t { return ids[i] >= total ? hold_pos[ids[i] - total] : pos[kv.physical(ids[i])]; },
        sums);
    got = snapkv_select(sums, n, j.keep_candidates, 1, pooled, order, keep + s);
    for (uint32_t i = 0; i < got; ++i) keep[s + i] = ids[keep[s + i]];
  }
  for (uint32_t i = 0; i < j.tail; ++i) keep[s + got + i] = total - j.tail + i;
  kv.compact_head(l, h, keep, s + got + j.tail, j.ring_keep, j.staged, rotate_keys_trampoline, hooks_, compact, j.hold);
}

uint32_t KvManager::merge_hold(const SnapJob& j, uint32_t worker, uint32_t l, uint32_t h, const float* sums,
                               float* scores, uint32_t* ids) const {
  const KvCache& kv = *j.kv;
  const int32_t* pos = kv.positions(l, h);
  const int32_t* hold_pos = kv.hold_positions(l, h);
  const uint32_t end = j.total - j.tail;
  // The held entries sorted by position (they sit in the hold in the order they left), then
  // merged with the cache's candidates, which are in position order already: max pooling then
  // sees neighbours as neighbours, as one compression of the whole prompt would.
  uint32_t a = j.sinks;
  uint32_t* by_pos = snap_.order + uint64_t(worker) * snap_.row_entries;
  const uint32_t held = j.held;
  for (uint32_t i = 0; i < held; ++i) by_pos[i] = i;
  std::sort(by_pos, by_pos + held, [hold_pos](uint32_t x, uint32_t y) { return hold_pos[x] < hold_pos[y]; });
  uint32_t b = 0, n = 0;
  while (a < end || b < held) {
    const bool from_hold = a == end || (b < held && hold_pos[by_pos[b]] < pos[kv.physical(a)]);
    if (from_hold) {
      ids[n] = j.total + by_pos[b];
      scores[n] = sums[j.total + by_pos[b]];
      ++b;
    } else {
      ids[n] = a;
      scores[n] = sums[kv.physical(a)];
      ++a;
    }
    ++n;
  }
  return n;
}

KvManager::SnapPlan KvManager::snap_plan(const KvCache& kv, uint32_t staged, const SettleStep& step,
                                         bool lookahead) const {
  SnapPlan p{};
  p.total = kv.visible() + staged;
  const uint32_t planned = kv.shape().obs_window;
  p.last = kv.next_position() - 1;
  // Observation queries: the last `obs` tokens, all of which the cache still holds (the window
  // is always kept), at logical indices total - obs .. total - 1.
  p.obs = policy_.obs_window < planned ? policy_.obs_window : planned;
  if (int64_t(p.obs) > p.last + 1) p.obs = uint32_t(p.last + 1);
  if (p.obs > p.total) p.obs = p.total;
  // The newest `tail` entries are kept whole: the observation window, and the recent ring
  // (snapstream) when it is longer; the ring part stays a ring.
  p.ring_keep = step.recent < kv.ring_len() + staged ? step.recent : kv.ring_len() + staged;
  p.tail = p.ring_keep > p.obs ? p.ring_keep : p.obs;
  p.sinks = step.sinks < p.total - p.tail ? step.sinks : p.total - p.tail;
  p.look = lookahead ? kv.lookahead_count() : 0;
  // The observers: the prompt's last queries when they were computed ahead (the chunk's own
  // window only stays whole), else the window's own queries, as SnapKV defines them.
  p.first = p.look > 0 ? p.obs : 0;
  // The hold: filled by the lookahead's judgements, emptied by the real question's.
  const bool has_hold = kv.shape().hold > 0;
  p.hold = !has_hold           ? HoldMode::None
           : p.look > 0        ? HoldMode::Fill
           : kv.hold_len() > 0 ? HoldMode::Take
                               : HoldMode::None;
  p.held = p.hold == HoldMode::Take ? kv.hold_len() : 0;
  const uint32_t fixed = p.sinks + p.tail;
  p.candidates = p.total - fixed + p.held;
  p.keep_candidates = step.target > fixed ? step.target - fixed : 0;
  p.pool_kernel = snapkv_kernel(step.kernel, p.candidates, p.keep_candidates);
  return p;
}

SnapCompression KvManager::snap_shape(const KvCache& kv, const SnapPlan& p, const SettleStep& step) const {
  SnapCompression c;
  c.queries = p.obs + p.look - p.first;
  c.total = p.total;
  c.prefix = kv.index_rotated();
  c.candidates = p.candidates;
  c.pool_kernel = p.pool_kernel;
  c.kept = step.target;
  c.rotated = kv.shape().positions == KvPositions::Original ? 0 : step.target - p.ring_keep;
  return c;
}

Error KvManager::compress_snapkv(KvCache& kv, uint32_t staged, const SettleStep& step, bool lookahead) {
  KEEL_ENSURE(snap_.rows != nullptr, Status::InvalidArgument, "SnapKV compression without SnapKV buffers in the plan");
  const uint32_t target = step.target;
  if (kv.visible() + staged <= target) return Error();
  const SnapPlan p = snap_plan(kv, staged, step, lookahead);
  const uint32_t planned = kv.shape().obs_window;
  KEEL_ENSURE(target >= p.sinks + p.tail, Status::BudgetTooSmall,
              "SnapKV target of %" PRIu32 " entries cannot hold %" PRIu32 " sinks and the last %" PRIu32 " tokens",
              target, p.sinks, p.tail);
  KEEL_ENSURE(p.obs + p.look <= 2 * planned, Status::Internal,
              "%" PRIu32 " observation queries; the plan holds %" PRIu32, p.obs + p.look, 2 * planned);
  KEEL_ENSURE(p.total + p.held <= snap_.row_entries, Status::Internal,
              "%" PRIu32 " SnapKV candidates; the plan's score rows hold %" PRIu32, p.total + p.held,
              snap_.row_entries);
  const SnapCompression shape = snap_shape(kv, p, step);

  // Rotations of every observation query: at its position t (against ring and staging) and at
  // its cache index c (against a prefix rotated at cache indices). The window's own queries sit
  // at their cache indices total - obs + i; the lookahead queries are placed right behind the
  // cache, where they will be, at cache distance, when the end of the prompt arrives. With
  // original positions every key is scored at its position: c = t.
  const uint32_t pairs = hooks_->rope_pairs();
  const bool original = kv.shape().positions == KvPositions::Original;
  for (uint32_t i = p.first; i < p.obs + p.look; ++i) {
    const bool own = i < p.obs;
    const int64_t t = own ? p.last - (p.obs - 1 - i) : p.last + 1 + (i - p.obs);
    const int64_t c = original ? t : own ? int64_t(p.total - p.obs + i) : int64_t(p.total) + (i - p.obs);
    float* r = snap_.rope + uint64_t(i) * pairs * 4;
    hooks_->rope_angles(t, r, r + pairs);
    hooks_->rope_angles(c, r + 2 * pairs, r + 3 * pairs);
  }

  SnapJob j{};
  j.self = this;
  j.kv = &kv;
  j.total = p.total;
  j.staged = staged;
  j.obs = p.obs;
  j.first = p.first;
  j.look = p.look;
  j.sinks = p.sinks;
  j.tail = p.tail;
  j.ring_keep = p.ring_keep;
  j.candidates = p.candidates;
  j.keep_candidates = p.keep_candidates;
  j.hold = p.hold;
  j.held = p.held;
  j.pool_kernel = p.pool_kernel;
  j.last = p.last;
  const uint32_t heads = kv.shape().n_layers * kv.shape().n_kv_heads;
  const uint32_t threads = pool_ ? uint32_t(pool_->threads) : 1;
  j.tasks = heads < threads ? heads : threads;
  parallel_for(pool_, j.tasks, snap_task, &j);
  kv.finish_compact(target, p.ring_keep, staged, p.hold);
  hooks_->compacted(shape);
  return Error();
}

}  // namespace keel
