// KV policies on a real model (stories260K): bit-identical to full while the budget holds the
// sequence; bounded memory for a 100k-token prompt; clear errors for budgets that cannot work.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "llm/runtime.h"
#include "support/runtime_fixture.h"
#include "support/test_support.h"

namespace keel {
namespace {

const test::LoadedModel& stories() { return test::stories260k(convert::QuantMode::Q8); }

struct Engine : test::TestRuntime {
  static RuntimeConfig config(KvPolicyKind kind, uint32_t budget, uint32_t chunk) {
    RuntimeConfig rc;
    rc.backend = BackendKind::Native;
    rc.kv.kind = kind;
    rc.plan.kv_budget_tokens = budget;
    rc.plan.chunk_tokens = chunk;
    return rc;
  }
  Engine(KvPolicyKind kind, uint32_t budget, uint32_t chunk)
      : TestRuntime(stories().model, config(kind, budget, chunk), false) {}
};

std::vector<float> trace(Engine& e, const std::vector<int32_t>& prompt, int steps) {
  return test::greedy_logit_trace(e.runtime, prompt, steps);
}

TEST(KvPolicies, BitIdenticalToFullWhileTheBudgetHoldsTheSequence) {
  ASSERT_TRUE(stories().model.loaded());
  const auto prompt = test::pseudo_random_ids(150, 512, 11);
  Engine full(KvPolicyKind::Full, 300, 16);
  ASSERT_TRUE(full.error.ok()) << full.error.message();
  const std::vector<float> want = trace(full, prompt, 60);
  for (KvPolicyKind k :
       {KvPolicyKind::Window, KvPolicyKind::Streaming, KvPolicyKind::SnapKV, KvPolicyKind::SnapStream}) {
    Engine e(k, 300, 16);
    ASSERT_TRUE(e.error.ok()) << kv_policy_name(k) << ": " << e.error.message();
    const std::vector<float> got = trace(e, prompt, 60);
    ASSERT_EQ(got.size(), want.size());
    EXPECT_EQ(memcmp(got.data(), want.data(), got.size() * 4), 0) << kv_policy_name(k) << " differs from full";
    EXPECT_EQ(e.runtime.kv_cache(0).evicted(), 0u);
  }
}

// With original positions (docs/kv.md, "Positions") compression moves keys but never rotates
// them: every entry of layer 0, whose keys depend only on the token and its position, is bit
// for bit the key the full cache holds at that position, through chunked compressions, the hold
// and decoding. With cache positions exactly the prefix entries kept away from their position
// are re-rotated: the comparison tells the two apart.
TEST(KvPolicies, OriginalPositionsKeepEveryKeyAsTheModelComputedIt) {
  ASSERT_TRUE(stories().model.loaded());
  const auto prompt = test::pseudo_random_ids(400, 512, 17);
  const uint32_t steps = 24;
  Engine full(KvPolicyKind::Full, 512, 16);
  ASSERT_TRUE(full.error.ok()) << full.error.message();
  std::vector<int32_t> tokens = prompt;
  ASSERT_TRUE(full.runtime.prefill(0, Span<const int32_t>(prompt.data(), prompt.size())).ok());
  for (uint32_t i = 0; i < steps; ++i) {
    const Result<int32_t> t = full.runtime.sample(0);
    ASSERT_TRUE(t.ok());
    tokens.push_back(t.value());
    ASSERT_TRUE(full.runtime.decode(0, t.value()).ok());
  }
  const KvCache& ref = full.runtime.kv_cache(0);
  const uint32_t row = ref.row_halves();
  // Entries of layer 0 whose key differs from the full cache's at their position.
  auto differing = [&](const KvCache& kv) {
    uint32_t n = 0;
    for (uint32_t h = 0; h < kv.shape().n_kv_heads; ++h) {
      for (uint32_t i = 0; i < kv.visible(); ++i) {
        const uint32_t e = kv.physical(i);
        const int32_t position = kv.positions(0, h)[e];
        n += memcmp(kv.keys(0, h) + uint64_t(e) * row, ref.keys(0, h) + uint64_t(position) * row, row * 2) != 0;
      }
    }
    return n;
  };
  ASSERT_EQ(differing(ref), 0u);
  uint32_t moved_total = 0;  // over the runs with cache positions
  for (KvPolicyKind k :
       {KvPolicyKind::Streaming, KvPolicyKind::SnapKV, KvPolicyKind::SnapStream, KvPolicyKind::RocketKV}) {
    for (KvPositions mode : {KvPositions::Original, KvPositions::Cache}) {
      const bool original = mode == KvPositions::Original;
      SCOPED_TRACE(std::string(kv_policy_name(k)) + (original ? ", original" : ", cache"));
      RuntimeConfig rc = Engine::config(k, 128, 16);
      rc.kv.positions = mode;
      if (k == KvPolicyKind::RocketKV) rc.kv.sparse_budget = 64;
      test::TestRuntime e(stories().model, rc, false);
      ASSERT_TRUE(e.error.ok()) << e.error.message();
      ASSERT_TRUE(e.runtime.prefill(0, Span<const int32_t>(prompt.data(), prompt.size())).ok());
      const KvCache& kv = e.runtime.kv_cache(0);
      ASSERT_GT(kv.prefix(), k == KvPolicyKind::Streaming ? 0u : 16u);
      EXPECT_EQ(kv.index_rotated(), original ? 0u : kv.prefix());
      // With cache positions exactly the prefix entries whose cache index is not their
      // position were re-rotated.
      auto moved = [&] {
        uint32_t n = 0;
        if (original) return n;
        for (uint32_t h = 0; h < kv.shape().n_kv_heads; ++h) {
          for (uint32_t i = 0; i < kv.prefix(); ++i) n += kv.positions(0, h)[i] != int32_t(i);
        }
        return n;
      };
      EXPECT_EQ(differing(kv), moved()) << "after the prompt";
      moved_total += moved();
      // The same tokens as the full cache's run, whatever this cache would have sampled.
      for (uint32_t i = 0; i < steps; ++i) ASSERT_TRUE(e.runtime.decode(0, tokens[prompt.size() + i]).ok());
      EXPECT_EQ(differing(kv), moved()) << "after decoding";
    }
  }
  // Some kept prefixes are not a run from position 0 (on this prompt, snapkv's and
  // snapstream's; streaming's sinks are, and so is rocketkv's in layer 0), so the check above
  // could fail.
  EXPECT_GT(moved_total, 0u);
}

// 100k tokens, about 100 times the budget. Under the sanitizers, eight times slower (595 s
// against 77 on a Zen 3 core), 16k: still sixteen budgets' worth of evictions and compactions
// for each policy, along the same paths; the Release suite runs the full length.
TEST(KvPolicies, HundredThousandTokenPromptStaysInTheBudget) {
  ASSERT_TRUE(stories().model.loaded());
  const int32_t n_prompt = test::kSanitized ? 16000 : 100000, n_decode = 200;
  const auto prompt = test::pseudo_random_ids(size_t(n_prompt), 512, 5);
  for (KvPolicyKind k :
       {KvPolicyKind::Window, KvPolicyKind::Streaming, KvPolicyKind::SnapKV, KvPolicyKind::SnapStream}) {
    SCOPED_TRACE(kv_policy_name(k));
    Engine e(k, 1024, 64);
    ASSERT_TRUE(e.error.ok()) << e.error.message();
    ASSERT_TRUE(e.runtime.prefill(0, Span<const int32_t>(prompt.data(), prompt.size())).ok());
    for (int i = 0; i < n_decode; ++i) {
      const Result<int32_t> t = e.runtime.sample(0);
      ASSERT_TRUE(t.ok());
      ASSERT_TRUE(e.runtime.decode(0, t.value()).ok());
    }
    const KvCache& kv = e.runtime.kv_cache(0);
    EXPECT_LE(kv.visible(), 1024u);
    EXPECT_EQ(kv.next_position(), n_prompt + n_decode);
    EXPECT_EQ(kv.evicted() + kv.visible(), uint32_t(n_prompt + n_decode));
    for (float x : e.runtime.logits(0)) ASSERT_TRUE(std::isfinite(x));
    // Memory is the plan's, whatever the length: arenas used exactly as planned.
    const RuntimeStats st = e.runtime.stats();
    EXPECT_EQ(st.persistent_used_bytes, e.plan.persistent_bytes);
    EXPECT_LE(st.scratch_high_water_bytes, e.plan.scratch_bytes);
    if (k == KvPolicyKind::Streaming) {
      // Sinks are the first four tokens, the rest the most recent ones, in order.
      const int32_t* pos = kv.positions(0, 0);
      for (uint32_t i = 0; i < 4; ++i) EXPECT_EQ(pos[kv.physical(i)], int32_t(i));
      EXPECT_EQ(pos[kv.physical(kv.visible() - 1)], n_prompt + n_decode - 1);
    }
  }
}

TEST(KvPolicies, FullRefusesPastItsBudgetAndStaysUsable) {
  ASSERT_TRUE(stories().model.loaded());
  Engine e(KvPolicyKind::Full, 64, 16);
  ASSERT_TRUE(e.error.ok());
  const auto prompt = test::pseudo_random_ids(80, 512, 3);
  const Error err = e.runtime.prefill(0, Span<const int32_t>(prompt.data(), prompt.size()));
  EXPECT_EQ(err.status(), Status::KvFull);
  EXPECT_NE(std::string(err.message()).find("exceeds the KV budget of 64"), std::string::npos) << err.message();
  EXPECT_EQ(e.runtime.sequence_length(0), 0u);  // nothing was appended
  EXPECT_TRUE(e.runtime.prefill(0, Span<const int32_t>(prompt.data(), 40)).ok());
}

TEST(KvPolicies, BudgetTooSmallForThePolicyIsRefusedAtInit) {
  ASSERT_TRUE(stories().model.loaded());
  Engine e(KvPolicyKind::SnapStream, 40, 16);
  EXPECT_EQ(e.error.status(), Status::BudgetTooSmall) << e.error.message();
  Engine s(KvPolicyKind::Streaming, 4, 16);
  EXPECT_EQ(s.error.status(), Status::BudgetTooSmall) << s.error.message();
}

}  // namespace
}  // namespace keel
