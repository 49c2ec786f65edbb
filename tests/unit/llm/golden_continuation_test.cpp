// stories260K (llama2.c checkpoint converted to .keel, F32 kept) decoded greedily from BOS must
// give exactly the 200 ids llama.cpp gives (tests/golden/stories260K_greedy.json, written by
// tests/reference/stories260K_reference.py), on every backend this build offers.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <ostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "convert/keel_writer.h"
#include "convert/source_model.h"
#include "llm/runtime.h"
#include "model/model.h"
#include "ports/linux/backend_plan.h"
#include "ports/linux/mapped_file.h"
#include "ports/linux/thread_pool.h"
#include "support/runtime_fixture.h"
#include "support/test_support.h"

namespace keel {

// Test names and failure messages show the backend by name.
static void PrintTo(BackendKind k, std::ostream* os) { *os << backend_name(k); }

namespace {

// One thread: every output element is computed by one thread whatever the count, so the ids do
// not depend on it, and a tiny model gains nothing from a pool.
constexpr uint32_t kThreads = 1;

struct GreedyGolden {
  std::vector<int32_t> prompt;
  std::vector<int32_t> ids;
  std::string text;
};

bool load_golden(GreedyGolden& g) {
  const std::string path = test::require_file(test::source_path("tests/golden/stories260K_greedy.json"));
  if (path.empty()) return false;
  std::ifstream f(path);
  const nlohmann::json j = nlohmann::json::parse(f, nullptr, false);
  if (j.is_discarded() || !j.contains("prompt_ids") || !j.contains("ids")) {
    ADD_FAILURE() << path << ": expected JSON with prompt_ids and ids";
    return false;
  }
  g.prompt = j["prompt_ids"].get<std::vector<int32_t>>();
  g.ids = j["ids"].get<std::vector<int32_t>>();
  g.text = j.value("text", "");
  return true;
}

// The converted model, shared by every test of this file.
const Model& stories() { return test::stories260k(convert::QuantMode::Keep).model; }

class GreedyContinuation : public ::testing::TestWithParam<BackendKind> {
 protected:
  // Inputs load on the first test and stay for the others; a missing input fails each test.
  static void load_once() {
    if (tried_) return;
    tried_ = true;
    golden_ = new GreedyGolden();
    load_golden(*golden_);
  }
  static void TearDownTestSuite() {
    delete golden_;
    golden_ = nullptr;
    tried_ = false;
  }

  void SetUp() override {
    load_once();
    ASSERT_NE(golden_, nullptr);
    ASSERT_EQ(golden_->ids.size(), 200u) << "golden data did not load";
    ASSERT_EQ(golden_->prompt, std::vector<int32_t>{1});
    ASSERT_TRUE(stories().loaded()) << "stories260K did not convert or load";
    const BackendKind kind = GetParam();
    const Error offered = backend_supported(kind);
    if (!offered.ok()) {
#if defined(__x86_64__)
      // Ref and Auto exist everywhere; on x86-64 hosts (AVX2 assumed) so does Native. Only a
      // backend the build leaves out is skipped.
      ASSERT_NE(kind, BackendKind::Native) << offered.message();
#endif
      ASSERT_NE(kind, BackendKind::Ref) << offered.message();
      ASSERT_NE(kind, BackendKind::Auto) << offered.message();
      GTEST_SKIP() << "this build does not offer backend '" << backend_name(kind) << "': " << offered.message();
    }
    RuntimeConfig cfg;
    cfg.backend = kind;
    cfg.plan.kv_budget_tokens = 256;
    cfg.plan.chunk_tokens = 64;
    cfg.plan.threads = kThreads;
    cfg.plan.logit_rows = 1;
    engine_ = std::make_unique<test::TestRuntime>(stories(), cfg);
    ASSERT_TRUE(engine_->error.ok()) << to_string(engine_->error.status()) << ": " << engine_->error.message();
  }

  // `count` greedy ids after prefilling `context` (sample, then decode what was sampled).
  std::vector<int32_t> greedy(const std::vector<int32_t>& context, size_t count) {
    Runtime& rt = engine_->runtime;
    std::vector<int32_t> out;
    EXPECT_TRUE(rt.reset(0).ok());
    EXPECT_TRUE(rt.set_sampler(0, text::SamplerConfig{}).ok());
    Error e = rt.prefill(0, Span<const int32_t>(context.data(), context.size()));
    EXPECT_TRUE(e.ok()) << to_string(e.status()) << ": " << e.message();
    if (!e.ok()) return out;
    for (size_t step = 0; step < count; ++step) {
      const Result<int32_t> id = rt.sample(0);
      EXPECT_TRUE(id.ok()) << id.error().message();
      if (!id.ok()) return out;
      out.push_back(id.value());
      if (step + 1 == count) break;
      e = rt.decode(0, id.value());
      EXPECT_TRUE(e.ok()) << to_string(e.status()) << ": " << e.message();
      if (!e.ok()) return out;
    }
    return out;
  }

  std::string decode_text(const std::vector<int32_t>& ids) const {
    std::string s;
    const text::Tokenizer& tok = engine_->runtime.tokenizer();
    for (const int32_t id : ids) tok.for_each_token_byte(id, [&](uint8_t b) { s.push_back(char(b)); });
    return s;
  }

  static bool tried_;
  static GreedyGolden* golden_;
  std::unique_ptr<test::TestRuntime> engine_;
};
bool GreedyContinuation::tried_ = false;
GreedyGolden* GreedyContinuation::golden_ = nullptr;

size_t first_difference(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  size_t i = 0;
  while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
  return i;
}

TEST_P(GreedyContinuation, TwoHundredTokensFromBosMatchLlamaCpp) {
  const GreedyGolden& g = *golden_;
  EXPECT_EQ(g.text.rfind("Once upon a time, there was a little girl named Lily", 0), 0u) << g.text;
  const std::vector<int32_t> ids = greedy(g.prompt, g.ids.size());
  const size_t same = first_difference(ids, g.ids);
  std::printf("[golden] stories260K greedy, backend %s: %zu / %zu ids match llama.cpp\n", backend_name(GetParam()),
              same, g.ids.size());
  EXPECT_EQ(same, g.ids.size()) << "first difference at " << same << "\nkeel:      " << decode_text(ids)
                                << "\nreference: " << g.text;
  EXPECT_EQ(ids, g.ids);
}

// The same continuation with the first 100 reference ids prefilled in chunks: prefill and
// decode must agree.
TEST_P(GreedyContinuation, PrefilledHalfContinuesIdentically) {
  const GreedyGolden& g = *golden_;
  std::vector<int32_t> context = g.prompt;
  context.insert(context.end(), g.ids.begin(), g.ids.begin() + 100);
  const std::vector<int32_t> ids = greedy(context, g.ids.size() - 100);
  const std::vector<int32_t> want(g.ids.begin() + 100, g.ids.end());
  EXPECT_EQ(first_difference(ids, want), want.size());
  EXPECT_EQ(ids, want);
}

INSTANTIATE_TEST_SUITE_P(Backends, GreedyContinuation,
                         ::testing::Values(BackendKind::Ref, BackendKind::Native, BackendKind::Xnnpack,
                                           BackendKind::Auto),
                         [](const ::testing::TestParamInfo<BackendKind>& info) {
                           return std::string(backend_name(info.param));
                         });

}  // namespace
}  // namespace keel
