// The tokens SnapKV keeps, per layer and KV head, on a fixed prompt of stories260K, equal those
// an independent numpy implementation of the paper's definition keeps
// (tests/reference/snapkv_reference.py -> tests/golden/snapkv_stories260K.json).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <set>
#include <vector>

#include "llm/runtime.h"
#include "support/runtime_fixture.h"
#include "support/test_support.h"

namespace keel {
namespace {

TEST(SnapKvReference, KeepsWhatThePaperDefinitionKeeps) {
  std::ifstream gf(test::require_file(test::source_path("tests/golden/snapkv_stories260K.json")));
  const nlohmann::json g = nlohmann::json::parse(gf, nullptr, false);
  ASSERT_FALSE(g.is_discarded());
  const uint32_t budget = g["budget"], window = g["window"], kernel = g["kernel"];
  std::vector<int32_t> ids = g["ids"].get<std::vector<int32_t>>();

  const Model& model = test::stories260k(convert::QuantMode::Keep).model;  // F32, as the reference computes
  ASSERT_TRUE(model.loaded());

  // The whole prompt in one chunk, so the one compression sees exactly the reference's attention.
  RuntimeConfig rc;
  rc.backend = BackendKind::Native;
  rc.kv.kind = KvPolicyKind::SnapKV;
  rc.kv.obs_window = window;
  rc.kv.snap_kernel = kernel;
  rc.plan.kv_budget_tokens = budget;
  rc.plan.chunk_tokens = uint32_t(ids.size());
  const MemoryPlan p = Runtime::plan(model, rc);
  std::vector<uint8_t> persistent(p.persistent_bytes + 64), scratch(p.scratch_bytes + 64);
  auto aligned = [](std::vector<uint8_t>& v) {
    return v.data() + (64 - reinterpret_cast<uintptr_t>(v.data()) % 64) % 64;
  };
  Runtime rt;
  ASSERT_TRUE(rt.init(model, rc, Span<uint8_t>(aligned(persistent), p.persistent_bytes),
                      Span<uint8_t>(aligned(scratch), p.scratch_bytes), nullptr)
                  .ok());
  ASSERT_TRUE(rt.prefill(0, Span<const int32_t>(ids.data(), ids.size())).ok());
  const KvCache& kv = rt.kv_cache(0);
  ASSERT_EQ(kv.prefix(), budget);

  size_t same = 0, total = 0, near_ties = 0;
  for (uint32_t l = 0; l < model.shape().n_layers; ++l) {
    for (uint32_t h = 0; h < model.shape().n_kv_heads; ++h) {
      const auto& ref = g["layers"][l][h];
      const std::vector<int32_t> want = ref["kept"].get<std::vector<int32_t>>();
      const std::vector<double> pooled = ref["pooled"].get<std::vector<double>>();
      const double cutoff = ref["cutoff"];
      std::vector<int32_t> got;
      for (uint32_t i = 0; i < kv.prefix(); ++i) got.push_back(kv.positions(l, h)[kv.physical(i)]);
      ASSERT_EQ(got.size(), want.size());
      EXPECT_TRUE(std::is_sorted(got.begin(), got.end())) << "kept tokens stay in original order";
      // The observation window is always kept.
      for (uint32_t i = 0; i < window; ++i) EXPECT_EQ(got[got.size() - window + i], int32_t(ids.size() - window + i));
      const std::set<int32_t> a(got.begin(), got.end()), b(want.begin(), want.end());
      for (int32_t t : want) same += a.count(t);
      total += want.size();
      // A token chosen by only one side must sit on the cut-off: its pooled score equal to the
      // last kept one's up to float rounding (max-pooling makes plateaus of equal scores).
      for (int32_t t : got) {
        if (b.count(t)) continue;
        ASSERT_LT(size_t(t), pooled.size());
        EXPECT_NEAR(pooled[t], cutoff, 1e-4 * std::fabs(cutoff)) << "layer " << l << " head " << h << " kept " << t;
        ++near_ties;
      }
    }
  }
  printf("[snapkv] %zu of %zu reference selections kept; %zu differ only at the cut-off tie\n", same, total, near_ties);
  EXPECT_GE(double(same) / double(total), 0.98);
}

}  // namespace
}  // namespace keel
