// The memory plan: every byte the engine uses, computed once from (model shape, KV policy,
// budget, slots, chunk, threads) before the first token. It is constexpr, so firmware sizes
// static arenas at compile time from the header `keel convert --header` emits.
//
// The plan is one table of regions (kRegions): name, arena, element size, and a count derived
// from the shape and configuration. One walk over that table (plan_memory) gives every region
// its offset and the arenas their totals; init places each buffer at its planned offset
// (RegionMap), and `keel info --json` reports the same table. A new buffer is one new row.
#pragma once

#include <cstdint>

#include "backend/backend_plan.h"
#include "kernels/act_block.h"
#include "core/kv_type.h"
#include "kv/kv_cache_size.h"
#include "kv/kv_policy.h"
#include "kv/rocketkv_split.h"
#include "llm/record_sizes.h"
#include "model/layer_pattern.h"
#include "text/text_sizes.h"

namespace keel {

struct PlanShape {
  uint32_t vocab_size;
  uint32_t dim;
  uint32_t n_layers;
  uint32_t n_heads;
  uint32_t n_kv_heads;
  uint32_t head_dim;
  uint32_t ffn_dim;
  uint32_t tokenizer_bytes;  // tokenizer lookup tables (engine/text), from the model file
  // Layers that attend through a sliding window (Gemma 3's local layers) and that window in
  // tokens; 0 and 0 for models whose every layer sees the whole sequence.
  uint32_t local_layers = 0;
  uint32_t sliding_window = 0;
};

struct PlanConfig {
  uint32_t kv_budget_tokens = 1024;
  uint32_t slots = 1;
  uint32_t chunk_tokens = 64;
  uint32_t threads = 1;
  uint32_t logit_rows = 1;       // tokens of a chunk whose logits are computed together (ppl: more)
  KvType kv_type = KvType::F16;  // how cached keys and values are stored (core/kv_type.h)
  // Requests the scheduler (llm/scheduler.h) holds waiting while every slot is busy.
  uint32_t queue_capacity = 0;
  // Persistent bytes of backend state that exists only at run time (XNNPACK's operators and its
  // packed copy of the F32 weights), measured by backend_state_bytes() (backend/registry.h).
  // 0 for the ref and native backends, and in firmware plans.
  uint64_t backend_bytes = 0;
  // The SRAM and off-chip tiers of the accelerator the dataflow backend emulates (the caller
  // keeps it alive; its rates are the tools' cost model's, not the plan's); null otherwise.
  const DfMemory* dataflow_memory = nullptr;
};

constexpr uint64_t kPlanAlign = 64;
constexpr uint64_t plan_align(uint64_t n) { return (n + kPlanAlign - 1) / kPlanAlign * kPlanAlign; }

// A prompt chunk's tokens (at least one), and the entries a global-layer cache holds per layer
// and KV head: the budget plus one chunk staged before the policy settles it.
constexpr uint32_t plan_chunk(const PlanConfig& c) { return c.chunk_tokens ? c.chunk_tokens : 1; }
constexpr uint64_t plan_kv_capacity(const PlanConfig& c) { return uint64_t(c.kv_budget_tokens) + plan_chunk(c); }

// Rows of one forward pass: one prompt chunk plus the decode token of every other slot
// (the scheduler fills a step with at most this many; one slot alone runs chunks of `chunk`).
constexpr uint64_t plan_step_rows(uint32_t chunk_tokens, uint32_t slots) {
  return uint64_t(chunk_tokens ? chunk_tokens : 1) + (slots ? slots : 1) - 1;
}
// Query heads one attention work item may take together: those sharing a KV head (grouped-query
// attention), at most four; each needs its own score row and re-rotated query per worker.
constexpr uint32_t kMaxQueryRows = 4;
constexpr uint32_t plan_query_rows(uint32_t n_heads, uint32_t n_kv_heads) {
  const uint32_t group = n_kv_heads ? n_heads / n_kv_heads : 1;
  return group < 1 ? 1 : group > kMaxQueryRows ? kMaxQueryRows : group;
}

enum class PlanArena : uint8_t { Persistent, Scratch };

// What a region is for; MemoryPlan sums the bytes of each.
enum class RegionGroup : uint8_t {
  Tokenizer,
  Rope,
  Backend,
  Kv,
  Logits,
  Records,  // the runtime's slot records and the scheduler's request records and step entries
  Activations,
  Attention,
  LogitRows,
  Sampler,
  Text
};

// Every buffer, in placement order within its arena. Per-slot regions are laid out slot after
// slot, each slot's block holding all of them in this order.
enum class Region : uint8_t {
  // persistent
  Tokenizer,
  RopeInvFreq,
  BackendState,
  SlotRecords,
  Requests,
  KvKeysValues,
  KvPositions,
  KvLocalKeysValues,
  KvLocalPositions,
  KvObservations,
  KvLookahead,
  KvLookaheadTokens,
  KvHoldKeysValues,
  KvHoldPositions,
  KvPages,
  KvKeyMoments,
  Logits,  // per slot
  // scratch: one chunk's activations, reused layer after layer
  X,
  Xb,
  Q,
  K,
  V,
  Att,
  Hb,
  Hb2,
  Xq,
  RopeCos,
  RopeSin,
  AttRows,
  QRot,
  ShiftCos,
  ShiftSin,
  SnapRows,
  SnapSums,
  SnapPooled,
  SnapOrder,
  SnapKeep,
  SnapCandidates,
  SnapCompact,
  SnapRope,
  SparseGather,
  SparsePositions,
  SparseSelect,
  LogitRows,
  StepSegments,
  Sampler,
  Text,
  kCount
};
constexpr uint32_t kRegionCount = uint32_t(Region::kCount);

struct RegionInfo {
  Region id;
  const char* name;
  PlanArena arena;
  RegionGroup group;
  bool per_slot;
  uint32_t elem_bytes;
  const char* shape;  // of one instance, in elements
};

inline constexpr RegionInfo kRegions[kRegionCount] = {
    {Region::Tokenizer, "tokenizer", PlanArena::Persistent, RegionGroup::Tokenizer, false, 1,
     "[tokenizer_bytes] tables"},
    {Region::RopeInvFreq, "rope_inv_freq", PlanArena::Persistent, RegionGroup::Rope, false, 8, "[2][head_dim/2] f64"},
    {Region::BackendState, "backend_state", PlanArena::Persistent, RegionGroup::Backend, false, 1, "[backend_bytes]"},
    {Region::SlotRecords, "slot_records", PlanArena::Persistent, RegionGroup::Records, false, 1,
     "[slots][kSlotRecordBytes]"},
    {Region::Requests, "requests", PlanArena::Persistent, RegionGroup::Records, false, 1,
     "[slots + queue][kRequestRecordBytes] request records, [slots][kSlotWorkBytes] step entries"},
    {Region::KvKeysValues, "kv_keys_values", PlanArena::Persistent, RegionGroup::Kv, true, 2,
     "[K,V][global layers][kv_heads][capacity][row] f16 rows, or q8/q4 rows with scales (core/kv_type.h)"},
    {Region::KvPositions, "kv_positions", PlanArena::Persistent, RegionGroup::Kv, true, 4,
     "[global layers][kv_heads][capacity] i32"},
    {Region::KvLocalKeysValues, "kv_local_keys_values", PlanArena::Persistent, RegionGroup::Kv, true, 2,
     "[K,V][local layers][kv_heads][local capacity][row], rows as kv_keys_values"},
    {Region::KvLocalPositions, "kv_local_positions", PlanArena::Persistent, RegionGroup::Kv, true, 4,
     "[local layers][kv_heads][local capacity] i32"},
    {Region::KvObservations, "kv_observations", PlanArena::Persistent, RegionGroup::Kv, true, 4,
     "[global layers][obs_window][n_heads*head_dim] f32"},
    {Region::KvLookahead, "kv_lookahead", PlanArena::Persistent, RegionGroup::Kv, true, 4,
     "[global layers][obs_window][n_heads*head_dim] f32"},
    {Region::KvLookaheadTokens, "kv_lookahead_tokens", PlanArena::Persistent, RegionGroup::Kv, true, 4,
     "[obs_window] i32: the prompt's last tokens, run again as the cache changes"},
    {Region::KvHoldKeysValues, "kv_hold_keys_values", PlanArena::Persistent, RegionGroup::Kv, true, 2,
     "[K,V][global layers][kv_heads][hold][row]: entries the lookahead evicted, for the question to judge again"},
    {Region::KvHoldPositions, "kv_hold_positions", PlanArena::Persistent, RegionGroup::Kv, true, 4,
     "[global layers][kv_heads][hold][position, rotation] i32"},
    {Region::KvPages, "kv_pages", PlanArena::Persistent, RegionGroup::Kv, true, 4,
     "[global layers][kv_heads][min, max][head_dim][max_pages] f32 (sparse attention)"},
    {Region::KvKeyMoments, "kv_key_moments", PlanArena::Persistent, RegionGroup::Kv, true, 8,
     "[global layers][kv_heads][sum, sum of squares][head_dim] f64 over the visible keys (--rocket-select head)"},
    {Region::Logits, "logits", PlanArena::Persistent, RegionGroup::Logits, true, 4, "[vocab] f32"},
    {Region::X, "x", PlanArena::Scratch, RegionGroup::Activations, false, 4, "[rows][dim] f32"},
    {Region::Xb, "xb", PlanArena::Scratch, RegionGroup::Activations, false, 4, "[rows][dim] f32"},
    {Region::Q, "q", PlanArena::Scratch, RegionGroup::Activations, false, 4, "[rows][n_heads*head_dim] f32"},
    {Region::K, "k", PlanArena::Scratch, RegionGroup::Activations, false, 4, "[rows][n_kv_heads*head_dim] f32"},
    {Region::V, "v", PlanArena::Scratch, RegionGroup::Activations, false, 4, "[rows][n_kv_heads*head_dim] f32"},
    {Region::Att, "att", PlanArena::Scratch, RegionGroup::Activations, false, 4, "[rows][n_heads*head_dim] f32"},
    {Region::Hb, "hb", PlanArena::Scratch, RegionGroup::Activations, false, 4, "[rows][ffn_dim] f32"},
    {Region::Hb2, "hb2", PlanArena::Scratch, RegionGroup::Activations, false, 4, "[rows][ffn_dim] f32"},
    {Region::Xq, "xq", PlanArena::Scratch, RegionGroup::Activations, false, uint32_t(sizeof(ActBlock)),
     "[rows][blocks of the widest matmul input] ActBlock"},
    {Region::RopeCos, "rope_cos", PlanArena::Scratch, RegionGroup::Activations, false, 4, "[rows][head_dim/2] f32"},
    {Region::RopeSin, "rope_sin", PlanArena::Scratch, RegionGroup::Activations, false, 4, "[rows][head_dim/2] f32"},
    {Region::AttRows, "att_rows", PlanArena::Scratch, RegionGroup::Attention, false, 4,
     "[threads][query rows][max(capacity, local capacity)] f32"},
    {Region::QRot, "q_rotated", PlanArena::Scratch, RegionGroup::Attention, false, 4,
     "[threads][query rows][head_dim] f32"},
    {Region::ShiftCos, "shift_cos", PlanArena::Scratch, RegionGroup::Attention, false, 4, "[slots][head_dim/2] f32"},
    {Region::ShiftSin, "shift_sin", PlanArena::Scratch, RegionGroup::Attention, false, 4, "[slots][head_dim/2] f32"},
    {Region::SnapRows, "snap_rows", PlanArena::Scratch, RegionGroup::Attention, false, 4,
     "[threads][capacity + hold] f32"},
    {Region::SnapSums, "snap_sums", PlanArena::Scratch, RegionGroup::Attention, false, 4,
     "[threads][capacity + hold] f32"},
    {Region::SnapPooled, "snap_pooled", PlanArena::Scratch, RegionGroup::Attention, false, 4,
     "[threads][capacity + hold] f32"},
    {Region::SnapOrder, "snap_order", PlanArena::Scratch, RegionGroup::Attention, false, 4,
     "[threads][capacity + hold] u32"},
    {Region::SnapKeep, "snap_keep", PlanArena::Scratch, RegionGroup::Attention, false, 4,
     "[threads][capacity + hold] u32"},
    {Region::SnapCandidates, "snap_candidates", PlanArena::Scratch, RegionGroup::Attention, false, 4,
     "[threads][capacity + hold] u32"},
    {Region::SnapCompact, "snap_compact", PlanArena::Scratch, RegionGroup::Attention, false, 1,
     "[threads][capacity][K,V f16 head_dim + position i32]"},
    {Region::SnapRope, "snap_rope", PlanArena::Scratch, RegionGroup::Attention, false, 4,
     "[2*obs_window][cos t, sin t, cos c, sin c][head_dim/2] f32"},
    {Region::SparseGather, "sparse_gather", PlanArena::Scratch, RegionGroup::Attention, false, 2,
     "[kv_heads][K,V][gather_rows][row] (sparse attention)"},
    {Region::SparsePositions, "sparse_positions", PlanArena::Scratch, RegionGroup::Attention, false, 4,
     "[kv_heads][gather_rows] i32"},
    {Region::SparseSelect, "sparse_select", PlanArena::Scratch, RegionGroup::Attention, false, 4,
     "[kv_heads]([score, order, tokens][max_pages], [group][max_pages] estimates, [head_dim] key spread, "
     "[2][head_dim] dims, 2 counts) + [n_heads][head_dim]"},
    {Region::LogitRows, "logit_rows", PlanArena::Scratch, RegionGroup::LogitRows, false, 4,
     "[max(logit_rows, slots)][vocab] f32"},
    {Region::StepSegments, "step_segments", PlanArena::Scratch, RegionGroup::Activations, false, 1,
     "[slots][kForwardSegmentBytes] forward segments"},
    {Region::Sampler, "sampler", PlanArena::Scratch, RegionGroup::Sampler, false, 1,
     "[vocab] (logit, id) + seen-token bitmap"},
    {Region::Text, "text", PlanArena::Scratch, RegionGroup::Text, false, 1, "[64 KiB] tokenizer work"},
};

constexpr const RegionInfo& region_info(Region r) { return kRegions[uint32_t(r)]; }

inline constexpr uint32_t kRegionGroupCount = uint32_t(RegionGroup::Text) + 1;
constexpr const char* region_group_name(RegionGroup g) {
  constexpr const char* kNames[kRegionGroupCount] = {"tokenizer",  "rope",    "backend",     "kv",
                                                     "logits",     "records", "activations", "attention",
                                                     "logit_rows", "sampler", "text"};
  return uint32_t(g) < kRegionGroupCount ? kNames[uint32_t(g)] : "?";
}

constexpr uint64_t max_u64(uint64_t a, uint64_t b) { return a > b ? a : b; }

// The SnapKV observation window the plan holds queries for: the policy's, when it uses SnapKV.
constexpr uint32_t plan_obs_window(const KvPolicyConfig& kv) {
  return kv_policy_uses_snapkv(kv.kind) ? kv.obs_window : 0;
}

// Entries a local layer keeps between passes: its window, whatever the policy (a token never
// attends further back), or the budget where that is smaller under `full`, which never holds
// more than the budget. The KV policy applies to the global layers only (docs/kv.md).
constexpr uint32_t plan_local_budget(const PlanShape& s, const PlanConfig& c, const KvPolicyConfig& kv) {
  if (s.local_layers == 0) return 0;
  if (kv.kind == KvPolicyKind::Full && c.kv_budget_tokens < s.sliding_window) return c.kv_budget_tokens;
  return s.sliding_window;
}

// Entries per layer and KV head the hold keeps (kv/kv_policy.h snapkv_hold_entries), for the
// policies that run SnapKV.
constexpr uint32_t plan_hold(const PlanConfig& c, const KvPolicyConfig& kv) {
  return kv_policy_uses_snapkv(kv.kind) ? snapkv_hold_entries(kv) : 0;
}

// Elements of one instance of region `r`. `local_budget`: plan_local_budget; `sparse`: the
// sparse decode attention split (budget 0: off); `hold`: plan_hold.
constexpr uint64_t region_elements(Region r, const PlanShape& s, const PlanConfig& c, uint32_t obs_window,
                                   uint32_t local_budget, const SparseSplit& sparse = {}, uint32_t hold = 0) {
  const uint64_t chunk = plan_chunk(c);
  const uint64_t threads = c.threads ? c.threads : 1;
  const uint64_t slots = c.slots ? c.slots : 1;
  const uint64_t logit_rows = max_u64(c.logit_rows ? c.logit_rows : 1, slots);
  const uint64_t rows = plan_step_rows(c.chunk_tokens, c.slots);  // of one forward pass
  const uint64_t q_dim = uint64_t(s.n_heads) * s.head_dim;
  const uint64_t kv_dim = uint64_t(s.n_kv_heads) * s.head_dim;
  const uint64_t global_layers = uint64_t(s.n_layers) - s.local_layers;
  const uint64_t heads = global_layers * s.n_kv_heads;
  const uint64_t local_heads = uint64_t(s.local_layers) * s.n_kv_heads;
  const uint64_t cap = plan_kv_capacity(c);
  const uint64_t local_cap = s.local_layers > 0 ? uint64_t(local_budget) + chunk : 0;
  const uint64_t pairs = s.head_dim / 2;
  const uint64_t snap = obs_window > 0 ? 1 : 0;  // SnapKV's buffers exist only for its policies
  switch (r) {
    case Region::Tokenizer: return s.tokenizer_bytes;
    case Region::RopeInvFreq: return 2 * pairs;  // global layers', then local layers' (Gemma 3)
    case Region::BackendState: return c.backend_bytes;
    case Region::SlotRecords: return slots * kSlotRecordBytes;
    case Region::Requests: return requests_region_bytes(slots, c.queue_capacity);
    case Region::KvKeysValues: return 2 * heads * cap * kv_row_halves(c.kv_type, s.head_dim);
    case Region::KvPositions: return heads * cap;
    case Region::KvLocalKeysValues: return 2 * local_heads * local_cap * kv_row_halves(c.kv_type, s.head_dim);
    case Region::KvLocalPositions: return local_heads * local_cap;
    case Region::KvObservations:
    case Region::KvLookahead: return global_layers * obs_window * q_dim;
    case Region::KvLookaheadTokens: return obs_window;
    case Region::KvHoldKeysValues: return 2 * heads * hold * kv_row_halves(c.kv_type, s.head_dim);
    case Region::KvHoldPositions: return heads * hold * 2;
    case Region::KvPages: return sparse.budget ? heads * 2 * s.head_dim * sparse.max_pages : 0;
    case Region::KvKeyMoments: return sparse.budget && sparse.select == RocketSelect::Head ? heads * 2 * s.head_dim : 0;
    case Region::Logits: return s.vocab_size;
    case Region::X:
    case Region::Xb: return rows * s.dim;
    case Region::Q:
    case Region::Att: return rows * q_dim;
    case Region::K:
    case Region::V: return rows * kv_dim;
    case Region::Hb:
    case Region::Hb2: return rows * s.ffn_dim;
    case Region::Xq: return rows * act_blocks(uint32_t(max_u64(max_u64(s.dim, q_dim), s.ffn_dim)));
    case Region::RopeCos:
    case Region::RopeSin: return rows * pairs;
    case Region::AttRows: return threads * plan_query_rows(s.n_heads, s.n_kv_heads) * max_u64(cap, local_cap);
    case Region::QRot: return threads * plan_query_rows(s.n_heads, s.n_kv_heads) * s.head_dim;
    case Region::ShiftCos:
    case Region::ShiftSin: return slots * pairs;
    case Region::SnapRows:
    case Region::SnapSums:
    case Region::SnapPooled:
    case Region::SnapOrder:
    case Region::SnapKeep:
    case Region::SnapCandidates: return snap * threads * (cap + hold);
    case Region::SnapCompact:  // per worker, for rows of the widest kv_type (f16)
      return snap * threads * kv_compact_scratch_bytes(cap, kv_row_halves(KvType::F16, s.head_dim));
    case Region::SnapRope: return uint64_t(obs_window) * 2 * 4 * pairs;
    case Region::SparseGather:
      return sparse.budget ? 2 * uint64_t(s.n_kv_heads) * sparse.gather_rows * kv_row_halves(c.kv_type, s.head_dim) : 0;
    case Region::SparsePositions: return sparse.budget ? uint64_t(s.n_kv_heads) * sparse.gather_rows : 0;
    case Region::SparseSelect:
      return sparse.budget
                 ? uint64_t(s.n_kv_heads) * sparse_select_stride(sparse, s.head_dim, s.n_heads / s.n_kv_heads) + q_dim
                 : 0;
    case Region::LogitRows: return logit_rows * s.vocab_size;
    case Region::StepSegments: return slots * kForwardSegmentBytes;
    case Region::Sampler: return text::sampler_scratch_bytes(s.vocab_size);
    case Region::Text: return text::kTokenizerScratchBytes;
    case Region::kCount: break;
  }
  return 0;
}

struct RegionPlan {
  uint64_t offset = 0;  // in its arena; per-slot regions: slot 0's, the others slot_stride apart
  uint64_t bytes = 0;   // one instance, aligned
  uint64_t elements = 0;
};

struct MemoryPlan {
  RegionPlan regions[kRegionCount] = {};
  uint32_t slots = 1;
  uint64_t slot_stride_bytes = 0;   // one slot's block of per-slot regions
  uint64_t kv_capacity_tokens = 0;  // per slot: budget + one prefill chunk before compression
  // Local (sliding-window) layers' ring per slot: entries kept, and with a chunk of staging; 0
  // when the model has none.
  uint32_t kv_local_budget_tokens = 0;
  uint64_t kv_local_capacity_tokens = 0;
  uint32_t obs_window = 0;      // SnapKV observation queries kept (0: the policy uses none)
  uint32_t kv_hold_tokens = 0;  // per slot, layer and KV head: the hold's entries (0: none)
  SparseSplit sparse;           // sparse decode attention's split (budget 0: off)
  uint64_t persistent_bytes = 0;
  uint64_t scratch_bytes = 0;
  // Sums by RegionGroup. Persistent: KV caches of all slots; logits of all slots; slot and
  // request records; tokenizer tables; RoPE frequencies; backend state.
  uint64_t kv_bytes = 0, logits_bytes = 0, records_bytes = 0, tokenizer_bytes = 0, rope_bytes = 0, backend_bytes = 0;
  // Of kv_bytes, the local layers' rings (the rest is the global layers').
  uint64_t kv_local_bytes = 0;
  // Scratch: one chunk's activations; attention rows (and SnapKV's); logit rows; sampler; text.
  uint64_t activation_bytes = 0, attention_bytes = 0, logit_rows_bytes = 0, sampler_bytes = 0, text_bytes = 0;

  // All instances of `r`.
  constexpr uint64_t region_bytes(Region r) const {
    return regions[uint32_t(r)].bytes * (region_info(r).per_slot ? slots : 1);
  }
  // Bytes of every region of `g`, all slots (kv_bytes, tokenizer_bytes ... are these sums).
  constexpr uint64_t group_bytes(RegionGroup g) const {
    uint64_t b = 0;
    for (const RegionInfo& r : kRegions) b += r.group == g ? region_bytes(r.id) : 0;
    return b;
  }
  // Offset of `r` of `slot` in its arena.
  constexpr uint64_t region_offset(Region r, uint32_t slot = 0) const {
    return regions[uint32_t(r)].offset + (region_info(r).per_slot ? slot * slot_stride_bytes : 0);
  }
};

// The one walk: offsets and totals. Persistent: global regions, then the slots' blocks;
// scratch: its regions in order. Each region starts 64-byte aligned.
constexpr MemoryPlan plan_memory(const PlanShape& s, const PlanConfig& c, const KvPolicyConfig& kv) {
  MemoryPlan p{};
  const uint32_t obs = plan_obs_window(kv);
  p.slots = c.slots ? c.slots : 1;
  p.obs_window = obs;
  p.kv_hold_tokens = plan_hold(c, kv);
  p.sparse = sparse_split(kv, c.kv_budget_tokens, s.head_dim, 2 * kv_row_halves(c.kv_type, s.head_dim));
  p.kv_capacity_tokens = plan_kv_capacity(c);
  p.kv_local_budget_tokens = plan_local_budget(s, c, kv);
  p.kv_local_capacity_tokens = s.local_layers > 0 ? uint64_t(p.kv_local_budget_tokens) + plan_chunk(c) : 0;
  for (const RegionInfo& r : kRegions) {
    RegionPlan& rp = p.regions[uint32_t(r.id)];
    rp.elements = region_elements(r.id, s, c, obs, p.kv_local_budget_tokens, p.sparse, p.kv_hold_tokens);
    rp.bytes = plan_align(rp.elements * r.elem_bytes);
  }
  // Persistent: globals first, then one block per slot.
  uint64_t at = 0;
  for (const RegionInfo& r : kRegions) {
    if (r.arena != PlanArena::Persistent || r.per_slot) continue;
    p.regions[uint32_t(r.id)].offset = at;
    at += p.regions[uint32_t(r.id)].bytes;
  }
  uint64_t in_slot = 0;
  for (const RegionInfo& r : kRegions) {
    if (!r.per_slot) continue;
    p.regions[uint32_t(r.id)].offset = at + in_slot;
    in_slot += p.regions[uint32_t(r.id)].bytes;
  }
  p.slot_stride_bytes = in_slot;
  p.persistent_bytes = at + in_slot * p.slots;
  at = 0;
  for (const RegionInfo& r : kRegions) {
    if (r.arena != PlanArena::Scratch) continue;
    p.regions[uint32_t(r.id)].offset = at;
    at += p.regions[uint32_t(r.id)].bytes;
  }
  p.scratch_bytes = at;
  for (const RegionInfo& r : kRegions) {
    const uint64_t b = p.region_bytes(r.id);
    switch (r.group) {
      case RegionGroup::Tokenizer: p.tokenizer_bytes += b; break;
      case RegionGroup::Rope: p.rope_bytes += b; break;
      case RegionGroup::Backend: p.backend_bytes += b; break;
      case RegionGroup::Kv: p.kv_bytes += b; break;
      case RegionGroup::Logits: p.logits_bytes += b; break;
      case RegionGroup::Records: p.records_bytes += b; break;
      case RegionGroup::Activations: p.activation_bytes += b; break;
      case RegionGroup::Attention: p.attention_bytes += b; break;
      case RegionGroup::LogitRows: p.logit_rows_bytes += b; break;
      case RegionGroup::Sampler: p.sampler_bytes += b; break;
      case RegionGroup::Text: p.text_bytes += b; break;
    }
  }
  p.kv_local_bytes = p.region_bytes(Region::KvLocalKeysValues) + p.region_bytes(Region::KvLocalPositions);
  return p;
}

// A region's buffer of `slot` inside arenas laid out by `plan`. Arenas are checked against the
// plan's totals once (Runtime::init); each slice is then in bounds by construction. The map
// records how far into each arena the buffers it handed out reach: after init that is the
// arenas' use, which tests compare with the plan's totals.
class RegionMap {
 public:
  RegionMap() = default;
  RegionMap(const MemoryPlan* plan, uint8_t* persistent, uint8_t* scratch)
      : plan_(plan), persistent_(persistent), scratch_(scratch) {}

  template <typename T>
  T* get(Region r, uint32_t slot = 0) const {
    static_assert(alignof(T) <= kPlanAlign, "regions are 64-byte aligned");
    if (!plan_ || region_info(r).elem_bytes % sizeof(T) != 0 || slot >= plan_->slots) return nullptr;
    const uint64_t bytes = plan_->regions[uint32_t(r)].bytes;
    if (bytes == 0) return nullptr;
    const bool persistent = region_info(r).arena == PlanArena::Persistent;
    const uint64_t at = plan_->region_offset(r, slot);
    uint64_t& reach = persistent ? persistent_reach_ : scratch_reach_;
    if (at + bytes > reach) reach = at + bytes;
    return reinterpret_cast<T*>((persistent ? persistent_ : scratch_) + at);
  }
  // Bytes of one instance of `r`.
  uint64_t bytes(Region r) const { return plan_ ? plan_->regions[uint32_t(r)].bytes : 0; }
  // The end of the furthest buffer handed out, per arena.
  uint64_t persistent_reach() const { return persistent_reach_; }
  uint64_t scratch_reach() const { return scratch_reach_; }

 private:
  const MemoryPlan* plan_ = nullptr;
  uint8_t* persistent_ = nullptr;
  uint8_t* scratch_ = nullptr;
  mutable uint64_t persistent_reach_ = 0;
  mutable uint64_t scratch_reach_ = 0;
};

// What the backend's per-model state may depend on, from the configuration and its memory plan
// (the plan places the page summaries and the local layers' rings the backend sizes for).
constexpr BackendPlan backend_plan(const PlanConfig& c, const MemoryPlan& p) {
  BackendPlan b;
  b.threads = c.threads ? c.threads : 1;
  b.capacity_tokens = uint32_t(plan_kv_capacity(c));
  b.slots = c.slots ? c.slots : 1;
  b.chunk_tokens = plan_chunk(c);
  b.memory = c.dataflow_memory;
  b.kv_type = c.kv_type;
  b.kv_pages = p.sparse.budget ? p.sparse.max_pages : 0;
  b.local_capacity_tokens = uint32_t(p.kv_local_capacity_tokens);
  return b;
}

}  // namespace keel
