// One request's progress through its slot: the step Scheduler::step takes for each of its slots
// and generate() takes for its one, so that a request runs the same passes, samples at the same
// points and ends for the same reasons alone or batched. A step is: plan() adds the sequence's
// entry to a pass (its one decode token, or its prompt's next whole chunk, begin_prompt running
// before the first), Runtime::run runs the pass, advance() records what it did, and when the
// slot's logits are the next token's, next() samples that token and judges it (a stop token, the
// last of max_new_tokens). The sequence lives in its caller's memory (a scheduler record,
// generate()'s stack) and allocates nothing; what comes around a step (admission, streaming text,
// a callback, timing) is the caller's.
#pragma once

#include <cstdint>

#include "core/span.h"
#include "core/status.h"
#include "llm/finish.h"
#include "llm/runtime.h"

namespace keel {

enum class SlotPhase : uint8_t { Free, Prefilling, Decoding };
const char* slot_phase_name(SlotPhase p);

// What next() found: the token sampled (-1 when none) and whether it ends the sequence.
struct SequenceToken {
  int32_t token = -1;
  FinishReason finish = FinishReason::None;  // None, StopToken, MaxTokens, or Error (sampling failed)
  Error error;                               // with Error: the sampler's
};

struct Sequence {
  const int32_t* prompt = nullptr;  // caller-owned [prompt_len], valid until the prompt's last chunk ran
  uint64_t prompt_len = 0;
  uint64_t prompt_done = 0;  // of the prompt through the model
  bool started = false;      // begin_prompt ran
  SlotPhase phase = SlotPhase::Free;
  uint32_t max_new_tokens = 0;  // 0: the prompt only, nothing sampled
  uint32_t generated = 0;       // tokens sampled, stop tokens included
  int32_t next_token = -1;      // the last token sampled: what a decode entry feeds
  int32_t stop_tokens[kMaxStopTokens] = {};
  uint32_t n_stop_tokens = 0;
  bool default_stops = true;

  // A prompt to run (empty: the slot's logits are already the next token's), then at most
  // max_new_tokens sampled tokens. At most kMaxStopTokens stop tokens (callers check).
  void start(Span<const int32_t> prompt_tokens, uint32_t max_new, bool default_stop_tokens, Span<const int32_t> stops);
  // The entry this sequence adds to a pass that has `rows` rows left: its decode token, or its
  // prompt's next chunk (chunk_tokens, the last may be shorter) when it fits; w.n is 0 when it
  // adds nothing. The first chunk runs begin_prompt first, whose error is returned as it is (the
  // slot is then as it was).
  Error plan(Runtime& rt, uint32_t slot, uint32_t rows, SlotWork& w);
  // After a pass ran `w` with status Ok: the prompt's progress. True when the slot's logits are
  // now the next token's (a decode entry, or the prompt's last chunk).
  bool advance(const SlotWork& w);
  // Samples the next token from the slot's logits and judges it; with max_new_tokens 0, samples
  // nothing and finishes with MaxTokens.
  SequenceToken next(Runtime& rt, uint32_t slot);
};

}  // namespace keel
