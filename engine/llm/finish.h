// The vocabulary of generation that generate(), the Scheduler, the C API and the serving tools
// share: why a generation ended, and which sampled tokens end it.
#pragma once

#include <cstdint>

#include "core/span.h"
#include "text/tokenizer.h"

namespace keel {

// The numbers are keel_finish's (keel.h, static_assert-ed in keel_c.cpp); keel_generate's
// keel_stop_reason numbers the same reasons in its own older order, mapped in keel_c.cpp.
enum class FinishReason : uint8_t {
  None = 0,       // not finished; from generate(): an error ended it
  MaxTokens = 1,  // the requested number of tokens was sampled
  StopToken = 2,  // a stop token was sampled (not text: generate() does not stream it)
  Cancelled = 3,  // the caller stopped it: Scheduler::cancel, or generate()'s callback returning false
  KvFull = 4,     // policy full: the budget holds no more (the prompt, or the next token)
  Error = 5,      // the runtime refused the request or its pass failed
};
const char* finish_reason_name(FinishReason r);
// The OpenAI API's finish_reason: "stop" for a stop token, "length" for max tokens and a full
// budget; null for the reasons it has no name for (not finished, cancelled, an error).
const char* finish_reason_openai(FinishReason r);

// Stop tokens a request names at most, besides the tokenizer's.
constexpr uint32_t kMaxStopTokens = 8;

// Whether `token` ends a generation: one of `stop_tokens`, or with `default_stops` the
// tokenizer's EOS or <|im_end|> (either may be absent: -1, which no token equals).
bool is_stop(const text::Tokenizer& tok, bool default_stops, Span<const int32_t> stop_tokens, int32_t token);

}  // namespace keel
