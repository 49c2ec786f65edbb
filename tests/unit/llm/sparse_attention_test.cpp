// Sparse decode attention on a real model (stories260K): with a per-step budget that covers
// the cache it is exact attention bit for bit (full + topk against full, rocketkv against
// snapstream with rocketkv's kernel, through compressions and ring overwrites); with a small
// budget it reads fewer tokens and stays finite; bad settings get clear errors.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <vector>

#include "llm/run_config.h"
#include "llm/runtime.h"
#include "support/runtime_fixture.h"
#include "support/test_support.h"

namespace keel {
namespace {

const test::LoadedModel& stories() { return test::stories260k(convert::QuantMode::Q8); }

struct Engine : test::TestRuntime {
  explicit Engine(const RuntimeConfig& rc) : TestRuntime(stories().model, rc, false) {}
};

RuntimeConfig config(KvPolicyKind kind, uint32_t budget, uint32_t sparse_budget, uint32_t kernel = 0) {
  RuntimeConfig rc;
  rc.backend = BackendKind::Native;
  rc.kv.kind = kind;
  rc.kv.sparse_budget = sparse_budget;
  if (kernel) rc.kv.snap_kernel = kernel;
  rc.plan.kv_budget_tokens = budget;
  rc.plan.chunk_tokens = 16;
  return rc;
}

std::vector<float> trace(Engine& e, const std::vector<int32_t>& prompt, int steps) {
  return test::greedy_logit_trace(e.runtime, prompt, steps);
}

TEST(SparseAttention, BudgetCoveringTheCacheIsFullAttentionBitForBit) {
  const auto prompt = test::pseudo_random_ids(150, stories().model.shape().vocab_size);
  Engine full(config(KvPolicyKind::Full, 256, 0));
  Engine topk(config(KvPolicyKind::Full, 256, 512));  // k = 256: every page, every step
  ASSERT_TRUE(full.error.ok()) << full.error.message();
  ASSERT_TRUE(topk.error.ok()) << topk.error.message();
  EXPECT_GT(topk.plan.sparse.page, 0u);
  EXPECT_EQ(trace(topk, prompt, 60), trace(full, prompt, 60));
}

TEST(SparseAttention, RocketKvWithACoveringBudgetIsSnapStreamWithItsKernel) {
  // A prompt 3x the budget: SnapKV++ compresses every chunk; decoding then overwrites the ring.
  const auto prompt = test::pseudo_random_ids(400, stories().model.shape().vocab_size);
  Engine snap(config(KvPolicyKind::SnapStream, 128, 0, kSnapKernelRocketKV));
  Engine rocket(config(KvPolicyKind::RocketKV, 128, 256));
  ASSERT_TRUE(snap.error.ok()) << snap.error.message();
  ASSERT_TRUE(rocket.error.ok()) << rocket.error.message();
  EXPECT_EQ(trace(rocket, prompt, 80), trace(snap, prompt, 80));
  EXPECT_GT(rocket.runtime.kv_cache(0).prefix(), 0u);
}

// The same with original positions: every page is then scored and attended in one frame (the
// query at its position), as the dense path attends to the whole cache.
TEST(SparseAttention, RocketKvWithACoveringBudgetIsSnapStreamWithOriginalPositionsToo) {
  const auto prompt = test::pseudo_random_ids(400, stories().model.shape().vocab_size);
  RuntimeConfig snap_rc = config(KvPolicyKind::SnapStream, 128, 0, kSnapKernelRocketKV);
  RuntimeConfig rocket_rc = config(KvPolicyKind::RocketKV, 128, 256);
  snap_rc.kv.positions = rocket_rc.kv.positions = KvPositions::Original;
  Engine snap(snap_rc), rocket(rocket_rc);
  ASSERT_TRUE(snap.error.ok()) << snap.error.message();
  ASSERT_TRUE(rocket.error.ok()) << rocket.error.message();
  const std::vector<float> want = trace(snap, prompt, 80);
  EXPECT_EQ(trace(rocket, prompt, 80), want);
  EXPECT_GT(rocket.runtime.kv_cache(0).prefix(), 0u);
  EXPECT_EQ(rocket.runtime.kv_cache(0).index_rotated(), 0u);
  // The frames matter: with cache positions the same prompt decodes to other logits.
  Engine cache(config(KvPolicyKind::SnapStream, 128, 0, kSnapKernelRocketKV));
  ASSERT_TRUE(cache.error.ok()) << cache.error.message();
  EXPECT_NE(trace(cache, prompt, 80), want);
}

TEST(SparseAttention, HeadRankingWithACoveringBudgetIsExactAttentionToo) {
  // Every page chosen whatever the ranking: full + topk and rocketkv equal their exact runs.
  const auto prompt = test::pseudo_random_ids(400, stories().model.shape().vocab_size);
  RuntimeConfig full_head = config(KvPolicyKind::Full, 512, 1024);
  full_head.kv.rocket_select = RocketSelect::Head;
  RuntimeConfig rocket_head = config(KvPolicyKind::RocketKV, 128, 256);
  rocket_head.kv.rocket_select = RocketSelect::Head;
  Engine full(config(KvPolicyKind::Full, 512, 0)), topk(full_head);
  Engine snap(config(KvPolicyKind::SnapStream, 128, 0, kSnapKernelRocketKV)), rocket(rocket_head);
  ASSERT_TRUE(topk.error.ok()) << topk.error.message();
  ASSERT_TRUE(rocket.error.ok()) << rocket.error.message();
  EXPECT_EQ(topk.plan.sparse.select, RocketSelect::Head);
  EXPECT_EQ(trace(topk, prompt, 40), trace(full, prompt, 40));
  EXPECT_EQ(trace(rocket, prompt, 40), trace(snap, prompt, 40));
}

TEST(SparseAttention, HeadRankingReadsASubsetAndStaysFinite) {
  const auto prompt = test::pseudo_random_ids(200, stories().model.shape().vocab_size);
  RuntimeConfig rc = config(KvPolicyKind::Full, 320, 32);
  rc.kv.rocket_select = RocketSelect::Head;
  Engine group(config(KvPolicyKind::Full, 320, 32)), head(rc);
  ASSERT_TRUE(head.error.ok()) << head.error.message();
  const auto a = trace(group, prompt, 40), b = trace(head, prompt, 40);
  ASSERT_EQ(a.size(), b.size());
  for (float x : b) ASSERT_TRUE(std::isfinite(x));
  // The two rankings choose differently somewhere in 40 steps of 16 tokens out of 200+.
  EXPECT_NE(a, b);
}

TEST(SparseAttention, SmallBudgetReadsASubsetAndStaysFinite) {
  const auto prompt = test::pseudo_random_ids(200, stories().model.shape().vocab_size);
  Engine full(config(KvPolicyKind::Full, 320, 0));
  Engine topk(config(KvPolicyKind::Full, 320, 32));
  ASSERT_TRUE(topk.error.ok()) << topk.error.message();
  EXPECT_EQ(topk.plan.sparse.topk, 16u);
  const auto a = trace(full, prompt, 40), b = trace(topk, prompt, 40);
  ASSERT_EQ(a.size(), b.size());
  for (float x : b) ASSERT_TRUE(std::isfinite(x));
  const size_t vocab = stories().model.shape().vocab_size;
  // The prefill is exact attention; the decode steps read 16 of 200+ tokens and differ.
  EXPECT_TRUE(std::equal(a.begin(), a.begin() + vocab, b.begin()));
  EXPECT_FALSE(std::equal(a.begin() + vocab, a.end(), b.begin() + vocab));
}

TEST(SparseAttention, PlanHoldsSummariesAndGatherOnlyWhenOn) {
  const MemoryPlan off = Runtime::plan(stories().model, config(KvPolicyKind::Full, 512, 0));
  const MemoryPlan on = Runtime::plan(stories().model, config(KvPolicyKind::Full, 512, 64));
  EXPECT_EQ(off.region_bytes(Region::KvPages), 0u);
  EXPECT_EQ(off.region_bytes(Region::SparseGather), 0u);
  EXPECT_GT(on.region_bytes(Region::KvPages), 0u);
  EXPECT_GT(on.region_bytes(Region::SparseGather), 0u);
  EXPECT_GT(on.persistent_bytes, off.persistent_bytes);
  // The key moments only for the ranking that reads them.
  EXPECT_EQ(on.region_bytes(Region::KvKeyMoments), 0u);
  RuntimeConfig head = config(KvPolicyKind::Full, 512, 64);
  head.kv.rocket_select = RocketSelect::Head;
  EXPECT_GT(Runtime::plan(stories().model, head).region_bytes(Region::KvKeyMoments), 0u);
}

TEST(SparseAttention, BadSettingsAreRefusedByName) {
  RunOverrides o;
  o.kv_policy = run_policy(KvPolicyKind::Full);
  o.sparse_budget = 1;
  RuntimeConfig rc;
  Error e = make_runtime_config(stories().model, o, &rc);
  EXPECT_EQ(e.status(), Status::InvalidArgument);
  EXPECT_NE(std::string(e.message()).find("sparse_budget 1"), std::string::npos) << e.message();
  o.sparse_budget = 64;
  o.rocket_topk = 65;
  e = make_runtime_config(stories().model, o, &rc);
  EXPECT_NE(std::string(e.message()).find("rocket_topk 65"), std::string::npos) << e.message();
  o.rocket_topk = 0;
  o.rocket_page = 100000;
  e = make_runtime_config(stories().model, o, &rc);
  EXPECT_NE(std::string(e.message()).find("rocket_page 100000"), std::string::npos) << e.message();
  o = RunOverrides{};
  o.kv_policy = run_policy(KvPolicyKind::RocketKV);
  ASSERT_TRUE(make_runtime_config(stories().model, o, &rc).ok());
  EXPECT_EQ(rc.kv.snap_kernel, kSnapKernelRocketKV);
  EXPECT_EQ(sparse_split(rc.kv, rc.plan.kv_budget_tokens, 8, 16).budget, rc.plan.kv_budget_tokens / 4);
}

}  // namespace
}  // namespace keel
