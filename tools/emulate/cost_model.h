// The cost model of the dataflow emulator (docs/emulator.md has the formulas): what the engine's
// counters (backend/dataflow_schedule.h: bytes per tier, SRAM bytes, MACs, transfers) cost in
// cycles on a described accelerator or host. Tools only: the engine executes and counts, and
// never prices what it counts.
#pragma once

#include <cstdint>

#include "backend/dataflow_schedule.h"
#include "emulate/hw_desc.h"

namespace keel {

enum class DfBound : uint8_t { Compute, Sram, Tier0, Tier1, Latency, Cache, Overhead };
const char* df_bound_name(DfBound b);
struct DfCost {
  double compute_cycles = 0, sram_cycles = 0, tier_cycles[kHwMaxTiers] = {}, latency_cycles = 0;
  double cache_cycles = 0;     // tier-0 bytes served by the host's cache
  double overhead_cycles = 0;  // calls x call_overhead_ns
  double total_cycles = 0, stall_cycles = 0;
  DfBound bound = DfBound::Compute;
};
// Where the bytes a pass reads from off-chip tiers come from on a second look.
struct DfReuse {
  double cached = 0;  // of the tier-0 bytes, what hw's cache serves (df_cached_fraction)
  // Of KvPolicy's off-chip bytes, the re-reads of keys held in SRAM (df_snap_reread_fraction).
  double kv_policy_reread = 0;
};
// `op` matters for KvWrite (its writes are posted, so their latency is never exposed) and
// KvPolicy (`reuse.kv_policy_reread`). Overlap needs both a double-buffered schedule and
// hardware that is not `serial`.
DfCost df_cost(const DfCounters& c, const HwDesc& hw, bool double_buffered, DfOp op, const DfReuse& reuse = {});

// Bytes a forward pass with `entries` cached entries of the global layers and `local_entries` of
// the local layers' rings (their own included) reads from tier 0 and reads again the next pass:
// the streamed weights and the entries' keys and values.
uint64_t df_pass_footprint_bytes(const DfSchedule& s, const DfModel& m, uint32_t entries, uint32_t local_entries);
// What of that footprint the host's cache holds from one pass to the next (0 without a cache):
// the description's measured share at that footprint (interpolated in log size, the end
// points' shares beyond them), or without one min(1, cache / footprint).
double df_cached_fraction(const HwDesc& hw, uint64_t footprint_bytes);
// SnapKV scoring reads one KV head's keys (total x head_dim x 2 bytes) queries x group times in a
// row. When they fit the SRAM, a schedule keeps them there for all of that head's rows: every
// read but the first is a re-read from SRAM. The fraction of the counted off-chip bytes that are
// such re-reads (0 when one head's keys do not fit).
double df_snap_reread_fraction(const HwDesc& hw, const DfModel& m, const SnapCompression& j);

}  // namespace keel
