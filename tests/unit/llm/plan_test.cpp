// The memory plan is exact: after Runtime::init the persistent arena holds exactly
// plan.persistent_bytes and the scratch arena's high-water mark is exactly plan.scratch_bytes,
// and running tokens afterwards takes nothing more. An arena one byte short is refused with
// ArenaTooSmall naming both sizes, and the same Runtime then initializes and works with
// arenas of the right size.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "convert/keel_writer.h"
#include "convert/source_model.h"
#include "llm/runtime.h"
#include "model/model.h"
#include "ports/linux/backend_plan.h"
#include "ports/linux/thread_pool.h"
#include "support/runtime_fixture.h"
#include "support/test_support.h"

namespace keel {
namespace {

struct FreeDeleter {
  void operator()(uint8_t* p) const { free(p); }
};
using Buffer = std::unique_ptr<uint8_t, FreeDeleter>;

Buffer aligned_buffer(uint64_t bytes) {
  return Buffer(static_cast<uint8_t*>(aligned_alloc(kPlanAlign, plan_align(bytes ? bytes : 1))));
}

struct Converted {
  std::unique_ptr<test::LoadedModel> loaded;
  PlanShape source_shape{};  // the converter's view of the plan inputs
  const Model& model() const { return loaded->model; }
};

// `src` converted with --quant keep; nullptr, and the test failed, when that did not work.
std::unique_ptr<Converted> convert_keep(const convert::SourceModel* src, const std::string& name) {
  if (!src) return nullptr;
  std::unique_ptr<test::LoadedModel> loaded = test::convert_and_load(*src, convert::QuantMode::Keep, name);
  if (!loaded) return nullptr;
  return std::make_unique<Converted>(Converted{std::move(loaded), convert::plan_shape(*src)});
}

std::unique_ptr<Converted> load_stories() { return convert_keep(test::stories260k_source(), "plan_stories260K.keel"); }

std::unique_ptr<Converted> load_smollm2() { return convert_keep(test::smollm2_source(), "plan_smollm2.keel"); }

std::string describe(const PlanConfig& c) {
  return "budget " + std::to_string(c.kv_budget_tokens) + ", slots " + std::to_string(c.slots) + ", chunk " +
         std::to_string(c.chunk_tokens) + ", threads " + std::to_string(c.threads) + ", logit rows " +
         std::to_string(c.logit_rows);
}

const PlanConfig kConfigs[] = {
    // kv_budget_tokens, slots, chunk_tokens, threads, logit_rows
    {1024, 1, 64, 1, 1}, {256, 2, 16, 2, 4}, {2048, 1, 64, 2, 16}, {7, 3, 1, 1, 1}, {100, 1, 33, 2, 33},
};

// A few tokens through every entry point that touches the arenas.
void exercise(Runtime& rt, uint32_t slots, uint32_t budget) {
  const std::vector<int32_t> prompt = {1, 2, 3, 4, 5};
  const size_t n = prompt.size() < budget ? prompt.size() : budget - 1;
  for (uint32_t s = 0; s < slots; ++s) {
    Error e = rt.prefill(s, Span<const int32_t>(prompt.data(), n));
    ASSERT_TRUE(e.ok()) << to_string(e.status()) << ": " << e.message();
    const Result<int32_t> id = rt.sample(s);
    ASSERT_TRUE(id.ok()) << id.error().message();
    e = rt.decode(s, id.value());
    ASSERT_TRUE(e.ok()) << to_string(e.status()) << ": " << e.message();
  }
  text::SamplerConfig sc;
  sc.temperature = 0.8f;
  sc.top_k = 40;
  sc.top_p = 0.9f;
  sc.repetition_penalty = 1.1f;
  sc.seed = 7;
  ASSERT_TRUE(rt.set_sampler(0, sc).ok());
  ASSERT_TRUE(rt.sample(0).ok());
  const char text[] = "Once upon a time, there was a little girl.";
  int32_t ids[64];
  size_t n_ids = 0;
  const Error e = rt.tokenize(text, sizeof text - 1, text::EncodeOptions{}, Span<int32_t>(ids), &n_ids);
  ASSERT_TRUE(e.ok()) << to_string(e.status()) << ": " << e.message();
  const std::vector<int32_t> score_ids = {1, 2, 3};
  const size_t n_score = budget < score_ids.size() ? budget : score_ids.size();
  ASSERT_TRUE(rt.reset(0).ok());
  size_t rows = 0;
  const Error se = rt.score(
      0, Span<const int32_t>(score_ids.data(), n_score),
      [](void* ctx, size_t, const float*) { ++*static_cast<size_t*>(ctx); }, &rows);
  ASSERT_TRUE(se.ok()) << to_string(se.status()) << ": " << se.message();
  EXPECT_EQ(rows, n_score);
}

// The backends this build offers (XNNPACK keeps operator state in the persistent arena, so it
// is planned through its own measured block).
std::vector<BackendKind> offered_backends() {
  std::vector<BackendKind> kinds;
  for (const BackendKind k : {BackendKind::Ref, BackendKind::Native, BackendKind::Xnnpack, BackendKind::Auto}) {
    if (backend_supported(k).ok()) kinds.push_back(k);
  }
  return kinds;
}

void check_plan_is_exact(const Converted& c, const char* model_name) {
  const std::vector<BackendKind> kinds = offered_backends();
  ASSERT_GE(kinds.size(), 2u) << "ref and auto are always offered";
  for (const BackendKind kind : kinds) {
    for (const PlanConfig& pc : kConfigs) {
      SCOPED_TRACE(std::string(model_name) + ", backend " + backend_name(kind) + ": " + describe(pc));
      RuntimeConfig cfg;
      cfg.plan = pc;
      cfg.backend = kind;
      std::string err;
      ASSERT_TRUE(port::reserve_backend_bytes(c.model(), cfg, err)) << err;
      const MemoryPlan plan = Runtime::plan(c.model(), cfg);
      // What a firmware header computes from the converter's shape is what the engine plans.
      const MemoryPlan from_source = plan_memory(c.source_shape, cfg.plan, cfg.kv);
      EXPECT_EQ(from_source.persistent_bytes, plan.persistent_bytes);
      EXPECT_EQ(from_source.scratch_bytes, plan.scratch_bytes);
      EXPECT_EQ(plan.persistent_bytes % kPlanAlign, 0u);
      EXPECT_EQ(plan.scratch_bytes % kPlanAlign, 0u);

      Buffer persistent = aligned_buffer(plan.persistent_bytes), scratch = aligned_buffer(plan.scratch_bytes);
      std::unique_ptr<port::LinuxThreadPool> pool;
      if (pc.threads > 1) pool = std::make_unique<port::LinuxThreadPool>(pc.threads);
      auto rt = std::make_unique<Runtime>();
      const Error e = rt->init(c.model(), cfg, Span<uint8_t>(persistent.get(), plan.persistent_bytes),
                               Span<uint8_t>(scratch.get(), plan.scratch_bytes), pool ? pool->pool() : nullptr);
      ASSERT_TRUE(e.ok()) << to_string(e.status()) << ": " << e.message();
      RuntimeStats st = rt->stats();
      EXPECT_EQ(st.persistent_used_bytes, plan.persistent_bytes);
      EXPECT_EQ(st.persistent_planned_bytes, plan.persistent_bytes);
      EXPECT_EQ(st.scratch_high_water_bytes, plan.scratch_bytes);
      EXPECT_EQ(st.scratch_planned_bytes, plan.scratch_bytes);

      exercise(*rt, pc.slots, pc.kv_budget_tokens);
      st = rt->stats();
      EXPECT_EQ(st.persistent_used_bytes, plan.persistent_bytes) << "persistent arena grew after init";
      EXPECT_EQ(st.scratch_high_water_bytes, plan.scratch_bytes) << "scratch arena grew after init";
    }
  }
}

bool mentions(const char* message, uint64_t n) {
  return std::string(message).find(std::to_string(n)) != std::string::npos;
}

// Logits of a short prompt from a runtime initialized with exactly planned arenas.
std::vector<float> reference_logits(const Model& model, const RuntimeConfig& cfg, const std::vector<int32_t>& prompt) {
  const MemoryPlan plan = Runtime::plan(model, cfg);
  Buffer persistent = aligned_buffer(plan.persistent_bytes), scratch = aligned_buffer(plan.scratch_bytes);
  auto rt = std::make_unique<Runtime>();
  Error e = rt->init(model, cfg, Span<uint8_t>(persistent.get(), plan.persistent_bytes),
                     Span<uint8_t>(scratch.get(), plan.scratch_bytes), nullptr);
  EXPECT_TRUE(e.ok()) << e.message();
  if (!e.ok()) return {};
  e = rt->prefill(0, Span<const int32_t>(prompt.data(), prompt.size()));
  EXPECT_TRUE(e.ok()) << e.message();
  const Span<const float> l = rt->logits(0);
  return std::vector<float>(l.begin(), l.end());
}

void check_one_byte_short(const Converted& c, const char* model_name) {
  SCOPED_TRACE(model_name);
  RuntimeConfig cfg;
  cfg.plan = PlanConfig{128, 1, 16, 1, 1};
  cfg.backend = BackendKind::Auto;
  std::string err;
  ASSERT_TRUE(port::reserve_backend_bytes(c.model(), cfg, err)) << err;
  const MemoryPlan plan = Runtime::plan(c.model(), cfg);
  Buffer persistent = aligned_buffer(plan.persistent_bytes), scratch = aligned_buffer(plan.scratch_bytes);
  const Span<uint8_t> p_ok(persistent.get(), plan.persistent_bytes), s_ok(scratch.get(), plan.scratch_bytes);
  const Span<uint8_t> p_short(persistent.get(), plan.persistent_bytes - 1),
      s_short(scratch.get(), plan.scratch_bytes - 1);
  auto rt = std::make_unique<Runtime>();

  Error e = rt->init(c.model(), cfg, p_short, s_ok, nullptr);
  std::printf("[plan] %s, persistent one byte short: %s: %s\n", model_name, to_string(e.status()), e.message());
  EXPECT_EQ(e.status(), Status::ArenaTooSmall) << e.message();
  EXPECT_TRUE(mentions(e.message(), plan.persistent_bytes - 1)) << e.message();
  EXPECT_TRUE(mentions(e.message(), plan.persistent_bytes)) << e.message();
  EXPECT_FALSE(rt->initialized());

  e = rt->init(c.model(), cfg, p_ok, s_short, nullptr);
  std::printf("[plan] %s, scratch one byte short: %s: %s\n", model_name, to_string(e.status()), e.message());
  EXPECT_EQ(e.status(), Status::ArenaTooSmall) << e.message();
  EXPECT_TRUE(mentions(e.message(), plan.scratch_bytes - 1)) << e.message();
  EXPECT_TRUE(mentions(e.message(), plan.scratch_bytes)) << e.message();
  EXPECT_FALSE(rt->initialized());

  e = rt->init(c.model(), cfg, p_short, s_short, nullptr);
  EXPECT_EQ(e.status(), Status::ArenaTooSmall) << e.message();
  EXPECT_FALSE(rt->initialized());
  // Calls on the refused runtime fail cleanly.
  const int32_t one = 1;
  EXPECT_FALSE(rt->prefill(0, Span<const int32_t>(&one, 1)).ok());

  e = rt->init(c.model(), cfg, p_ok, s_ok, nullptr);
  ASSERT_TRUE(e.ok()) << to_string(e.status()) << ": " << e.message();
  EXPECT_TRUE(rt->initialized());
  const RuntimeStats st = rt->stats();
  EXPECT_EQ(st.persistent_used_bytes, plan.persistent_bytes);
  EXPECT_EQ(st.scratch_high_water_bytes, plan.scratch_bytes);

  const std::vector<int32_t> prompt = {1, 5, 9, 13, 17, 21};
  e = rt->prefill(0, Span<const int32_t>(prompt.data(), prompt.size()));
  ASSERT_TRUE(e.ok()) << to_string(e.status()) << ": " << e.message();
  const Span<const float> got = rt->logits(0);
  const std::vector<float> want = reference_logits(c.model(), cfg, prompt);
  ASSERT_EQ(got.size(), want.size());
  size_t differing = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (!std::isfinite(got[i]) || std::memcmp(&got[i], &want[i], sizeof(float)) != 0) ++differing;
  }
  EXPECT_EQ(differing, 0u) << "logits after refused inits differ from a fresh runtime's";
}

TEST(Plan, Stories260KArenasAreExactlyThePlan) {
  auto c = load_stories();
  ASSERT_NE(c, nullptr);
  check_plan_is_exact(*c, "stories260K");
}

TEST(Plan, SmolLM2ArenasAreExactlyThePlan) {
  auto c = load_smollm2();
  ASSERT_NE(c, nullptr);
  check_plan_is_exact(*c, "SmolLM2-135M");
}

TEST(Plan, Stories260KOneByteShortIsRefusedThenWorks) {
  auto c = load_stories();
  ASSERT_NE(c, nullptr);
  check_one_byte_short(*c, "stories260K");
}

TEST(Plan, SmolLM2OneByteShortIsRefusedThenWorks) {
  auto c = load_smollm2();
  ASSERT_NE(c, nullptr);
  check_one_byte_short(*c, "SmolLM2-135M");
}

}  // namespace
}  // namespace keel
