// The one owner of KV policy (docs/kv.md): before a forward pass, whether the tokens may come
// (make_room) and whether a prompt's end must be looked at first (lookahead_tokens); after it,
// turning the staged entries into cache entries, evicting or compressing as the policy says
// (settle). SnapKV's scoring scratch and compaction live here; the model is reached only
// through KvModelHooks.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/result.h"
#include "core/threads.h"
#include "kv/kv_cache.h"
#include "kv/kv_hooks.h"
#include "kv/kv_policy.h"

namespace keel {

// SnapKV scoring scratch, per worker [threads][row_entries] unless noted (the plan's snap_*
// regions); row_entries = capacity + the hold's entries (the cache and the hold are scored
// together at the prompt's last compression).
struct SnapScratch {
  float* rows = nullptr;           // one attention row
  float* sums = nullptr;           // summed over observation queries
  float* pooled = nullptr;         // max-pooled
  uint32_t* order = nullptr;       // selection order
  uint32_t* keep = nullptr;        // kept logical indices
  uint32_t* candidates = nullptr;  // the candidates in position order, the hold merged in
  uint8_t* compact = nullptr;      // [threads][capacity][head_dim f16 K, V + position i32]
  float* rope = nullptr;           // [2 * obs_window][cos t, sin t, cos c, sin c][rope_pairs]
  uint32_t row_entries = 0;
};

class KvManager {
 public:
  // `scratch` may be empty for policies that do not use SnapKV; its per-worker rows hold
  // `capacity` entries. The pool's workers score (layer, KV head) pairs.
  Error init(const KvPolicyConfig& policy, uint32_t budget, uint32_t chunk, uint32_t capacity,
             const SnapScratch& scratch, const ThreadPool* pool, KvModelHooks* hooks);

  const KvPolicyConfig& policy() const { return policy_; }
  // KvFull when `n` more tokens would not fit and the policy cannot make room (full).
  Error make_room(const KvCache& kv, uint64_t n) const;
  // Tokens of a prompt's end to run ahead (KvCache lookahead) before a prompt of `prompt`
  // tokens: its queries score every chunk's compression. 0 when the policy does not need it.
  uint32_t lookahead_tokens(const KvCache& kv, size_t prompt) const;
  // Whether the prompt end's queries must be computed again, against the cache as it is now,
  // before the next prompt chunk: `chunks` prompt chunks have been settled since they were
  // last computed. True when that chunk will be compressed and the queries are older than the
  // time a token spends in the recent ring (docs/kv.md, "Chunked prefill and the lookahead").
  bool lookahead_due(const KvCache& kv, uint32_t chunks) const;
  // After a forward pass staged `n` entries: back within the budget. `prefill`: they are
  // prompt tokens; `lookahead`: the cache holds the prompt end's queries, which score too.
  Error settle(KvCache& kv, uint32_t n, bool prefill, bool lookahead);
  // The shape of the SnapKV compression settle(kv, n, prefill, lookahead) would run now
  // (queries 0: it runs none), what the dataflow emulator counts it by.
  SnapCompression next_compression(const KvCache& kv, uint32_t n, bool prefill, bool lookahead) const;

 private:
  // What settle does with `n` staged entries: a SnapKV compression to `target` entries of
  // prefix + ring + staged per (layer, KV head), keeping the first `sinks`, the newest `recent`
  // whole as the ring (snapstream) and the best-scored others, pooled with `kernel` (0 =
  // adaptive); else (target 0) the entries join the ring, the sinks pinned first if `pin_sinks`.
  struct SettleStep {
    uint32_t target = 0, sinks = 0, kernel = 0, recent = 0;
    bool pin_sinks = false;
  };
  SettleStep settle_step(const KvCache& kv, uint32_t n, bool prefill) const;
  // A compression's numbers, from the step and the cache as it is before it.
  struct SnapPlan {
    uint32_t total, obs, look, first, ring_keep, tail, sinks, held, candidates, keep_candidates, pool_kernel;
    int64_t last;
    HoldMode hold;
  };
  SnapPlan snap_plan(const KvCache& kv, uint32_t staged, const SettleStep& step, bool lookahead) const;
  SnapCompression snap_shape(const KvCache& kv, const SnapPlan& plan, const SettleStep& step) const;
  Error compress_snapkv(KvCache& kv, uint32_t staged, const SettleStep& step, bool lookahead);
  struct SnapJob;
  // The candidates of (layer, head) in position order with the hold merged in: ids (cache
  // logical index, or total + held entry) into `ids`, their scores (physical `sums`, the hold's
  // behind the cache's) into `scores`; returns how many.
  uint32_t merge_hold(const SnapJob& job, uint32_t worker, uint32_t layer, uint32_t head, const float* sums,
                      float* scores, uint32_t* ids) const;
  static void snap_task(void* ctx, size_t worker);
  void snap_head(const SnapJob& job, uint32_t worker, uint32_t layer, uint32_t head);

  KvPolicyConfig policy_;
  uint32_t budget_ = 0;
  uint32_t chunk_ = 0;
  uint32_t capacity_ = 0;
  SnapScratch snap_;
  const ThreadPool* pool_ = nullptr;
  KvModelHooks* hooks_ = nullptr;
};

}  // namespace keel
