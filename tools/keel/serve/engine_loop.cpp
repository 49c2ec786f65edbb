#include "keel/serve/engine_loop.h"

#include <algorithm>

#include "kv/kv_policy.h"

namespace keel::cli {

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::None: return "none";
    case FinishReason::EndToken: return "end token";
    case FinishReason::MaxTokens: return "max tokens";
    case FinishReason::Budget: return "budget";
    case FinishReason::Cancelled: return "cancelled";
    case FinishReason::Failed: return "failed";
  }
  return "?";
}

EngineLoop::EngineLoop(Runtime& rt, uint32_t queue_capacity)
    : rt_(rt), queue_capacity_(queue_capacity), slots_(rt.slots()) {}

std::string EngineLoop::refusal(const LoopRequest& request) const {
  if (request.prompt.empty()) return "empty prompt: a request needs at least one token";
  if (request.max_tokens == 0) return "max_tokens 0: a request generates at least one token";
  const RuntimeConfig& cfg = rt_.config();
  const uint64_t budget = cfg.plan.kv_budget_tokens;
  if (cfg.kv.kind == KvPolicyKind::Full && request.prompt.size() + 1 > budget) {
    return "the prompt is " + std::to_string(request.prompt.size()) + " tokens; the KV budget (policy full) holds " +
           std::to_string(budget) + " tokens, prompt and generated tokens together";
  }
  return "";
}

SubmitResult EngineLoop::submit(LoopRequest request) {
  SubmitResult r;
  r.error = refusal(request);
  if (!r.error.empty()) return r;
  // Requests beyond the free slots wait; at most queue_capacity of them.
  if (queue_.size() >= queue_capacity_ + (slots() - active())) {
    r.kind = SubmitResult::QueueFull;
    return r;
  }
  r.kind = SubmitResult::Accepted;
  r.id = next_id_++;
  queue_.push_back(Queued{r.id, std::move(request)});
  return r;
}

uint32_t EngineLoop::active() const {
  return uint32_t(
      std::count_if(slots_.begin(), slots_.end(), [](const Slot& s) { return s.phase != SlotPhase::Free; }));
}

void EngineLoop::release(uint32_t slot) {
  Slot& s = slots_[slot];
  s = Slot{};
  (void)rt_.reset(slot);
}

void EngineLoop::fail(uint32_t slot, const Error& e, std::vector<LoopEvent>& events) {
  LoopEvent ev;
  ev.id = slots_[slot].id;
  ev.finish = FinishReason::Failed;
  ev.error = std::string(to_string(e.status())) + ": " + e.message();
  events.push_back(std::move(ev));
  release(slot);
}

void EngineLoop::admit(std::vector<LoopEvent>& events) {
  for (uint32_t i = 0; i < slots() && !queue_.empty(); ++i) {
    if (slots_[i].phase != SlotPhase::Free) continue;
    Slot& s = slots_[i];
    s.id = queue_.front().id;
    s.request = std::move(queue_.front().request);
    queue_.pop_front();
    s.phase = SlotPhase::Prefill;
    Error e = rt_.reset(i);
    if (e.ok()) e = rt_.set_sampler(i, s.request.sampler);
    if (!e.ok()) fail(i, e, events);
  }
}

void EngineLoop::prefill_one(std::vector<LoopEvent>& events) {
  const uint32_t n = slots();
  for (uint32_t k = 0; k < n; ++k) {
    const uint32_t i = (prefill_cursor_ + k) % n;
    Slot& s = slots_[i];
    if (s.phase != SlotPhase::Prefill) continue;
    prefill_cursor_ = (i + 1) % n;
    const RuntimeConfig& cfg = rt_.config();
    const size_t total = s.request.prompt.size(), left = total - s.prefilled;
    size_t piece = std::min<size_t>(left, cfg.plan.chunk_tokens);
    // SnapKV policies look at the end of a prompt that overflows the budget before compressing
    // its chunks (llm/runtime.cpp's lookahead); only a whole-prompt call does that.
    if (s.prefilled == 0 && kv_policy_uses_snapkv(cfg.kv.kind) && total > cfg.plan.kv_budget_tokens) piece = total;
    const Error e = rt_.prefill(i, Span<const int32_t>(s.request.prompt.data() + s.prefilled, piece));
    if (!e.ok()) {
      fail(i, e, events);
      return;
    }
    s.prefilled += uint32_t(piece);
    if (s.prefilled == total) {
      s.phase = SlotPhase::Decode;
      sample_next(i, events);
    }
    return;
  }
}

void EngineLoop::sample_next(uint32_t slot, std::vector<LoopEvent>& events) {
  Slot& s = slots_[slot];
  Result<int32_t> sampled = rt_.sample(slot);
  if (!sampled.ok()) {
    fail(slot, sampled.error(), events);
    return;
  }
  const int32_t id = sampled.value();
  const text::Tokenizer& tok = rt_.tokenizer();
  LoopEvent ev;
  ev.id = s.id;
  if (id == tok.eos_id() || id == tok.im_end_id()) {
    ev.finish = FinishReason::EndToken;
  } else {
    ev.token = id;
    ++s.generated;
    if (s.generated >= s.request.max_tokens) {
      ev.finish = FinishReason::MaxTokens;
    } else if (rt_.config().kv.kind == KvPolicyKind::Full &&
               rt_.sequence_length(slot) >= rt_.config().plan.kv_budget_tokens) {
      // The token cannot be fed back: the cache is full.
      ev.finish = FinishReason::Budget;
    }
  }
  events.push_back(ev);
  if (ev.finish != FinishReason::None)
    release(slot);
  else
    s.pending = id;
}

void EngineLoop::step(std::vector<LoopEvent>& events) {
  admit(events);
  // Slots that finish their prompt in this step get their first token from prefill_one; the
  // others that were generating before it advance by one token.
  std::vector<uint32_t> decoding;
  for (uint32_t i = 0; i < slots(); ++i) {
    if (slots_[i].phase == SlotPhase::Decode) decoding.push_back(i);
  }
  prefill_one(events);
  for (uint32_t i : decoding) {
    Slot& s = slots_[i];
    const Error e = rt_.decode(i, s.pending);
    if (!e.ok()) {
      fail(i, e, events);
      continue;
    }
    sample_next(i, events);
  }
}

bool EngineLoop::cancel(uint64_t id) {
  for (auto it = queue_.begin(); it != queue_.end(); ++it) {
    if (it->id == id) {
      queue_.erase(it);
      return true;
    }
  }
  for (uint32_t i = 0; i < slots(); ++i) {
    if (slots_[i].phase != SlotPhase::Free && slots_[i].id == id) {
      release(i);
      return true;
    }
  }
  return false;
}

void EngineLoop::slot_states(std::vector<SlotState>& out) const {
  out.clear();
  for (uint32_t i = 0; i < slots(); ++i) {
    const Slot& s = slots_[i];
    SlotState st;
    st.phase = s.phase;
    st.id = s.id;
    st.prompt_tokens = uint32_t(s.request.prompt.size());
    st.prefilled_tokens = s.prefilled;
    st.generated_tokens = s.generated;
    st.kv_tokens = rt_.kv_cache(i).visible();
    st.kv_budget = rt_.config().plan.kv_budget_tokens;
    out.push_back(st);
  }
}

}  // namespace keel::cli
