// What a backend's per-model state may depend on, from the memory plan. Kept apart from
// backend.h so that the constexpr plan (llm/plan.h) stays a header firmware compiles alone.
#pragma once

#include <cstdint>

#include "core/kv_type.h"

namespace keel {

struct DfMemory;  // backend/dataflow_hw.h

struct BackendPlan {
  uint32_t threads = 1;          // attention workers that may run at once
  uint32_t capacity_tokens = 0;  // the KV capacity of a slot (its global layers')
  // The local layers' ring (sliding-window layers, Gemma 3): window + chunk entries; 0: none.
  uint32_t local_capacity_tokens = 0;
  uint32_t slots = 1;
  uint32_t chunk_tokens = 1;
  const DfMemory* memory = nullptr;  // the emulated accelerator's SRAM and tiers (dataflow only)
  KvType kv_type = KvType::F16;      // how the KV cache stores rows (core/kv_type.h)
  // Page summaries beside each layer's and KV head's keys in a slot (sparse decode; 0: none),
  // each the minimum and maximum of head_dim dimensions in f32.
  uint32_t kv_pages = 0;
};

}  // namespace keel
