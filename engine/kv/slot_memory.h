// One slot's KV memory and its life through a prompt: the cache of the global layers (which the
// KV policy governs, with its observation queries, hold and page summaries), the local layers'
// ring (Gemma 3's sliding-window layers, outside the policy) and the lookahead (the prompt end's
// queries computed first, docs/kv.md "Chunked prefill and the lookahead"). The runtime asks it
// before a pass (make_room, begin_prompt), hands its caches to the forward pass, and tells it
// after (settle); the forward pass of a lookahead is the runtime's, between begin_lookahead
// and end_lookahead. All buffers are the plan's; nothing here allocates.
//
//   begin_prompt ─► [lookahead pass] ─► chunk pass ─► settle ─► (lookahead due? pass again) ─► …
//                                                     settle(prompt_end) drops lookahead, hold
#pragma once

#include <cstdint>

#include "core/result.h"
#include "core/span.h"
#include "kv/kv_cache.h"
#include "kv/kv_manager.h"

namespace keel {

class SlotMemory {
 public:
  // `local` and `local_buffers` are ignored when local.n_layers is 0. `lookahead_tokens` holds
  // obs_window tokens (the plan's), or is null when the policy never looks ahead. `policy` is
  // shared by every slot and must outlive this.
  Error init(const KvShape& global, const KvBuffers& global_buffers, const KvShape& local,
             const KvBuffers& local_buffers, int32_t* lookahead_tokens, KvManager* policy);

  KvCache& cache() { return global_; }
  const KvCache& cache() const { return global_; }
  // The local-layer ring, or null when the model has none.
  KvCache* local() { return has_local_ ? &local_ : nullptr; }
  // The ring, or an empty cache when the model has none.
  const KvCache& local_or_empty() const { return local_; }

  // KvFull when `n` more tokens would not fit and the policy cannot make room (full).
  Error make_room(uint64_t n) const { return policy_->make_room(global_, n); }
  // Before a prompt's chunks: room for all of it, and the tokens of its end to run first when
  // the policy looks ahead (lookahead_pending()).
  Error begin_prompt(Span<const int32_t> prompt);
  // Whether the prompt begin_prompt started looks ahead and the pass has not been run yet or
  // is due again (settle's `*lookahead_due`).
  bool lookahead_pending() const { return pending_; }
  // A lookahead pass: between these, a forward pass of the returned tokens writes its queries
  // aside and leaves both caches as they were (KvCache::begin_lookahead).
  Span<const int32_t> begin_lookahead();
  void end_lookahead(bool ok);

  // After a forward pass staged `n` entries: back within the budget (the policy's settle), the
  // local ring keeps its window. `prompt`: prompt tokens; `prompt_end`: the prompt's last chunk,
  // after which no lookahead or hold outlives it. Sets lookahead_pending() when the prompt end's
  // queries must be computed again before the next chunk.
  Error settle(uint32_t n, bool prompt, bool prompt_end);

  // Forgets the sequence.
  void clear();
  int64_t next_position() const { return global_.next_position(); }

 private:
  KvCache global_;
  KvCache local_;
  bool has_local_ = false;
  KvManager* policy_ = nullptr;
  int32_t* look_tokens_ = nullptr;  // [obs_window] the prompt's last tokens
  uint32_t look_count_ = 0;         // of them; 0 when the prompt does not look ahead
  uint32_t look_age_ = 0;           // prompt chunks settled since their queries were computed
  bool pending_ = false;
};

}  // namespace keel
