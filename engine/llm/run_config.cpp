#include "llm/run_config.h"

#include <cinttypes>

#include "core/check.h"
#include "llm/architecture.h"

namespace keel {

static_assert(resolve_runtime_config(RunDefaults{}, RunOverrides{}).kv.snap_kernel == kSnapKernelSnapKV,
              "the kernel comes out resolved");

namespace {
constexpr uint32_t kLegacySnapStreamKernel = 7;
}  // namespace

RunDefaults architecture_run_defaults(fb::ArchFamily family) {
  RunDefaults d;
  if (const Architecture* a = find_architecture(family)) {
    d.rocket_select = a->sparse_ranking;
    d.snap_kernels[uint32_t(KvPolicyKind::RocketKV)] = a->rocketkv_kernel;
    d.snap_kernels[uint32_t(KvPolicyKind::SnapKV)] = a->snapkv_kernel;
  }
  return d;
}

RunDefaults model_run_defaults(const Model& model) {
  const fb::Model* m = model.meta();
  if (!m) return RunDefaults{};
  RunDefaults d = m->arch() ? architecture_run_defaults(m->arch()->family()) : RunDefaults{};
  if (const fb::KvDefaults* kv = m->kv_defaults()) {
    d.policy = static_cast<KvPolicyKind>(kv->policy());
    if (kv->budget_tokens()) d.kv_budget_tokens = kv->budget_tokens();
    d.sinks = kv->sinks();
    d.window = kv->window();
    if (kv->obs_window()) d.obs_window = kv->obs_window();
    // Converters before run_config.h wrote 7 (the schema's default) for every policy while runs
    // of snapstream used 31: that 7 is a placeholder, read as the policy's kernel
    // (docs/format.md, KV defaults).
    const bool legacy_placeholder =
        d.policy == KvPolicyKind::SnapStream && kv->snap_kernel() == kLegacySnapStreamKernel;
    if (uint32_t(d.policy) < kKvPolicyCount && !legacy_placeholder) {
      d.snap_kernels[uint32_t(d.policy)] = kv->snap_kernel();
    }
  }
  if (const fb::MemoryPlan* mp = m->memory_plan(); mp && mp->chunk_tokens()) d.chunk_tokens = mp->chunk_tokens();
  return d;
}

Error make_runtime_config(const Model& model, const RunOverrides& o, RuntimeConfig* out) {
  KEEL_ENSURE(out != nullptr, Status::InvalidArgument, "out is null");
  KEEL_ENSURE(o.kv_policy <= kRunPolicyMax, Status::InvalidArgument,
              "kv_policy %" PRIu32 "; expected 0 (the model's) .. %" PRIu32 " (rocketkv)", o.kv_policy, kRunPolicyMax);
  KEEL_ENSURE(o.snap_kernel >= -1, Status::InvalidArgument, "snap_kernel %" PRId32 "; expected -1 (adaptive), 0 or odd",
              o.snap_kernel);
  KEEL_ENSURE(o.kv_type <= uint32_t(KvType::Q4), Status::InvalidArgument,
              "kv_type %" PRIu32 "; expected 0 (f16), 1 (q8) or 2 (q4)", o.kv_type);
  KEEL_ENSURE(kv_type_fits(KvType(o.kv_type), model.shape().head_dim), Status::InvalidArgument,
              "kv_type %s cannot store this model's heads of %" PRIu32 " numbers", kv_type_name(KvType(o.kv_type)),
              model.shape().head_dim);
  KEEL_ENSURE(o.rocket_select <= 2, Status::InvalidArgument,
              "rocket_select %" PRIu32 "; expected 0 (the model's), 1 (group) or 2 (head)", o.rocket_select);
  KEEL_ENSURE(o.kv_positions <= 2, Status::InvalidArgument,
              "kv_positions %" PRIu32 "; expected 0 (the default), 1 (cache) or 2 (original)", o.kv_positions);
  const int backend = int(o.backend);
  KEEL_ENSURE(backend >= int(BackendKind::Auto) && backend <= int(BackendKind::Dataflow), Status::InvalidArgument,
              "backend %d; expected 0..4", backend);
  const RunDefaults d = model_run_defaults(model);
  KEEL_ENSURE(uint32_t(d.policy) < kRunPolicyMax, Status::InvalidArgument,
              "the model's kv_defaults name policy %u; expected 0..%" PRIu32, unsigned(d.policy), kRunPolicyMax - 1);
  *out = resolve_runtime_config(d, o);
  return validate_kv_policy(out->kv, out->plan.kv_budget_tokens, out->plan.chunk_tokens);
}

RuntimeConfig default_runtime_config(const Model& model) {
  return resolve_runtime_config(model_run_defaults(model), {});
}

}  // namespace keel
