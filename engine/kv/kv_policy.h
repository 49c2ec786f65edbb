// KV-cache policies (docs/kv.md): what a slot's cache keeps between
// forward passes when a sequence outgrows its budget.
#pragma once

#include <cstdint>

#include "core/status.h"

namespace keel {

enum class KvPolicyKind : uint8_t { Full, Window, Streaming, SnapKV, SnapStream, RocketKV };
// How sparse decode attention ranks pages (kv/rocketkv_select.h, docs/kv.md): Group, RocketKV's
// dimensions by |q| and the group's summed bound; Head, dimensions by |q| times the keys'
// spread and each head's own estimate (for models whose keys have near-constant dimensions,
// as Gemma 3's).
enum class RocketSelect : uint8_t { Group, Head };
// The rotation of the prefix's keys (docs/kv.md, "Positions"): Cache, at their cache index
// (StreamingLLM: every distance a query sees is a distance in the cache, bounded by the budget);
// Original, at their original positions, as one-shot SnapKV and RocketKV keep them (a query
// sees the kept text at its true distance, however far back).
enum class KvPositions : uint8_t { Cache, Original };

// The engine's KV defaults, defined here once (the budget and the chunk are PlanConfig's, in
// llm/plan.h; llm/run_config.h puts them together with what a model file asks for).
constexpr uint32_t kDefaultSinks = 4;       // attention sinks of streaming and snapstream
constexpr uint32_t kDefaultObsWindow = 32;  // SnapKV observation window w
// The max-pool kernel a policy uses when none is given (an architecture may name its own for
// snapkv and rocketkv, Architecture::snapkv_kernel; both llama and Gemma 3 give snapkv 31):
// 7 for snapkv (the SnapKV paper); 31 for
// snapstream, whose prompt goes through a compression after every chunk: a kept token must carry
// its neighbourhood, or a multi-token fact (a number, a name) survives in pieces (docs/kv.md).
constexpr uint32_t kSnapKernelSnapKV = 7;
constexpr uint32_t kSnapKernelSnapStream = 31;
// RocketKV's released SnapKV++ kernel; an architecture may name another (Architecture::
// rocketkv_kernel: Gemma 3 takes snapstream's 31, docs/notes/kvpress.md).
constexpr uint32_t kSnapKernelRocketKV = 63;
constexpr uint32_t kSnapKernelPolicyDefault = 0xffffffffu;  // "the policy's kernel"
constexpr uint32_t kMaxRocketPage = 256;                    // tokens per page of sparse attention's key summaries

struct KvPolicyConfig {
  KvPolicyKind kind = KvPolicyKind::Full;
  uint32_t sinks = kDefaultSinks;  // streaming, snapstream
  uint32_t window = 0;             // snapstream: recent ring for generated tokens (0 = budget / 4)
  uint32_t obs_window = kDefaultObsWindow;
  uint32_t snap_kernel = kSnapKernelPolicyDefault;  // SnapKV max-pool kernel (odd); 0 = adaptive
  // Sparse decode attention (kv/rocketkv_split.h, docs/kv.md): each decode step attends to the
  // top-k cached tokens by an upper bound of q.k instead of all of them. sparse_budget is the
  // token budget B of one step; 0 = off (exact attention over the whole cache), except for
  // rocketkv, which always runs it (0 = budget / 4). 0 in the others = from the budget split.
  uint32_t sparse_budget = 0;
  uint32_t rocket_page = 0;  // at most kMaxRocketPage
  uint32_t rocket_topk = 0;
  uint32_t rocket_r = 0;
  RocketSelect rocket_select = RocketSelect::Group;
  KvPositions positions = KvPositions::Cache;
  // snapstream, rocketkv: entries per layer and KV head of the hold (docs/kv.md, "The hold"):
  // what compressions judged by the lookahead evict, for the real question to judge again.
  // 0 = none. A run resolves it (llm/run_config.h): snapstream's default is its recent ring W
  // (snapkv_default_hold), rocketkv's none.
  uint32_t hold = 0;
};

// The kernel the policy runs with: snap_kernel, or the policy's when it is kSnapKernelPolicyDefault.
constexpr uint32_t snap_kernel_of(KvPolicyKind kind, uint32_t snap_kernel) {
  if (snap_kernel != kSnapKernelPolicyDefault) return snap_kernel;
  return kind == KvPolicyKind::SnapStream ? kSnapKernelSnapStream
         : kind == KvPolicyKind::RocketKV ? kSnapKernelRocketKV
                                          : kSnapKernelSnapKV;
}
constexpr uint32_t snap_kernel_of(const KvPolicyConfig& c) { return snap_kernel_of(c.kind, c.snap_kernel); }

// Every policy, in the order names are listed to users.
inline constexpr uint32_t kKvPolicyCount = 6;
inline constexpr KvPolicyKind kKvPolicies[kKvPolicyCount] = {KvPolicyKind::Full,       KvPolicyKind::Window,
                                                             KvPolicyKind::Streaming,  KvPolicyKind::SnapKV,
                                                             KvPolicyKind::SnapStream, KvPolicyKind::RocketKV};
static_assert(uint32_t(kKvPolicies[kKvPolicyCount - 1]) == kKvPolicyCount - 1, "every policy, in KvPolicyKind order");

const char* kv_policy_name(KvPolicyKind k);
// The kind whose kv_policy_name is `name`; false for none.
bool parse_kv_policy(const char* name, KvPolicyKind& out);
constexpr bool kv_policy_uses_snapkv(KvPolicyKind k) {
  return k == KvPolicyKind::SnapKV || k == KvPolicyKind::SnapStream || k == KvPolicyKind::RocketKV;
}
// Policies whose prompt is compressed like snapstream's: sinks + SnapKV-kept prefix + a recent ring.
constexpr bool kv_policy_is_snapstream_like(KvPolicyKind k) {
  return k == KvPolicyKind::SnapStream || k == KvPolicyKind::RocketKV;
}

// The recent ring snapstream keeps for generated tokens: window, or a quarter of the budget.
constexpr uint32_t snapstream_window(uint32_t window, uint32_t budget) { return window ? window : budget / 4; }
constexpr uint32_t snapstream_window(const KvPolicyConfig& c, uint32_t budget) {
  return snapstream_window(c.window, budget);
}
// The hold (docs/kv.md, "The hold"): entries per layer and KV head that a compression judged
// by the lookahead evicted, kept aside (not visible to attention) so that the real question
// judges them again at the prompt's last compression. Only the policies with a ring have one.
constexpr uint32_t snapkv_hold_entries(const KvPolicyConfig& c) {
  return kv_policy_is_snapstream_like(c.kind) ? c.hold : 0;
}
// The hold a run of `kind` gets unless told otherwise: snapstream's is its recent ring W, as
// much as the W / chunk compressions a token goes through after leaving the ring evict; with it
// the question finds keys the lookahead alone lost (docs/results.md). rocketkv's is none.
constexpr uint32_t snapkv_default_hold(KvPolicyKind kind, uint32_t window, uint32_t budget) {
  return kind == KvPolicyKind::SnapStream ? snapstream_window(window, budget) : 0;
}
// Entries snapkv compresses down to while decoding (recompression every budget - this tokens).
uint32_t snapkv_decode_target(uint32_t budget, uint32_t chunk);

// BudgetTooSmall when the budget cannot hold what the policy must keep (sinks, the observation
// window, at least one more token), with the numbers.
Error validate_kv_policy(const KvPolicyConfig& c, uint32_t budget, uint32_t chunk);

}  // namespace keel
