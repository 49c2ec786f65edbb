#include "llm/finish.h"

namespace keel {

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::None: return "none";
    case FinishReason::MaxTokens: return "max tokens";
    case FinishReason::StopToken: return "stop token";
    case FinishReason::Cancelled: return "cancelled";
    case FinishReason::KvFull: return "kv full";
    case FinishReason::Error: return "error";
  }
  return "?";
}

const char* finish_reason_openai(FinishReason r) {
  switch (r) {
    case FinishReason::StopToken: return "stop";
    case FinishReason::MaxTokens:
    case FinishReason::KvFull: return "length";
    case FinishReason::None:
    case FinishReason::Cancelled:
    case FinishReason::Error: return nullptr;
  }
  return nullptr;
}

bool is_stop(const text::Tokenizer& tok, bool default_stops, Span<const int32_t> stop_tokens, int32_t token) {
  if (token < 0) return false;
  if (default_stops && (token == tok.eos_id() || token == tok.im_end_id())) return true;
  for (const int32_t s : stop_tokens) {
    if (s == token) return true;
  }
  return false;
}

}  // namespace keel
