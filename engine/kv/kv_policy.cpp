#include "kv/kv_policy.h"

#include <cinttypes>
#include <cstring>

#include "core/check.h"

namespace keel {

const char* kv_policy_name(KvPolicyKind k) {
  switch (k) {
    case KvPolicyKind::Full: return "full";
    case KvPolicyKind::Window: return "window";
    case KvPolicyKind::Streaming: return "streaming";
    case KvPolicyKind::SnapKV: return "snapkv";
    case KvPolicyKind::SnapStream: return "snapstream";
    case KvPolicyKind::RocketKV: return "rocketkv";
  }
  return "?";
}

bool parse_kv_policy(const char* name, KvPolicyKind& out) {
  for (KvPolicyKind k : kKvPolicies) {
    if (strcmp(name, kv_policy_name(k)) == 0) {
      out = k;
      return true;
    }
  }
  return false;
}

uint32_t snapkv_decode_target(uint32_t budget, uint32_t chunk) {
  uint32_t r = budget / 8 < chunk ? budget / 8 : chunk;
  if (r == 0) r = 1;
  return budget - r;
}

Error validate_kv_policy(const KvPolicyConfig& c, uint32_t budget, uint32_t chunk) {
  KEEL_ENSURE(budget >= 1, Status::BudgetTooSmall, "KV budget of 0 tokens");
  KEEL_ENSURE(c.sparse_budget == 0 || c.sparse_budget >= 2, Status::InvalidArgument,
              "sparse_budget %" PRIu32 "; expected 0 (off) or at least 2 tokens per step", c.sparse_budget);
  KEEL_ENSURE(c.rocket_page <= kMaxRocketPage, Status::InvalidArgument,
              "rocket_page %" PRIu32 "; expected 0 (from the budget split) .. %" PRIu32, c.rocket_page, kMaxRocketPage);
  KEEL_ENSURE(c.sparse_budget == 0 || c.rocket_topk <= c.sparse_budget, Status::InvalidArgument,
              "rocket_topk %" PRIu32 " exceeds the per-step budget of %" PRIu32 " tokens", c.rocket_topk,
              c.sparse_budget);
  switch (c.kind) {
    case KvPolicyKind::Full:
    case KvPolicyKind::Window: return Error();
    case KvPolicyKind::Streaming:
      KEEL_ENSURE(budget > c.sinks, Status::BudgetTooSmall,
                  "streaming needs a budget above its %" PRIu32 " sinks; got %" PRIu32 " tokens", c.sinks, budget);
      return Error();
    case KvPolicyKind::SnapKV: {
      const uint32_t target = snapkv_decode_target(budget, chunk);
      KEEL_ENSURE(target > c.obs_window && c.obs_window >= 1, Status::BudgetTooSmall,
                  "snapkv keeps a %" PRIu32 "-token observation window and recompresses to %" PRIu32 " of the %" PRIu32
                  "-token budget; the budget must exceed the window by at least a few tokens",
                  c.obs_window, target, budget);
      KEEL_ENSURE(snap_kernel_of(c) == 0 || snap_kernel_of(c) % 2 == 1, Status::InvalidArgument,
                  "snap_kernel %" PRIu32 "; expected an odd size, or 0 for adaptive", snap_kernel_of(c));
      return Error();
    }
    case KvPolicyKind::SnapStream:
    case KvPolicyKind::RocketKV: {
      const uint32_t w = snapstream_window(c, budget);
      KEEL_ENSURE(c.obs_window >= 1, Status::InvalidArgument,
                  "%s needs a SnapKV observation window of at least 1 token; got %" PRIu32, kv_policy_name(c.kind),
                  c.obs_window);
      KEEL_ENSURE(w >= 1 && budget > w + c.sinks + c.obs_window, Status::BudgetTooSmall,
                  "%s keeps %" PRIu32 " sinks + a %" PRIu32 "-token observation window + a %" PRIu32
                  "-token recent window; a budget of %" PRIu32 " tokens leaves nothing for the prompt",
                  kv_policy_name(c.kind), c.sinks, c.obs_window, w, budget);
      KEEL_ENSURE(snap_kernel_of(c) == 0 || snap_kernel_of(c) % 2 == 1, Status::InvalidArgument,
                  "snap_kernel %" PRIu32 "; expected an odd size, or 0 for adaptive", snap_kernel_of(c));
      return Error();
    }
  }
  return Error(Status::InvalidArgument, "unknown KV policy %u", unsigned(c.kind));
}

}  // namespace keel
