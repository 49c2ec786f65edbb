// The runtime configuration a run uses: what the model file asks for (its kv_defaults and
// memory_plan), else the engine's defaults, with the caller's choices on top. The C API's
// keel_config, the keel tool's options and Engine<>'s template parameters all resolve here, so
// `keel info` can print what a run will use and every entry point agrees on it.
#pragma once

#include <cstdint>

#include "core/status.h"
#include "kv/kv_policy.h"
#include "llm/plan.h"
#include "llm/runtime.h"
#include "model/model.h"

namespace keel {

// The budget and the chunk default to PlanConfig's (llm/plan.h); the KV numbers to
// KvPolicyConfig's (kv/kv_policy.h). Named here, defined there.
constexpr uint32_t kDefaultKvBudgetTokens = PlanConfig{}.kv_budget_tokens;
constexpr uint32_t kDefaultChunkTokens = PlanConfig{}.chunk_tokens;

// What a run uses when the caller says nothing.
struct RunDefaults {
  KvPolicyKind policy = KvPolicyKind::Full;
  uint32_t kv_budget_tokens = kDefaultKvBudgetTokens;
  uint32_t sinks = kDefaultSinks;
  uint32_t window = 0;  // snapstream's recent ring; 0 = budget / 4
  uint32_t obs_window = kDefaultObsWindow;
  // The max-pool kernel each policy runs with (0 = adaptive), by KvPolicyKind: the engine's
  // (snap_kernel_of), rocketkv's and snapkv's the architecture's (Architecture::rocketkv_kernel,
  // snapkv_kernel), the file's policy the file's.
  uint32_t snap_kernels[kKvPolicyCount] = {
      snap_kernel_of(KvPolicyKind::Full, kSnapKernelPolicyDefault),
      snap_kernel_of(KvPolicyKind::Window, kSnapKernelPolicyDefault),
      snap_kernel_of(KvPolicyKind::Streaming, kSnapKernelPolicyDefault),
      snap_kernel_of(KvPolicyKind::SnapKV, kSnapKernelPolicyDefault),
      snap_kernel_of(KvPolicyKind::SnapStream, kSnapKernelPolicyDefault),
      snap_kernel_of(KvPolicyKind::RocketKV, kSnapKernelPolicyDefault),
  };
  uint32_t chunk_tokens = kDefaultChunkTokens;
  RocketSelect rocket_select = RocketSelect::Group;  // the architecture's (Architecture::sparse_ranking)

  // A policy number outside the table (a hostile file's) gets snapkv's kernel; the checks
  // reject the policy itself.
  constexpr uint32_t snap_kernel(KvPolicyKind k) const {
    return uint32_t(k) < kKvPolicyCount ? snap_kernels[uint32_t(k)] : kSnapKernelSnapKV;
  }
};

// The caller's choices. Every field's zero means "the default", as in keel_config.
struct RunOverrides {
  uint32_t kv_policy = 0;         // 0 = the default; else run_policy(KvPolicyKind) (= keel_kv_policy)
  uint32_t kv_budget_tokens = 0;  // per slot
  uint32_t slots = 0;             // 0 = 1
  uint32_t chunk_tokens = 0;
  uint32_t threads = 0;     // 0 = 1
  uint32_t logit_rows = 0;  // 0 = 1; at most the chunk
  uint32_t sinks = 0;
  uint32_t window = 0;
  uint32_t obs_window = 0;
  int32_t snap_kernel = 0;  // 0 = the policy's, -1 = adaptive, else an odd size
  BackendKind backend = BackendKind::Auto;
  uint32_t queue_capacity = 0;  // requests the scheduler holds waiting for a slot
  uint32_t kv_type = 0;         // a KvType number (= keel_kv_type); 0 = f16
  // Sparse decode attention (kv/rocketkv_split.h): tokens per step (0 = off; rocketkv: budget/4)
  // and the split's parts (0 = derived).
  uint32_t sparse_budget = 0;
  uint32_t rocket_page = 0;
  uint32_t rocket_topk = 0;
  uint32_t rocket_r = 0;
  uint32_t rocket_select = 0;  // 0 = the model's (RunDefaults), 1 = group, 2 = head (RocketSelect)
  uint32_t kv_positions = 0;   // 0 = the default (cache), 1 = cache, 2 = original (KvPositions)
  // snapstream, rocketkv: the hold's entries (docs/kv.md); 0 = the policy's (snapstream: its
  // recent ring W; rocketkv: none), -1 = none.
  int32_t hold = 0;
};

constexpr uint32_t kRunPolicyMax = uint32_t(KvPolicyKind::RocketKV) + 1;
constexpr uint32_t run_policy(KvPolicyKind k) { return uint32_t(k) + 1; }

// The engine's defaults with the choices of the architecture of `family` (its sparse page
// ranking, rocketkv's and snapkv's kernels); the engine's alone for a family Keel does not run.
RunDefaults architecture_run_defaults(fb::ArchFamily family);

// architecture_run_defaults() of the model's family, then the file's kv_defaults (policy,
// budget, sinks, window, obs_window, the policy's snap_kernel) and memory_plan (chunk) where present.
RunDefaults model_run_defaults(const Model& model);

// Defaults + overrides. The kernel comes out resolved (never kSnapKernelPolicyDefault) and the
// plan's SnapKV buffers are sized for the policy. Not checked: make_runtime_config() checks.
// constexpr, so Engine<> sizes its arenas at compile time from the same rules.
constexpr RuntimeConfig resolve_runtime_config(const RunDefaults& d, const RunOverrides& o) {
  RuntimeConfig rc;
  KvPolicyConfig& kv = rc.kv;
  kv.kind = o.kv_policy >= 1 && o.kv_policy <= kRunPolicyMax ? static_cast<KvPolicyKind>(o.kv_policy - 1) : d.policy;
  kv.sinks = o.sinks ? o.sinks : d.sinks;
  kv.window = o.window ? o.window : d.window;
  kv.obs_window = o.obs_window ? o.obs_window : d.obs_window;
  kv.snap_kernel = o.snap_kernel == -1 ? 0u : o.snap_kernel > 0 ? uint32_t(o.snap_kernel) : d.snap_kernel(kv.kind);
  kv.sparse_budget = o.sparse_budget;
  kv.rocket_page = o.rocket_page;
  kv.rocket_topk = o.rocket_topk;
  kv.rocket_r = o.rocket_r;
  kv.rocket_select = o.rocket_select == 2   ? RocketSelect::Head
                     : o.rocket_select == 1 ? RocketSelect::Group
                                            : d.rocket_select;
  kv.positions = o.kv_positions == 2 ? KvPositions::Original : KvPositions::Cache;
  PlanConfig& pc = rc.plan;
  pc.kv_budget_tokens = o.kv_budget_tokens ? o.kv_budget_tokens : d.kv_budget_tokens;
  kv.hold = o.hold > 0    ? uint32_t(o.hold)
            : o.hold == 0 ? snapkv_default_hold(kv.kind, kv.window, pc.kv_budget_tokens)
                          : 0u;
  pc.slots = o.slots ? o.slots : 1;
  pc.chunk_tokens = o.chunk_tokens ? o.chunk_tokens : d.chunk_tokens;
  pc.threads = o.threads ? o.threads : 1;
  const uint32_t rows = o.logit_rows ? o.logit_rows : 1;
  pc.logit_rows = rows < pc.chunk_tokens ? rows : pc.chunk_tokens;
  pc.queue_capacity = o.queue_capacity;
  pc.kv_type = o.kv_type <= uint32_t(KvType::Q4) ? static_cast<KvType>(o.kv_type) : KvType::F16;
  rc.backend = o.backend;
  return rc;
}

// The configuration `model` runs with under `overrides`: InvalidArgument for a policy number,
// KV type or kernel out of range, a KV type the model's heads cannot be stored in, a zero budget or chunk in the file,
// and validate_kv_policy()'s errors.
Error make_runtime_config(const Model& model, const RunOverrides& overrides, RuntimeConfig* out);

// What a run of `model` uses when the caller chooses nothing.
RuntimeConfig default_runtime_config(const Model& model);

}  // namespace keel
