// What the dataflow backend needs of the accelerator it emulates (docs/emulator.md) to execute:
// the on-chip SRAM it tiles into and the capacity of each off-chip tier it places the weights and
// the KV cache in. Rates, bandwidths and latencies are the cost model's, on the tools side
// (tools/emulate/hw_desc.h); they change no copy the backend makes nor any counter.
#pragma once

#include <cstdint>

namespace keel {

constexpr uint32_t kHwNameBytes = 32;
constexpr uint32_t kHwMaxTiers = 2;

struct DfTier {
  char name[kHwNameBytes] = {};  // "hbm", "ddr", "lpddr"
  uint64_t capacity_bytes = 0;
};

struct DfMemory {
  char name[kHwNameBytes] = {};  // the hardware's, for refusals
  uint64_t sram_bytes = 0;
  uint32_t tier_count = 0;  // 1 or 2; tier 0 holds the weights and a spilled KV cache
  DfTier tiers[kHwMaxTiers];
};

}  // namespace keel
