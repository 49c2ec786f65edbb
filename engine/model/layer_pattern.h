// Which layers attend through a sliding window (Gemma 3's local layers) and which see the whole
// sequence: the plan sizes their caches by it (llm/plan.h), the transformer routes each layer to
// its cache, and the dataflow emulator counts each kind's attention (backend/dataflow_schedule.h).
#pragma once

#include <cstdint>

namespace keel {

// Gemma 3's layer pattern: the last layer of every group of `pattern` is global, the others are
// local (pattern 0: every layer is global).
constexpr bool layer_is_local(uint32_t layer, uint32_t pattern) { return pattern > 0 && (layer + 1) % pattern != 0; }
constexpr uint32_t local_layer_count(uint32_t n_layers, uint32_t pattern) {
  return pattern > 0 ? n_layers - n_layers / pattern : 0;
}
// A layer's index within the cache of its kind: global layers are counted among the global
// ones, local layers among the local ones.
constexpr uint32_t layer_index_in_kind(uint32_t layer, uint32_t pattern) {
  if (pattern == 0) return layer;
  return layer_is_local(layer, pattern) ? layer - layer / pattern : layer / pattern;
}

}  // namespace keel
