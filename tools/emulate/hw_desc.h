// An accelerator as `keel emulate` costs it (docs/emulator.md): a clock, compute rates per operand
// type, one on-chip SRAM and one or two off-chip tiers moved by DMA engines. Of all this the
// dataflow backend executes with the SRAM and tier capacities alone (df_memory(), the engine's
// backend/dataflow_hw.h); the rates, bandwidths and latencies only price its counters
// (emulate/cost_model.h).
#pragma once

#include "backend/dataflow_hw.h"

namespace keel {

constexpr uint32_t kHwCurvePoints = 32;

struct HwTier {
  char name[kHwNameBytes] = {};  // "hbm", "ddr", "lpddr"
  uint64_t capacity_bytes = 0;
  double bandwidth_bytes_per_s = 0;
  double latency_ns = 0;  // per DMA transfer, before its first byte arrives
};

struct HwDesc {
  char name[kHwNameBytes] = {};
  double clock_hz = 0;
  // Multiply-accumulates per cycle of the compute units by operand type: quantized weights run
  // int8 x int8 (Keel quantizes activations for them), f16/bf16 weights and f16 keys run bf16.
  double macs_per_cycle_int8 = 0;
  double macs_per_cycle_bf16 = 0;
  double macs_per_cycle_f32 = 0;
  double vector_elems_per_cycle = 0;  // norms, softmax, activations, conversions
  // Weight elements a matmul unpacks per cycle, once per call whatever its tokens (a host's
  // kernel decoding quantized blocks); 0 = no such cost (an accelerator's datapath).
  double weight_elems_per_cycle = 0;
  uint64_t sram_bytes = 0;
  double sram_bytes_per_cycle = 0;
  uint32_t tier_count = 0;  // 1 or 2; tier 0 holds the weights and a spilled KV cache
  HwTier tiers[kHwMaxTiers];
  uint32_t dma_engines = 1;  // transfers in flight at once
  // One engine computes and moves data in turn (a CPU thread streaming from DRAM): an op costs
  // the sum of its compute, SRAM and transfer time even when the schedule double-buffers.
  bool serial = false;
  // A host's last-level cache (none on an accelerator: 0 bytes). What a forward pass streams
  // from tier 0 and re-reads the next pass is served from it in the proportion it fits
  // (df_cached_fraction), at its own bandwidth.
  uint64_t cache_bytes = 0;
  double cache_bandwidth_bytes_per_s = 0;
  // Fixed cost of every op call (a kernel's dispatch and its loop set-up on a host); 0 = none.
  double call_overhead_ns = 0;
  // A host's measured share of a footprint that its cache serves from one pass to the next,
  // against the footprint (ascending sizes; `keel emulate --calibrate` derives it from the
  // medians of repeated read probes); 0 points = none, and the share is cache_bytes / footprint.
  uint32_t cache_share_points = 0;
  uint64_t cache_share_bytes[kHwCurvePoints] = {};
  double cache_share[kHwCurvePoints] = {};
};

// What the dataflow backend executes with: the name, the SRAM and the tiers' capacities.
inline DfMemory df_memory(const HwDesc& hw) {
  DfMemory m;
  for (uint32_t i = 0; i < kHwNameBytes; ++i) m.name[i] = hw.name[i];
  m.sram_bytes = hw.sram_bytes;
  m.tier_count = hw.tier_count;
  for (uint32_t t = 0; t < kHwMaxTiers; ++t) {
    for (uint32_t i = 0; i < kHwNameBytes; ++i) m.tiers[t].name[i] = hw.tiers[t].name[i];
    m.tiers[t].capacity_bytes = hw.tiers[t].capacity_bytes;
  }
  return m;
}

}  // namespace keel
