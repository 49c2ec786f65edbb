#include "kv/slot_memory.h"

#include <cinttypes>

#include "core/check.h"

namespace keel {

Error SlotMemory::init(const KvShape& global, const KvBuffers& global_buffers, const KvShape& local,
                       const KvBuffers& local_buffers, int32_t* lookahead_tokens, KvManager* policy) {
  KEEL_ENSURE(policy != nullptr, Status::InvalidArgument, "a slot's memory needs the KV policy");
  policy_ = policy;
  look_tokens_ = lookahead_tokens;
  KEEL_TRY(global_.init(global, global_buffers));
  has_local_ = local.n_layers > 0;
  if (has_local_) KEEL_TRY(local_.init(local, local_buffers));
  clear();
  return Error();
}

Error SlotMemory::begin_prompt(Span<const int32_t> prompt) {
  KEEL_TRY(policy_->make_room(global_, prompt.size()));
  // SnapKV scores each chunk's compression also by the prompt's last queries, computed first.
  const uint32_t look = policy_->lookahead_tokens(global_, prompt.size());
  KEEL_ENSURE(look == 0 || look_tokens_ != nullptr, Status::Internal, "the plan lacks the lookahead's tokens");
  for (uint32_t i = 0; i < look; ++i) look_tokens_[i] = prompt[prompt.size() - look + i];
  look_count_ = look;
  pending_ = look > 0;
  return Error();
}

Span<const int32_t> SlotMemory::begin_lookahead() {
  // The local ring takes part in the pass and is left as it was too: its staged entries are
  // dropped and its position rewound.
  global_.begin_lookahead();
  if (has_local_) local_.begin_lookahead();
  pending_ = false;
  return Span<const int32_t>(look_tokens_, look_count_);
}

void SlotMemory::end_lookahead(bool ok) {
  global_.end_lookahead(ok ? look_count_ : 0);
  if (has_local_) local_.end_lookahead(0);
  look_age_ = 0;
}

Error SlotMemory::settle(uint32_t n, bool prompt, bool prompt_end) {
  // The last chunk holds the real end of the prompt: its own queries are the lookahead.
  KEEL_TRY(policy_->settle(global_, n, prompt, prompt && look_count_ > 0 && !prompt_end));
  // Whatever the policy, a local layer keeps its window: the newest entries of a ring.
  if (has_local_) local_.append_ring(n);
  if (!prompt) return Error();
  if (prompt_end) {
    // The last chunk's compression took back what the hold kept for it (docs/kv.md); none of
    // it outlives the prompt.
    global_.drop_lookahead();
    global_.drop_hold();
    look_count_ = 0;
    pending_ = false;
  } else if (look_count_ > 0 && policy_->lookahead_due(global_, ++look_age_)) {
    // The question is run again against what the cache holds now (docs/kv.md).
    pending_ = true;
  }
  return Error();
}

void SlotMemory::clear() {
  global_.clear();
  local_.clear();
  look_count_ = 0;
  look_age_ = 0;
  pending_ = false;
}

}  // namespace keel
