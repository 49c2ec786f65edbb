// Sizes the KV cache's owners compute and the memory plan lays out, alone in a header that
// includes nothing, so that llm/plan.h (a header firmware compiles alone) uses the same formulas.
#pragma once

#include <cstdint>

namespace keel {

// Scratch of one KvCache::compact_head call: the kept keys and values of one (layer, KV head),
// rows of `row_halves` 16-bit units each, and their positions (i32), for `capacity` entries.
constexpr uint64_t kv_compact_scratch_bytes(uint64_t capacity, uint32_t row_halves) {
  return capacity * (uint64_t(row_halves) * 4 + 4);
}

}  // namespace keel
