// The sampling loop shared by run and chat: sample from the slot's logits, stream the text,
// feed the token back, stop at an end token, at N tokens or at the KV budget.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "llm/runtime.h"

namespace keel::cli {

struct Generation {
  std::string text;
  std::vector<int32_t> ids;
  uint32_t decoded = 0;        // tokens fed back through decode()
  double decode_seconds = 0;
  int32_t stop_token = -1;     // the end token that stopped it, -1 if none
  bool budget_reached = false;
};

// `out` (may be null) receives the text as it is produced. The last sampled token is fed back
// too when feed_last is set (chat needs the end token in the cache for the next turn).
bool generate(Runtime& rt, uint32_t max_tokens, const std::vector<int32_t>& stop_ids, bool feed_last, FILE* out,
              Generation& g, std::string& error);

}  // namespace keel::cli
