#include "kv/kv_manager.h"

#include <cinttypes>

#include "core/check.h"

namespace keel {

Error KvManager::init(const KvPolicyConfig& policy, uint32_t budget, uint32_t chunk, uint32_t capacity,
                      const SnapScratch& scratch, const ThreadPool* pool, KvModelHooks* hooks) {
  KEEL_TRY(validate_kv_policy(policy, budget, chunk));
  KEEL_ENSURE(!kv_policy_uses_snapkv(policy.kind) ||
                  (scratch.rows && scratch.sums && scratch.pooled && scratch.order && scratch.keep &&
                   scratch.candidates && scratch.compact && scratch.rope && scratch.row_entries >= capacity && hooks),
              Status::InvalidArgument, "policy %s needs SnapKV scoring buffers in the plan",
              kv_policy_name(policy.kind));
  policy_ = policy;
  budget_ = budget;
  chunk_ = chunk;
  capacity_ = capacity;
  snap_ = scratch;
  pool_ = pool;
  hooks_ = hooks;
  return Error();
}

Error KvManager::make_room(const KvCache& kv, uint64_t n) const {
  // Only `full` refuses: it may grow to the budget, never past it. The others evict or compress.
  if (policy_.kind != KvPolicyKind::Full) return Error();
  KEEL_ENSURE(kv.visible() + n <= budget_, Status::KvFull,
              "sequence of %" PRIu32 " tokens + %llu new exceeds the KV budget of %" PRIu32 " tokens (policy full)",
              kv.visible(), (unsigned long long)n, budget_);
  return Error();
}

uint32_t KvManager::lookahead_tokens(const KvCache& kv, size_t prompt) const {
  // Otherwise a chunk is judged only by its own end, before the question at the prompt's end
  // exists, and what the question asks for may already be gone (docs/kv.md).
  if (!kv_policy_uses_snapkv(policy_.kind) || uint64_t(kv.visible()) + prompt <= budget_ || prompt <= chunk_) return 0;
  uint32_t n = kv.shape().obs_window;
  if (n > chunk_) n = chunk_;
  if (n > policy_.obs_window) n = policy_.obs_window;
  if (n > prompt) n = uint32_t(prompt);
  return n;
}

bool KvManager::lookahead_due(const KvCache& kv, uint32_t chunks) const {
  if (!kv_policy_uses_snapkv(policy_.kind) || kv.visible() + chunk_ <= budget_) return false;
  // A token is first judged when it leaves the ring, ring / chunk compressions after it came;
  // queries at most that old were computed while it was in the cache, so the question's
  // retrieval heads, which look for what the text holds, have seen it.
  const uint32_t ring = kv_policy_is_snapstream_like(policy_.kind) ? snapstream_window(policy_, budget_) : 0;
  const uint32_t period = ring / chunk_ > 1 ? ring / chunk_ : 1;
  return chunks >= period;
}

KvManager::SettleStep KvManager::settle_step(const KvCache& kv, uint32_t n, bool prefill) const {
  const KvPolicyConfig& p = policy_;
  const bool overflow = kv.visible() + n > budget_;
  SettleStep step;
  switch (p.kind) {
    case KvPolicyKind::Full:
    case KvPolicyKind::Window: break;
    case KvPolicyKind::Streaming: step.pin_sinks = overflow && kv.prefix() == 0 && kv.evicted() == 0; break;
    case KvPolicyKind::SnapKV:
      if (overflow) step = {prefill ? budget_ : snapkv_decode_target(budget_, chunk_), 0, snap_kernel_of(p), 0};
      break;
    case KvPolicyKind::SnapStream:
    case KvPolicyKind::RocketKV:
      // Prompt chunks (and a first overflow while decoding) are compressed by SnapKV: the newest
      // `ring` tokens stay whole in the recent ring, the older ones compete for the prefix.
      // Afterwards generated tokens cycle through the ring, pushing out the prompt's tail.
      if (overflow && (prefill || kv.prefix() == 0))
        step = {budget_, p.sinks, snap_kernel_of(p), snapstream_window(p, budget_)};
      break;
  }
  return step;
}

Error KvManager::settle(KvCache& kv, uint32_t n, bool prefill, bool lookahead) {
  KEEL_ENSURE(uint32_t(policy_.kind) < kKvPolicyCount, Status::Internal, "unknown KV policy %u",
              unsigned(policy_.kind));
  const SettleStep step = settle_step(kv, n, prefill);
  if (step.target > 0) return compress_snapkv(kv, n, step, lookahead);
  if (step.pin_sinks) kv.pin_sinks(policy_.sinks);
  kv.append_ring(n);
  return Error();
}

SnapCompression KvManager::next_compression(const KvCache& kv, uint32_t n, bool prefill, bool lookahead) const {
  const SettleStep step = settle_step(kv, n, prefill);
  if (step.target == 0 || kv.visible() + n <= step.target) return SnapCompression();
  return snap_shape(kv, snap_plan(kv, n, step, lookahead), step);
}

}  // namespace keel
