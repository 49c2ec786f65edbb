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
#include "support/test_support.h"

namespace keel {

// Test names and failure messages show the backend by name.
static void PrintTo(BackendKind k, std::ostream* os) { *os << backend_name(k); }

namespace {

// One thread: every output element is computed by one thread whatever the count, so the ids do
// not depend on it, and a tiny model gains nothing from a pool.
constexpr uint32_t kThreads = 1;

struct FreeDeleter {
  void operator()(uint8_t* p) const { free(p); }
};
using Buffer = std::unique_ptr<uint8_t, FreeDeleter>;

Buffer aligned_buffer(uint64_t bytes) {
  return Buffer(static_cast<uint8_t*>(aligned_alloc(kPlanAlign, plan_align(bytes ? bytes : 1))));
}

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
struct Converted {
  port::MappedFile file;
  Model model;
};

std::unique_ptr<Converted> convert_stories() {
  const std::string ckpt = test::require_file(test::shared_path("models/stories260K/stories260K.bin"));
  const std::string tok = test::require_file(test::shared_path("models/stories260K/tok512.bin"));
  if (ckpt.empty() || tok.empty()) return nullptr;
  std::string err;
  auto src = convert::read_llama2c(ckpt, tok, err);
  if (!src) {
    ADD_FAILURE() << err;
    return nullptr;
  }
  convert::WriteOptions opts;
  opts.quant = convert::QuantMode::Keep;
  convert::WriteStats stats;
  const std::string path = test::tmp_path("golden_continuation_stories260K.keel");
  if (!convert::write_keel(*src, opts, path, stats, err)) {
    ADD_FAILURE() << err;
    return nullptr;
  }
  auto c = std::make_unique<Converted>();
  if (!c->file.open(path, err)) {
    ADD_FAILURE() << err;
    return nullptr;
  }
  const Error e = c->model.load(Span<const uint8_t>(c->file.data(), c->file.size()));
  if (!e.ok()) {
    ADD_FAILURE() << to_string(e.status()) << ": " << e.message();
    return nullptr;
  }
  return c;
}

struct Engine {
  std::unique_ptr<port::LinuxThreadPool> pool;
  Buffer persistent, scratch;
  Runtime runtime;
};

class GreedyContinuation : public ::testing::TestWithParam<BackendKind> {
 protected:
  // Inputs load on the first test and stay for the others; a missing input fails each test.
  static void load_once() {
    if (tried_) return;
    tried_ = true;
    golden_ = new GreedyGolden();
    if (!load_golden(*golden_)) return;
    converted_ = convert_stories().release();
  }
  static void TearDownTestSuite() {
    delete converted_;
    delete golden_;
    converted_ = nullptr;
    golden_ = nullptr;
    tried_ = false;
  }

  void SetUp() override {
    load_once();
    ASSERT_NE(golden_, nullptr);
    ASSERT_EQ(golden_->ids.size(), 200u) << "golden data did not load";
    ASSERT_EQ(golden_->prompt, std::vector<int32_t>{1});
    ASSERT_NE(converted_, nullptr) << "stories260K did not convert or load";
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
    std::string err;
    ASSERT_TRUE(port::reserve_backend_bytes(converted_->model, cfg, err)) << err;
    const MemoryPlan plan = Runtime::plan(converted_->model, cfg);
    engine_ = std::make_unique<Engine>();
    engine_->persistent = aligned_buffer(plan.persistent_bytes);
    engine_->scratch = aligned_buffer(plan.scratch_bytes);
    if (kThreads > 1) engine_->pool = std::make_unique<port::LinuxThreadPool>(kThreads);
    const Error e = engine_->runtime.init(
        converted_->model, cfg, Span<uint8_t>(engine_->persistent.get(), plan.persistent_bytes),
        Span<uint8_t>(engine_->scratch.get(), plan.scratch_bytes), engine_->pool ? engine_->pool->pool() : nullptr);
    ASSERT_TRUE(e.ok()) << to_string(e.status()) << ": " << e.message();
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
  static Converted* converted_;
  std::unique_ptr<Engine> engine_;
};
bool GreedyContinuation::tried_ = false;
GreedyGolden* GreedyContinuation::golden_ = nullptr;
Converted* GreedyContinuation::converted_ = nullptr;

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
