// The public APIs end to end on stories260K: the C API inside one caller block, and the C++
// Engine<> whose arenas are sized at compile time; both continue from BOS exactly as the
// golden (llama.cpp) continuation does.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <type_traits>
#include <vector>

#include "keel.h"
#include "keel.hpp"
#include "ports/linux/mapped_file.h"
#include "support/runtime_fixture.h"
#include "support/test_support.h"

namespace {

struct StoriesShape {
  static constexpr uint32_t vocab_size = 512;
  static constexpr uint32_t dim = 64;
  static constexpr uint32_t n_layers = 5;
  static constexpr uint32_t n_heads = 8;
  static constexpr uint32_t n_kv_heads = 4;
  static constexpr uint32_t head_dim = 8;
  static constexpr uint32_t ffn_dim = 172;
  static constexpr uint32_t context_length = 512;
  static constexpr uint32_t tokenizer_bytes = 5140;  // pinned by the tokenizer tests
};

// The bytes the APIs load themselves: stories260K converted with --quant keep.
const keel::port::MappedFile& stories_file() { return keel::test::stories260k(keel::convert::QuantMode::Keep).file; }

std::vector<int32_t> golden_ids(size_t n) {
  std::ifstream f(keel::test::require_file(keel::test::source_path("tests/golden/stories260K_greedy.json")));
  const nlohmann::json j = nlohmann::json::parse(f, nullptr, false);
  std::vector<int32_t> ids;
  if (j.is_discarded()) return ids;
  for (const auto& v : j["ids"]) {
    if (ids.size() == n) break;
    ids.push_back(v.get<int32_t>());
  }
  return ids;
}

TEST(CApi, GreedyContinuationInOneCallerBlock) {
  const keel::port::MappedFile& file = stories_file();
  ASSERT_NE(file.data(), nullptr);
  keel_config cfg{};
  cfg.kv_budget_tokens = 256;
  cfg.backend = KEEL_BACKEND_NATIVE;
  keel_plan_info plan{};
  ASSERT_EQ(keel_plan(file.data(), file.size(), &cfg, &plan), KEEL_OK);
  EXPECT_GT(plan.total_bytes, plan.persistent_bytes + plan.scratch_bytes);
  // Too small a block: a clean refusal naming the numbers.
  std::vector<uint8_t> small(plan.total_bytes / 2);
  keel_engine* e = nullptr;
  char msg[300];
  EXPECT_EQ(keel_init(small.data(), small.size(), file.data(), file.size(), &cfg, &e, msg, sizeof msg),
            KEEL_ERR_OUT_OF_MEMORY);
  EXPECT_EQ(e, nullptr);
  EXPECT_NE(std::string(msg).find("the plan needs"), std::string::npos) << msg;
  // Exactly the planned block, deliberately misaligned by one byte.
  std::vector<uint8_t> block(plan.total_bytes + 1);
  ASSERT_EQ(keel_init(block.data() + 1, plan.total_bytes, file.data(), file.size(), &cfg, &e, msg, sizeof msg), KEEL_OK)
      << msg;
  const int32_t bos = 1;
  ASSERT_EQ(keel_prefill(e, 0, &bos, 1), KEEL_OK);
  const std::vector<int32_t> want = golden_ids(100);
  ASSERT_EQ(want.size(), 100u);
  std::vector<int32_t> got;
  for (size_t i = 0; i < want.size(); ++i) {
    int32_t t = -1;
    ASSERT_EQ(keel_sample(e, 0, &t), KEEL_OK) << keel_last_error(e);
    got.push_back(t);
    ASSERT_EQ(keel_decode(e, 0, t), KEEL_OK) << keel_last_error(e);
  }
  EXPECT_EQ(got, want);
  // Errors leave the engine usable.
  EXPECT_EQ(keel_decode(e, 0, 99999), KEEL_ERR_BAD_ARGUMENT);
  EXPECT_NE(std::string(keel_last_error(e)).find("token id 99999"), std::string::npos);
  EXPECT_EQ(keel_prefill(e, 7, &bos, 1), KEEL_ERR_BAD_ARGUMENT);
  size_t n = 0;
  int32_t ids[16];
  ASSERT_EQ(keel_tokenize(e, "Once upon a time", 16, 1, 0, ids, 16, &n), KEEL_OK);
  EXPECT_EQ(ids[0], 1);
  char bytes[32];
  ASSERT_EQ(keel_token_bytes(e, ids[1], bytes, sizeof bytes, &n), KEEL_OK);
  keel_stats st{};
  ASSERT_EQ(keel_get_stats(e, &st), KEEL_OK);
  EXPECT_EQ(st.persistent_used_bytes, st.persistent_planned_bytes);
  EXPECT_EQ(st.tokens_decoded, 100u);
}

// The KV policy through the C API: a prompt three times the budget runs under every bounded
// policy in the planned block, `full` refuses it and stays usable, and a zeroed config takes
// the model's default policy (snapstream for converted models).
TEST(CApi, KvPoliciesBoundAPromptLongerThanTheBudget) {
  const keel::port::MappedFile& file = stories_file();
  ASSERT_NE(file.data(), nullptr);
  std::vector<int32_t> prompt(1, 1);
  for (int i = 0; prompt.size() < 400; ++i) prompt.push_back(int32_t(3 + (i * 37 + i / 7) % 500));
  auto run = [&](uint32_t policy, std::vector<int32_t>& out, uint32_t positions = 0) -> keel_status {
    keel_config cfg{};
    cfg.kv_budget_tokens = 128;
    cfg.chunk_tokens = 32;
    cfg.kv_policy = policy;
    cfg.kv_positions = positions;
    keel_plan_info plan{};
    keel_status st = keel_plan(file.data(), file.size(), &cfg, &plan);
    if (st != KEEL_OK) return st;
    std::vector<uint8_t> block(plan.total_bytes);
    keel_engine* e = nullptr;
    char msg[300] = "";
    st = keel_init(block.data(), block.size(), file.data(), file.size(), &cfg, &e, msg, sizeof msg);
    EXPECT_EQ(st, KEEL_OK) << msg;
    if (st != KEEL_OK) return st;
    st = keel_prefill(e, 0, prompt.data(), prompt.size());
    if (st != KEEL_OK) {
      EXPECT_NE(std::string(keel_last_error(e)).find("exceeds the KV budget of 128"), std::string::npos)
          << keel_last_error(e);
      // Still usable: a prompt inside the budget runs.
      EXPECT_EQ(keel_prefill(e, 0, prompt.data(), 100), KEEL_OK) << keel_last_error(e);
      return st;
    }
    for (int i = 0; i < 30; ++i) {
      int32_t t = -1;
      EXPECT_EQ(keel_sample(e, 0, &t), KEEL_OK) << keel_last_error(e);
      out.push_back(t);
      EXPECT_EQ(keel_decode(e, 0, t), KEEL_OK) << keel_last_error(e);
    }
    keel_stats stats{};
    EXPECT_EQ(keel_get_stats(e, &stats), KEEL_OK);
    EXPECT_LE(stats.persistent_used_bytes, stats.persistent_planned_bytes);
    EXPECT_LE(stats.scratch_used_bytes, stats.scratch_planned_bytes);
    return KEEL_OK;
  };
  std::vector<int32_t> got[6];
  EXPECT_EQ(run(KEEL_KV_FULL, got[KEEL_KV_FULL]), KEEL_ERR_OUT_OF_MEMORY);
  for (keel_kv_policy p :
       {KEEL_KV_WINDOW, KEEL_KV_STREAMING, KEEL_KV_SNAPKV, KEEL_KV_SNAPSTREAM, KEEL_KV_MODEL_DEFAULT}) {
    EXPECT_EQ(run(p, got[p]), KEEL_OK) << "policy " << int(p);
    EXPECT_EQ(got[p].size(), 30u) << "policy " << int(p);
  }
  EXPECT_EQ(got[KEEL_KV_MODEL_DEFAULT], got[KEEL_KV_SNAPSTREAM]);
  EXPECT_NE(got[KEEL_KV_WINDOW], got[KEEL_KV_SNAPSTREAM]);
  // The prefix at its positions in the text: the same cache, other rotations, another text.
  std::vector<int32_t> cache, original;
  EXPECT_EQ(run(KEEL_KV_SNAPSTREAM, cache, KEEL_KV_POSITIONS_CACHE), KEEL_OK);
  EXPECT_EQ(run(KEEL_KV_SNAPSTREAM, original, KEEL_KV_POSITIONS_ORIGINAL), KEEL_OK);
  EXPECT_EQ(cache, got[KEEL_KV_SNAPSTREAM]);
  EXPECT_NE(original, got[KEEL_KV_SNAPSTREAM]);

  // Options the engine cannot honour are refused by keel_plan and by keel_init, with the reason.
  keel_config bad{};
  bad.kv_policy = 9;
  keel_plan_info plan{};
  EXPECT_EQ(keel_plan(file.data(), file.size(), &bad, &plan), KEEL_ERR_BAD_ARGUMENT);
  std::vector<uint8_t> block(1 << 22);
  keel_engine* e = nullptr;
  char msg[300] = "";
  EXPECT_EQ(keel_init(block.data(), block.size(), file.data(), file.size(), &bad, &e, msg, sizeof msg),
            KEEL_ERR_BAD_ARGUMENT);
  EXPECT_NE(std::string(msg).find("kv_policy 9"), std::string::npos) << msg;
  keel_config tiny{};
  tiny.kv_policy = KEEL_KV_SNAPSTREAM;
  tiny.kv_budget_tokens = 16;
  EXPECT_EQ(keel_plan(file.data(), file.size(), &tiny, &plan), KEEL_ERR_BAD_ARGUMENT);
  EXPECT_EQ(keel_init(block.data(), block.size(), file.data(), file.size(), &tiny, &e, msg, sizeof msg),
            KEEL_ERR_BAD_ARGUMENT);
  EXPECT_NE(std::string(msg).find("budget"), std::string::npos) << msg;
  keel_config backend{};
  const std::underlying_type_t<keel_backend> seven = 7;  // what a C caller can store in the enum field
  memcpy(&backend.backend, &seven, sizeof seven);
  EXPECT_EQ(keel_plan(file.data(), file.size(), &backend, &plan), KEEL_ERR_BAD_ARGUMENT);
  keel_config kernel{};
  kernel.snap_kernel = -3;
  EXPECT_EQ(keel_plan(file.data(), file.size(), &kernel, &plan), KEEL_ERR_BAD_ARGUMENT);
  keel_config positions{};
  positions.kv_positions = 3;
  EXPECT_EQ(keel_init(block.data(), block.size(), file.data(), file.size(), &positions, &e, msg, sizeof msg),
            KEEL_ERR_BAD_ARGUMENT);
  EXPECT_NE(std::string(msg).find("kv_positions 3"), std::string::npos) << msg;
  keel_config select{};
  select.rocket_select = 3;
  EXPECT_EQ(keel_plan(file.data(), file.size(), &select, &plan), KEEL_ERR_BAD_ARGUMENT);
}

// Static storage, as firmware declares it: the arenas are members sized by constexpr plans.
keel::Engine<StoriesShape, 256> g_engine;
struct WiderShape : StoriesShape {
  static constexpr uint32_t dim = 128;
};
keel::Engine<WiderShape, 64> g_wrong_engine;
static_assert(keel::Engine<StoriesShape, 256>::kPersistentBytes > 0);
static_assert(sizeof(keel::Engine<StoriesShape, 256>) >=
              keel::Engine<StoriesShape, 256>::kPersistentBytes + keel::Engine<StoriesShape, 256>::kScratchBytes);

TEST(CppApi, CompileTimeEngineRunsTheModel) {
  const keel::port::MappedFile& file = stories_file();
  ASSERT_NE(file.data(), nullptr);
  const keel::Error e = g_engine.init(file.data(), file.size(), keel::BackendKind::Native);
  ASSERT_TRUE(e.ok()) << e.message();
  keel::Runtime& rt = g_engine.runtime();
  const int32_t bos = 1;
  ASSERT_TRUE(rt.prefill(0, keel::Span<const int32_t>(&bos, 1)).ok());
  const std::vector<int32_t> want = golden_ids(50);
  std::vector<int32_t> got;
  for (size_t i = 0; i < want.size(); ++i) {
    const keel::Result<int32_t> t = rt.sample(0);
    ASSERT_TRUE(t.ok());
    got.push_back(t.value());
    ASSERT_TRUE(rt.decode(0, t.value()).ok());
  }
  EXPECT_EQ(got, want);
  EXPECT_EQ(rt.stats().persistent_used_bytes, (keel::Engine<StoriesShape, 256>::kPersistentBytes));
  // A model of another shape than the one compiled in is refused, naming the shape.
  const keel::Error wrong = g_wrong_engine.init(file.data(), file.size());
  EXPECT_EQ(wrong.status(), keel::Status::ModelShapeMismatch);
  EXPECT_NE(std::string(wrong.message()).find("compiled-in shape"), std::string::npos) << wrong.message();
}

}  // namespace
