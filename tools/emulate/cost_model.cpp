#include "emulate/cost_model.h"

#include <cmath>

namespace keel {

const char* df_bound_name(DfBound b) {
  switch (b) {
    case DfBound::Compute: return "compute";
    case DfBound::Sram: return "sram";
    case DfBound::Tier0: return "offchip0";
    case DfBound::Tier1: return "offchip1";
    case DfBound::Latency: return "latency";
    case DfBound::Cache: return "cache";
    case DfBound::Overhead: return "overhead";
  }
  return "?";
}

uint64_t df_pass_footprint_bytes(const DfSchedule& s, const DfModel& m, uint32_t entries, uint32_t local_entries) {
  const uint64_t entry_bytes = 2ull * m.shape.n_kv_heads * m.shape.head_dim * 2;  // one layer's K and V
  const uint64_t kv =
      entry_bytes * (uint64_t(m.global_layers()) * entries + uint64_t(m.local_layers()) * local_entries);
  return (s.weights_onchip ? 0 : s.weight_bytes) + (s.kv_onchip ? 0 : kv);
}

double df_cached_fraction(const HwDesc& hw, uint64_t footprint_bytes) {
  if (hw.cache_bytes == 0 || footprint_bytes == 0) return 0;
  const uint32_t n = hw.cache_share_points < kHwCurvePoints ? hw.cache_share_points : kHwCurvePoints;
  if (n > 0) {
    if (footprint_bytes <= hw.cache_share_bytes[0]) return hw.cache_share[0];
    for (uint32_t i = 1; i < n; ++i) {
      if (footprint_bytes > hw.cache_share_bytes[i]) continue;
      const double x0 = std::log(double(hw.cache_share_bytes[i - 1])), x1 = std::log(double(hw.cache_share_bytes[i]));
      const double t = x1 > x0 ? (std::log(double(footprint_bytes)) - x0) / (x1 - x0) : 1.0;
      return hw.cache_share[i - 1] + t * (hw.cache_share[i] - hw.cache_share[i - 1]);
    }
    return hw.cache_share[n - 1];
  }
  return hw.cache_bytes >= footprint_bytes ? 1.0 : double(hw.cache_bytes) / double(footprint_bytes);
}

double df_snap_reread_fraction(const HwDesc& hw, const DfModel& m, const SnapCompression& j) {
  const uint32_t group = m.shape.n_kv_heads ? m.shape.n_heads / m.shape.n_kv_heads : 1;
  const uint64_t rows = uint64_t(j.queries) * group;
  const uint64_t head_keys_bytes = uint64_t(j.total) * m.shape.head_dim * 2;
  if (rows == 0 || head_keys_bytes > hw.sram_bytes) return 0;
  return 1.0 - 1.0 / double(rows);
}

DfCost df_cost(const DfCounters& c, const HwDesc& hw, bool double_buffered, DfOp op, const DfReuse& reuse) {
  DfCost k;
  auto rate = [](double r) { return r > 0 ? r : 1e-30; };
  const double reread = op == DfOp::KvPolicy ? reuse.kv_policy_reread : 0;
  const double first_read = 1 - reread;
  k.compute_cycles =
      double(c.macs_int8) / rate(hw.macs_per_cycle_int8) + double(c.macs_bf16) / rate(hw.macs_per_cycle_bf16) +
      double(c.macs_f32) / rate(hw.macs_per_cycle_f32) + double(c.vector_elems) / rate(hw.vector_elems_per_cycle);
  if (hw.weight_elems_per_cycle > 0) k.compute_cycles += double(c.weight_elems) / hw.weight_elems_per_cycle;
  const double reread_bytes = double(c.tier_bytes[0] + c.tier_bytes[1]) * reread;
  k.sram_cycles = (double(c.sram_bytes) + reread_bytes) / rate(hw.sram_bytes_per_cycle);
  const double cached = hw.cache_bytes > 0 && hw.cache_bandwidth_bytes_per_s > 0 ? reuse.cached : 0;
  double latency_all = 0;
  for (uint32_t i = 0; i < hw.tier_count && i < kHwMaxTiers; ++i) {
    const double from_tier = double(c.tier_bytes[i]) * first_read * (i == 0 ? 1 - cached : 1);
    k.tier_cycles[i] = from_tier * hw.clock_hz / rate(hw.tiers[i].bandwidth_bytes_per_s);
    latency_all += double(c.tier_transfers[i]) * first_read * hw.tiers[i].latency_ns * 1e-9 * hw.clock_hz /
                   double(hw.dma_engines ? hw.dma_engines : 1);
  }
  if (cached > 0)
    k.cache_cycles = double(c.tier_bytes[0]) * first_read * cached * hw.clock_hz / hw.cache_bandwidth_bytes_per_s;
  k.overhead_cycles = double(c.calls) * hw.call_overhead_ns * 1e-9 * hw.clock_hz;
  const double parts[] = {k.compute_cycles, k.sram_cycles, k.tier_cycles[0], k.tier_cycles[1], k.cache_cycles};
  const DfBound part_bound[] = {DfBound::Compute, DfBound::Sram, DfBound::Tier0, DfBound::Tier1, DfBound::Cache};
  uint32_t worst = 0;
  for (uint32_t i = 1; i < 5; ++i)
    if (parts[i] > parts[worst]) worst = i;
  if (double_buffered && !hw.serial) {
    // Transfers overlap compute and each other; a transfer's latency hides behind the previous
    // tile's, except for the first transfer of each call on each tier.
    for (uint32_t i = 0; i < hw.tier_count && i < kHwMaxTiers; ++i) {
      const uint64_t exposed = op == DfOp::KvWrite ? 0 : c.tier_transfers[i] < c.calls ? c.tier_transfers[i] : c.calls;
      k.latency_cycles += double(exposed) * hw.tiers[i].latency_ns * 1e-9 * hw.clock_hz;
    }
    k.total_cycles = parts[worst] + k.latency_cycles + k.overhead_cycles;
  } else {
    k.latency_cycles = latency_all;
    k.total_cycles = parts[0] + parts[1] + parts[2] + parts[3] + parts[4] + latency_all + k.overhead_cycles;
  }
  k.bound = part_bound[worst];
  if (k.latency_cycles > parts[worst] && k.latency_cycles >= k.overhead_cycles) k.bound = DfBound::Latency;
  if (k.overhead_cycles > parts[worst] && k.overhead_cycles > k.latency_cycles) k.bound = DfBound::Overhead;
  k.stall_cycles = k.total_cycles - k.compute_cycles;
  return k;
}

}  // namespace keel
