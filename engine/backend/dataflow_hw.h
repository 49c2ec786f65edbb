// An accelerator the dataflow backend emulates (docs/emulator.md): a clock, compute rates per
// operand type, one on-chip SRAM and one or two off-chip tiers moved by DMA engines. Hosts read
// it from JSON (tools/convert/hw_json.h); the engine only sees this plain struct.
#pragma once

#include <cstdint>

namespace keel {

constexpr uint32_t kHwNameBytes = 32;
constexpr uint32_t kHwMaxTiers = 2;

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
};

}  // namespace keel
