// Generation on one slot: prefill the prompt, then sample, stream the text and feed each token
// back until an end token, N tokens, the KV budget (policy full) or the caller says stop. What
// every application around the runtime needs (keel run, keel chat, firmware), with no
// allocation, no I/O and no clock: the text is streamed through a callback in UTF-8-complete
// pieces (text::StreamDecoder over a fixed buffer on the stack), and timing takes the caller's
// clock when one is given.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/span.h"
#include "core/status.h"
#include "llm/finish.h"
#include "llm/runtime.h"
#include "text/sampler.h"
#include "text/stream_decoder.h"

namespace keel {

// Text bytes one token may stream (StreamDecoder's worst case for it); a token whose text
// needs more fails generate() with InvalidArgument naming both numbers.
constexpr size_t kGenerateTextBytes = 512;

struct GenerateOptions {
  uint32_t max_tokens = 128;  // tokens to generate at most; 0 = prefill only
  // Tokens that end the generation (not streamed, not counted) besides the defaults.
  int32_t stop_tokens[kMaxStopTokens] = {};
  uint32_t n_stop_tokens = 0;
  bool default_stops = true;  // the tokenizer's EOS and <|im_end|> stop too
  // The token that ends the generation (stop token or the last one) is fed back as well, so
  // the cache holds it for the next turn (chat).
  bool feed_last = false;
  // Sets the slot's sampler first; null keeps the slot's sampler and its random state.
  const text::SamplerConfig* sampler = nullptr;
  text::DecodeOptions decode;
  // Monotonic seconds for GenerateResult's timings; null = no timing.
  double (*now)() = nullptr;
};

struct GenerateResult {
  uint32_t tokens_generated = 0;  // sampled tokens streamed (stop tokens excluded)
  uint32_t tokens_decoded = 0;    // tokens fed back through decode()
  uint32_t prompt_tokens = 0;     // prefilled
  // MaxTokens, StopToken (stop_token), Cancelled (the callback returned false), KvFull (policy
  // full: the sequence filled the budget), or None when an error ended it.
  FinishReason finish = FinishReason::None;
  int32_t stop_token = -1;     // the stop token sampled, -1 if none
  double prefill_seconds = 0;  // with GenerateOptions::now
  double decode_seconds = 0;
};

// Called for every generated token with the text it completes (UTF-8 complete; may be empty
// while a character is still incomplete, or for a control token), then once with token -1 for
// the bytes the end of the stream flushes, if any. Return false to stop (the token that
// stopped it is fed back only with feed_last).
using TokenCallback = bool (*)(void* ctx, int32_t token, const char* text, size_t len);

// Prefills `prompt` on `slot` (empty: continue from the slot's current logits), then generates.
// `callback` may be null; `result` may be null. Errors of prefill, sample and decode are
// returned as they are (KvFull when a prompt overflows a full budget); `result` then holds
// what was done before.
Error generate(Runtime& rt, uint32_t slot, Span<const int32_t> prompt, const GenerateOptions& options,
               TokenCallback callback, void* ctx, GenerateResult* result);

}  // namespace keel
