// What a backend's per-model state may depend on, from the memory plan. Kept apart from
// backend.h so that the constexpr plan (llm/plan.h) stays a header firmware compiles alone.
#pragma once

#include <cstdint>

namespace keel {

struct BackendPlan {
  uint32_t threads = 1;          // attention workers that may run at once
  uint32_t capacity_tokens = 0;  // the longest score row: the KV capacity of a slot
};

}  // namespace keel
