#include "llm/sequence.h"

#include "core/check.h"

namespace keel {

const char* slot_phase_name(SlotPhase p) {
  switch (p) {
    case SlotPhase::Free: return "free";
    case SlotPhase::Prefilling: return "prefilling";
    case SlotPhase::Decoding: return "decoding";
  }
  return "?";
}

void Sequence::start(Span<const int32_t> prompt_tokens, uint32_t max_new, bool default_stop_tokens,
                     Span<const int32_t> stops) {
  *this = Sequence();
  prompt = prompt_tokens.data();
  prompt_len = prompt_tokens.size();
  phase = prompt_tokens.empty() ? SlotPhase::Decoding : SlotPhase::Prefilling;
  max_new_tokens = max_new;
  for (size_t i = 0; i < stops.size() && i < kMaxStopTokens; ++i) stop_tokens[i] = stops[i];
  n_stop_tokens = uint32_t(stops.size() < kMaxStopTokens ? stops.size() : kMaxStopTokens);
  default_stops = default_stop_tokens;
}

Error Sequence::plan(Runtime& rt, uint32_t slot, uint32_t rows, SlotWork& w) {
  w = SlotWork();
  w.slot = slot;
  if (phase == SlotPhase::Decoding) {
    if (rows == 0) return Error();
    w.tokens = &next_token;
    w.n = 1;
    return Error();
  }
  if (phase != SlotPhase::Prefilling) return Error();
  if (!started) {
    KEEL_TRY(rt.begin_prompt(slot, Span<const int32_t>(prompt, size_t(prompt_len))));
    started = true;
  }
  const uint32_t chunk = rt.config().plan.chunk_tokens;
  const uint64_t left = prompt_len - prompt_done;
  const uint32_t take = uint32_t(left < chunk ? left : chunk);
  if (take > rows) return Error();
  w.tokens = prompt + prompt_done;
  w.n = take;
  w.prompt = true;
  w.prompt_end = take == left;
  return Error();
}

bool Sequence::advance(const SlotWork& w) {
  if (!w.prompt) return true;
  prompt_done += w.n;
  if (!w.prompt_end) return false;
  phase = SlotPhase::Decoding;
  return true;
}

SequenceToken Sequence::next(Runtime& rt, uint32_t slot) {
  SequenceToken t;
  if (max_new_tokens == 0) {
    t.finish = FinishReason::MaxTokens;
    return t;
  }
  const Result<int32_t> sampled = rt.sample(slot);
  if (!sampled.ok()) {
    t.finish = FinishReason::Error;
    t.error = sampled.error();
    return t;
  }
  t.token = next_token = sampled.value();
  ++generated;
  if (is_stop(rt.tokenizer(), default_stops, Span<const int32_t>(stop_tokens, n_stop_tokens), t.token)) {
    t.finish = FinishReason::StopToken;
  } else if (generated >= max_new_tokens) {
    t.finish = FinishReason::MaxTokens;
  }
  return t;
}

}  // namespace keel
