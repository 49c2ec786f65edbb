// The one source of run defaults (llm/run_config.h): what a model file's kv_defaults and
// memory plan ask for, the engine's constants where it says nothing, and the caller's choices on
// top, with zero meaning "the default" as in keel_config.
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "convert/keel_writer.h"
#include "keel.h"
#include "keel.hpp"
#include "llm/run_config.h"
#include "support/runtime_fixture.h"
#include "support/test_support.h"

namespace keel {
namespace {

// stories260K converted with `wo`; nullptr, and the test failed, when that did not work.
std::unique_ptr<test::LoadedModel> stories_with(const convert::WriteOptions& wo, const std::string& name) {
  const convert::SourceModel* src = test::stories260k_source();
  return src ? test::convert_and_load(*src, wo, name) : nullptr;
}

TEST(RunConfig, EngineConstantsAreDefinedOnce) {
  EXPECT_EQ(kDefaultKvBudgetTokens, PlanConfig{}.kv_budget_tokens);
  EXPECT_EQ(kDefaultChunkTokens, PlanConfig{}.chunk_tokens);
  EXPECT_EQ(KvPolicyConfig{}.sinks, kDefaultSinks);
  EXPECT_EQ(KvPolicyConfig{}.obs_window, kDefaultObsWindow);
  EXPECT_EQ(snap_kernel_of(KvPolicyKind::SnapKV, kSnapKernelPolicyDefault), kSnapKernelSnapKV);
  EXPECT_EQ(snap_kernel_of(KvPolicyKind::SnapStream, kSnapKernelPolicyDefault), kSnapKernelSnapStream);
  // The converter writes the engine's defaults.
  const convert::WriteOptions wo;
  EXPECT_EQ(wo.kv.budget_tokens, kDefaultKvBudgetTokens);
  EXPECT_EQ(wo.kv.sinks, kDefaultSinks);
  EXPECT_EQ(wo.kv.obs_window, kDefaultObsWindow);
  EXPECT_EQ(wo.chunk_tokens, kDefaultChunkTokens);
}

TEST(RunConfig, ConvertedDefaultsResolveToWhatRunsUse) {
  const auto loaded = stories_with(convert::WriteOptions{}, "run_config_default.keel");
  ASSERT_NE(loaded, nullptr);
  const test::LoadedModel& c = *loaded;
  // The file says what runs use: the snapstream kernel is 31, not a placeholder.
  ASSERT_NE(c.model.meta()->kv_defaults(), nullptr);
  EXPECT_EQ(c.model.meta()->kv_defaults()->snap_kernel(), kSnapKernelSnapStream);
  const RuntimeConfig rc = default_runtime_config(c.model);
  EXPECT_EQ(rc.kv.kind, KvPolicyKind::SnapStream);
  EXPECT_EQ(rc.plan.kv_budget_tokens, 1024u);
  EXPECT_EQ(rc.kv.sinks, 4u);
  EXPECT_EQ(rc.kv.window, 0u);
  EXPECT_EQ(snapstream_window(rc.kv, rc.plan.kv_budget_tokens), 256u);
  EXPECT_EQ(rc.kv.obs_window, 32u);
  EXPECT_EQ(rc.kv.snap_kernel, 31u);
  EXPECT_EQ(rc.plan.chunk_tokens, 64u);
  EXPECT_EQ(rc.plan.slots, 1u);
  EXPECT_EQ(rc.plan.threads, 1u);
  EXPECT_EQ(plan_obs_window(rc.kv), 32u);
  EXPECT_EQ(rc.backend, BackendKind::Auto);
  // The file's memory plan is the plan of those defaults.
  const MemoryPlan p = Runtime::plan(c.model, rc);
  EXPECT_EQ(c.model.meta()->memory_plan()->persistent_bytes(), p.persistent_bytes);
  EXPECT_EQ(c.model.meta()->memory_plan()->scratch_bytes(), p.scratch_bytes);
  // A zeroed override set is the defaults, and make_runtime_config accepts them.
  RuntimeConfig made;
  ASSERT_TRUE(make_runtime_config(c.model, RunOverrides{}, &made).ok());
  EXPECT_EQ(made.kv.kind, rc.kv.kind);
  EXPECT_EQ(made.kv.snap_kernel, rc.kv.snap_kernel);
  EXPECT_EQ(made.plan.kv_budget_tokens, rc.plan.kv_budget_tokens);
  EXPECT_EQ(made.plan.chunk_tokens, rc.plan.chunk_tokens);
}

TEST(RunConfig, FileDefaultsAreUsed) {
  convert::WriteOptions wo;
  wo.kv.policy = fb::KvPolicy::SnapKV;
  wo.kv.budget_tokens = 300;
  wo.kv.sinks = 6;
  wo.kv.window = 40;
  wo.kv.obs_window = 16;
  wo.kv.snap_kernel = 9;
  wo.chunk_tokens = 24;
  const auto loaded = stories_with(wo, "run_config_custom.keel");
  ASSERT_NE(loaded, nullptr);
  const test::LoadedModel& c = *loaded;
  const RuntimeConfig rc = default_runtime_config(c.model);
  EXPECT_EQ(rc.kv.kind, KvPolicyKind::SnapKV);
  EXPECT_EQ(rc.plan.kv_budget_tokens, 300u);
  EXPECT_EQ(rc.kv.sinks, 6u);
  EXPECT_EQ(rc.kv.window, 40u);
  EXPECT_EQ(rc.kv.obs_window, 16u);
  EXPECT_EQ(rc.kv.snap_kernel, 9u);
  EXPECT_EQ(rc.plan.chunk_tokens, 24u);
  EXPECT_EQ(plan_obs_window(rc.kv), 16u);

  // Overrides win field by field; the file's kernel belongs to its policy only.
  RunOverrides o;
  o.kv_policy = run_policy(KvPolicyKind::SnapStream);
  o.kv_budget_tokens = 512;
  o.chunk_tokens = 32;
  o.slots = 2;
  o.threads = 3;
  o.logit_rows = 100;
  o.sinks = 2;
  RuntimeConfig r2;
  ASSERT_TRUE(make_runtime_config(c.model, o, &r2).ok());
  EXPECT_EQ(r2.kv.kind, KvPolicyKind::SnapStream);
  EXPECT_EQ(r2.kv.snap_kernel, 31u) << "another policy runs with its own kernel";
  EXPECT_EQ(r2.plan.kv_budget_tokens, 512u);
  EXPECT_EQ(r2.plan.chunk_tokens, 32u);
  EXPECT_EQ(r2.plan.slots, 2u);
  EXPECT_EQ(r2.plan.threads, 3u);
  EXPECT_EQ(r2.plan.logit_rows, 32u) << "logit rows are at most the chunk";
  EXPECT_EQ(r2.kv.sinks, 2u);
  EXPECT_EQ(r2.kv.window, 40u) << "unset fields keep the file's";
  EXPECT_EQ(r2.kv.obs_window, 16u);

  // Kernel: -1 = adaptive, an odd size, and a policy without SnapKV plans no SnapKV buffers.
  o = RunOverrides{};
  o.snap_kernel = -1;
  ASSERT_TRUE(make_runtime_config(c.model, o, &r2).ok());
  EXPECT_EQ(r2.kv.snap_kernel, 0u);
  o.snap_kernel = 5;
  ASSERT_TRUE(make_runtime_config(c.model, o, &r2).ok());
  EXPECT_EQ(r2.kv.snap_kernel, 5u);
  o = RunOverrides{};
  o.kv_policy = run_policy(KvPolicyKind::Full);
  ASSERT_TRUE(make_runtime_config(c.model, o, &r2).ok());
  EXPECT_EQ(r2.kv.kind, KvPolicyKind::Full);
  EXPECT_EQ(plan_obs_window(r2.kv), 0u);
  EXPECT_EQ(r2.plan.kv_type, KvType::F16) << "zero is f16";

  // KV type: a KvType number; one out of range is refused, naming the field.
  o = RunOverrides{};
  o.kv_type = uint32_t(KvType::Q8);
  ASSERT_TRUE(make_runtime_config(c.model, o, &r2).ok());
  EXPECT_EQ(r2.plan.kv_type, KvType::Q8);
  o.kv_type = 3;
  const Error bad = make_runtime_config(c.model, o, &r2);
  EXPECT_EQ(bad.status(), Status::InvalidArgument);
  EXPECT_NE(std::string(bad.message()).find("kv_type 3"), std::string::npos) << bad.message();
}

// snapstream keeps what its lookahead evicted for the question to judge again (docs/kv.md, "The
// hold"): by default as many entries as its recent ring; rocketkv and the others hold none.
TEST(RunConfig, SnapStreamHoldsItsRecentWindowByDefault) {
  RunOverrides o;
  o.kv_policy = run_policy(KvPolicyKind::SnapStream);
  o.kv_budget_tokens = 1024;
  EXPECT_EQ(resolve_runtime_config(RunDefaults{}, o).kv.hold, 256u);
  o.window = 100;
  EXPECT_EQ(resolve_runtime_config(RunDefaults{}, o).kv.hold, 100u) << "the hold follows the window";
  o.hold = 48;
  EXPECT_EQ(resolve_runtime_config(RunDefaults{}, o).kv.hold, 48u);
  o.hold = -1;
  EXPECT_EQ(resolve_runtime_config(RunDefaults{}, o).kv.hold, 0u) << "-1 is none";
  o = RunOverrides{};
  o.kv_budget_tokens = 1024;
  for (KvPolicyKind k : {KvPolicyKind::Full, KvPolicyKind::Streaming, KvPolicyKind::SnapKV, KvPolicyKind::RocketKV}) {
    o.kv_policy = run_policy(k);
    EXPECT_EQ(resolve_runtime_config(RunDefaults{}, o).kv.hold, 0u) << kv_policy_name(k);
  }
  o.kv_policy = run_policy(KvPolicyKind::RocketKV);
  o.hold = 64;
  EXPECT_EQ(resolve_runtime_config(RunDefaults{}, o).kv.hold, 64u) << "rocketkv holds when asked";
}

// Each policy has its own default kernel; rocketkv's, snapkv's and the page ranking are the
// architecture's, and a file's kernel belongs to the file's policy only.
TEST(RunConfig, KernelsArePerPolicyAndRocketKvsPerArchitecture) {
  const RunDefaults llama = architecture_run_defaults(fb::ArchFamily::Llama);
  const RunDefaults gemma = architecture_run_defaults(fb::ArchFamily::Gemma3);
  EXPECT_EQ(llama.rocket_select, RocketSelect::Group);
  EXPECT_EQ(llama.snap_kernel(KvPolicyKind::RocketKV), kSnapKernelRocketKV);
  EXPECT_EQ(gemma.rocket_select, RocketSelect::Head);
  EXPECT_EQ(gemma.snap_kernel(KvPolicyKind::RocketKV), kSnapKernelSnapStream);
  EXPECT_EQ(llama.snap_kernel(KvPolicyKind::SnapKV), kSnapKernelSnapStream);
  EXPECT_EQ(gemma.snap_kernel(KvPolicyKind::SnapKV), kSnapKernelSnapStream);
  for (const RunDefaults& d : {llama, gemma}) EXPECT_EQ(d.snap_kernel(KvPolicyKind::SnapStream), kSnapKernelSnapStream);
  EXPECT_EQ(gemma.snap_kernel(static_cast<KvPolicyKind>(200)), kSnapKernelSnapKV) << "a hostile number stays in bounds";

  RunOverrides o;
  o.kv_policy = run_policy(KvPolicyKind::RocketKV);
  EXPECT_EQ(resolve_runtime_config(gemma, o).kv.snap_kernel, 31u);
  EXPECT_EQ(resolve_runtime_config(gemma, o).kv.rocket_select, RocketSelect::Head);
  EXPECT_EQ(resolve_runtime_config(llama, o).kv.snap_kernel, 63u);
  o.kv_policy = run_policy(KvPolicyKind::SnapKV);
  EXPECT_EQ(resolve_runtime_config(gemma, o).kv.snap_kernel, 31u);
  EXPECT_EQ(resolve_runtime_config(llama, o).kv.snap_kernel, 31u);
  o.kv_policy = run_policy(KvPolicyKind::RocketKV);
  o.snap_kernel = 15;
  EXPECT_EQ(resolve_runtime_config(gemma, o).kv.snap_kernel, 15u) << "the caller's kernel wins";

  // A snapkv file with kernel 9 (stories260K is llama): snapkv runs 9, rocketkv the architecture's.
  convert::WriteOptions wo;
  wo.kv.policy = fb::KvPolicy::SnapKV;
  wo.kv.snap_kernel = 9;
  const auto loaded = stories_with(wo, "run_config_kernels.keel");
  ASSERT_NE(loaded, nullptr);
  const test::LoadedModel& c = *loaded;
  const RunDefaults d = model_run_defaults(c.model);
  EXPECT_EQ(d.snap_kernel(KvPolicyKind::SnapKV), 9u);
  EXPECT_EQ(d.snap_kernel(KvPolicyKind::SnapStream), kSnapKernelSnapStream);
  EXPECT_EQ(d.snap_kernel(KvPolicyKind::RocketKV), kSnapKernelRocketKV);
}

TEST(RunConfig, LegacySnapStreamKernelReadsAsTheOneRunsUsed) {
  // Converters before run_config.h wrote 7 under snapstream; runs used 31 and still do.
  convert::WriteOptions wo;
  wo.kv.snap_kernel = 7;
  const auto loaded = stories_with(wo, "run_config_legacy.keel");
  ASSERT_NE(loaded, nullptr);
  const test::LoadedModel& c = *loaded;
  EXPECT_EQ(c.model.meta()->kv_defaults()->snap_kernel(), 7u);
  EXPECT_EQ(default_runtime_config(c.model).kv.snap_kernel, 31u);
}

TEST(RunConfig, BadOverridesNameTheParameter) {
  const auto loaded = stories_with(convert::WriteOptions{}, "run_config_bad.keel");
  ASSERT_NE(loaded, nullptr);
  const test::LoadedModel& c = *loaded;
  RuntimeConfig rc;
  RunOverrides o;
  o.kv_policy = 7;  // one past rocketkv
  Error e = make_runtime_config(c.model, o, &rc);
  EXPECT_EQ(e.status(), Status::InvalidArgument);
  EXPECT_NE(std::string(e.message()).find("kv_policy 7"), std::string::npos) << e.message();
  o = RunOverrides{};
  o.snap_kernel = -2;
  e = make_runtime_config(c.model, o, &rc);
  EXPECT_EQ(e.status(), Status::InvalidArgument);
  EXPECT_NE(std::string(e.message()).find("snap_kernel -2"), std::string::npos) << e.message();
  o.snap_kernel = 4;
  e = make_runtime_config(c.model, o, &rc);
  EXPECT_EQ(e.status(), Status::InvalidArgument);
  EXPECT_NE(std::string(e.message()).find("snap_kernel 4"), std::string::npos) << e.message();
  EXPECT_EQ(std::string(e.message()).find("--"), std::string::npos) << "engine messages name parameters, not flags";
  o = RunOverrides{};
  o.rocket_select = 3;
  e = make_runtime_config(c.model, o, &rc);
  EXPECT_EQ(e.status(), Status::InvalidArgument);
  EXPECT_NE(std::string(e.message()).find("rocket_select 3"), std::string::npos) << e.message();
  o = RunOverrides{};
  o.kv_positions = 3;
  e = make_runtime_config(c.model, o, &rc);
  EXPECT_EQ(e.status(), Status::InvalidArgument);
  EXPECT_NE(std::string(e.message()).find("kv_positions 3"), std::string::npos) << e.message();
  // The two-valued overrides: 0 and 1 are the default (stories260K is of the llama family,
  // whose page ranking is RocketKV's group bound), 2 the other.
  for (uint32_t v : {0u, 1u, 2u}) {
    o = RunOverrides{};
    o.rocket_select = o.kv_positions = v;
    ASSERT_TRUE(make_runtime_config(c.model, o, &rc).ok());
    EXPECT_EQ(rc.kv.rocket_select, v == 2 ? RocketSelect::Head : RocketSelect::Group);
    EXPECT_EQ(rc.kv.positions, v == 2 ? KvPositions::Original : KvPositions::Cache);
  }
  o = RunOverrides{};
  o.kv_budget_tokens = 40;  // snapstream: 4 sinks + 32 + a 10-token ring leave nothing
  e = make_runtime_config(c.model, o, &rc);
  EXPECT_EQ(e.status(), Status::BudgetTooSmall) << e.message();
}

struct Shape {
  static constexpr uint32_t vocab_size = 512, dim = 64, n_layers = 5, n_heads = 8, n_kv_heads = 4, head_dim = 8,
                            ffn_dim = 172, context_length = 512, tokenizer_bytes = 5140;
};

// The three entry points agree: keel_config zeroed, Engine<>'s template and the C++ function.
TEST(RunConfig, EntryPointsAgree) {
  const auto loaded = stories_with(convert::WriteOptions{}, "run_config_entry.keel");
  ASSERT_NE(loaded, nullptr);
  const test::LoadedModel& c = *loaded;
  const RuntimeConfig rc = default_runtime_config(c.model);
  keel_plan_info info{};
  ASSERT_EQ(keel_plan(c.file.data(), c.file.size(), nullptr, &info), KEEL_OK);
  const MemoryPlan p = Runtime::plan(c.model, rc);
  EXPECT_EQ(info.persistent_bytes, p.persistent_bytes);
  EXPECT_EQ(info.scratch_bytes, p.scratch_bytes);

  using E = Engine<Shape, 1024, 1, 64>;
  static_assert(E::kRuntimeConfig.kv.kind == KvPolicyKind::SnapStream);
  static_assert(E::kRuntimeConfig.kv.snap_kernel == kSnapKernelSnapStream);
  static_assert(E::kRuntimeConfig.kv.sinks == kDefaultSinks && E::kRuntimeConfig.kv.obs_window == kDefaultObsWindow);
  static_assert(E::kPlan.obs_window == kDefaultObsWindow);
  EXPECT_EQ(E::kPlan.persistent_bytes, p.persistent_bytes);
  EXPECT_EQ(E::kPlan.scratch_bytes, p.scratch_bytes);
  static_assert(Engine<Shape, 256, 1, 16, KvPolicyKind::Full>::kPlan.obs_window == 0);
}

}  // namespace
}  // namespace keel
