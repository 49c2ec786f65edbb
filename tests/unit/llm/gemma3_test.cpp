// Gemma 3 270M (the Q4_K_M GGUF of models/gemma3.recipe, converted with --quant keep) against
// tests/golden/gemma3_reference.json, written by tests/reference/gemma3_reference.py: an
// independent float64 NumPy forward pass over the same GGUF's weights as PyPI `gguf`
// dequantizes them. Checked: the hyper-parameters the converter reads from the gemma3.* keys,
// the tokenizer against llama.cpp's ids for each prompt, the greedy continuation step by step
// (where the reference's top-1 leads by a clear margin) and the logits of the reference's top 5,
// including a prompt longer than the 512-token sliding window so local layers must mask.
//
// Why a tolerance rather than equality: --quant keep stores Gemma's Q8_0, Q4_K, Q5_0 and Q6_K
// tensors losslessly (the reference's weights exactly), but the engine multiplies them by
// activations rounded to 8 bits and keeps the KV cache in f16.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>
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
namespace {

constexpr uint32_t kThreads = 2;
constexpr double kClearMargin = 0.5;  // nats between the reference's top-1 and top-2
constexpr double kMaxDLogit = 0.75;   // over the reference's top 5 (measured below 0.3)

struct FreeDeleter {
  void operator()(uint8_t* p) const { free(p); }
};
using Buffer = std::unique_ptr<uint8_t, FreeDeleter>;

struct Engine {
  port::MappedFile file;
  Model model;
  std::unique_ptr<port::LinuxThreadPool> pool;
  Buffer persistent, scratch;
  Runtime runtime;
};

std::unique_ptr<Engine> make_engine(KvPolicyKind policy, uint32_t budget) {
  const std::string gguf = test::require_file(test::gemma3_gguf());
  if (gguf.empty()) return nullptr;
  static std::string path;
  std::string err;
  if (path.empty()) {
    auto src = convert::read_gguf(gguf, err);
    if (!src) {
      ADD_FAILURE() << err;
      return nullptr;
    }
    convert::WriteOptions opts;
    opts.quant = convert::QuantMode::Keep;
    convert::WriteStats stats;
    const std::string out = test::tmp_path("gemma3_keep.keel");
    if (!convert::write_keel(*src, opts, out, stats, err)) {
      ADD_FAILURE() << err;
      return nullptr;
    }
    path = out;
  }
  auto e = std::make_unique<Engine>();
  if (!e->file.open(path, err)) {
    ADD_FAILURE() << err;
    return nullptr;
  }
  Error st = e->model.load(Span<const uint8_t>(e->file.data(), e->file.size()));
  if (!st.ok()) {
    ADD_FAILURE() << to_string(st.status()) << ": " << st.message();
    return nullptr;
  }
  RunOverrides o;
  o.kv_policy = run_policy(policy);
  o.kv_budget_tokens = budget;
  o.threads = kThreads;
  RuntimeConfig cfg;
  st = make_runtime_config(e->model, o, &cfg);
  if (!st.ok()) {
    ADD_FAILURE() << to_string(st.status()) << ": " << st.message();
    return nullptr;
  }
  if (!port::reserve_backend_bytes(e->model, cfg, err)) {
    ADD_FAILURE() << err;
    return nullptr;
  }
  const MemoryPlan plan = Runtime::plan(e->model, cfg);
  e->persistent.reset(static_cast<uint8_t*>(aligned_alloc(kPlanAlign, plan_align(plan.persistent_bytes))));
  e->scratch.reset(static_cast<uint8_t*>(aligned_alloc(kPlanAlign, plan_align(plan.scratch_bytes))));
  e->pool = std::make_unique<port::LinuxThreadPool>(kThreads);
  st = e->runtime.init(e->model, cfg, Span<uint8_t>(e->persistent.get(), plan.persistent_bytes),
                       Span<uint8_t>(e->scratch.get(), plan.scratch_bytes), e->pool->pool());
  if (!st.ok()) {
    ADD_FAILURE() << to_string(st.status()) << ": " << st.message();
    return nullptr;
  }
  return e;
}

nlohmann::json golden() {
  const std::string path = test::require_file(test::source_path("tests/golden/gemma3_reference.json"));
  if (path.empty()) return nlohmann::json();
  std::ifstream f(path);
  return nlohmann::json::parse(f, nullptr, false);
}

int32_t argmax(Span<const float> logits) {
  int32_t best = 0;
  for (size_t v = 1; v < logits.size(); ++v) {
    if (logits[v] > logits[size_t(best)]) best = int32_t(v);
  }
  return best;
}

TEST(Gemma3, ConverterReadsTheArchitecture) {
  std::unique_ptr<Engine> e = make_engine(KvPolicyKind::Full, 256);
  ASSERT_NE(e, nullptr);
  const fb::Model* m = e->model.meta();
  EXPECT_EQ(m->arch()->family(), fb::ArchFamily::Gemma3);
  EXPECT_TRUE(m->arch()->tied_output());
  const fb::Hyper* h = m->hyper();
  EXPECT_EQ(h->n_layers(), 18u);
  EXPECT_EQ(h->dim(), 640u);
  EXPECT_EQ(h->n_heads(), 4u);
  EXPECT_EQ(h->n_kv_heads(), 1u);
  EXPECT_EQ(h->head_dim(), 256u);
  EXPECT_EQ(h->ffn_dim(), 2048u);
  EXPECT_EQ(h->vocab_size(), 262144u);
  EXPECT_EQ(h->context_length(), 32768u);
  EXPECT_EQ(h->sliding_window(), 512u);
  EXPECT_EQ(h->sliding_window_pattern(), 6u);
  EXPECT_FLOAT_EQ(h->rope_theta(), 1e6f);
  EXPECT_FLOAT_EQ(h->rope_theta_local(), 1e4f);
  EXPECT_FLOAT_EQ(h->query_scale(), 1.0f / 16.0f);
  EXPECT_EQ(h->rope_style(), fb::RopeStyle::Halves);
  EXPECT_FLOAT_EQ(h->norm_eps(), 1e-6f);
  for (fb::TensorRole r : {fb::TensorRole::AttnQNorm, fb::TensorRole::AttnKNorm, fb::TensorRole::PostAttnNorm,
                           fb::TensorRole::PostFfnNorm}) {
    EXPECT_TRUE(e->model.tensor(r, 17).present()) << fb::EnumNameTensorRole(r);
  }
  // --quant keep: every GGUF block type kept as its own format, none re-quantized.
  std::string err;
  const auto src = convert::read_gguf(test::gemma3_gguf(), err);
  ASSERT_TRUE(src.has_value()) << err;
  ASSERT_EQ(m->tensors()->size(), src->tensors.size());
  std::map<std::string, int> kept;
  for (size_t i = 0; i < src->tensors.size(); ++i) {
    const std::string pair = std::string(convert::src_type_name(src->tensors[i].type)) + "->" +
                             fb::EnumNameDType(m->tensors()->Get(uint32_t(i))->dtype());
    kept[pair]++;
  }
  for (const char* pair : {"Q8_0->Q8", "Q5_0->Q5", "Q4_K->Q4K", "Q6_K->Q6K", "F32->F32"})
    EXPECT_GT(kept[pair], 0) << pair;
  size_t n_pairs = 0;
  for (const auto& [pair, n] : kept) n_pairs += n > 0;
  EXPECT_EQ(n_pairs, 5u) << "a GGUF type went to an unexpected format";
}

TEST(Gemma3, PoliciesThatMoveKeysAreRefused) {
  std::unique_ptr<Engine> e = make_engine(KvPolicyKind::Full, 256);
  ASSERT_NE(e, nullptr);
  RunOverrides o;
  o.kv_policy = run_policy(KvPolicyKind::SnapStream);
  RuntimeConfig cfg;
  const Error st = make_runtime_config(e->model, o, &cfg);
  EXPECT_EQ(st.status(), Status::UnsupportedArch);
  EXPECT_NE(std::string(st.message()).find("snapstream"), std::string::npos) << st.message();
}

// Each case: the prompt tokenized as llama.cpp does, then the greedy continuation against the
// reference, step by step, fed back as the engine chose it.
void check_cases(Engine& e, const nlohmann::json& g, const char* label) {
  Runtime& rt = e.runtime;
  size_t clear_steps = 0;
  double worst = 0;
  for (const auto& c : g["cases"]) {
    std::string text = c.value("text", "");
    if (c.contains("essay")) {
      // An excerpt of a shared essay, longer than the sliding window.
      const std::string path =
          test::require_file(test::shared_path("data/paul_graham_essays/" + std::string(c["essay"])));
      ASSERT_FALSE(path.empty());
      const std::vector<uint8_t> bytes = test::read_bytes(path);
      const size_t n_bytes = c["bytes"];
      ASSERT_GE(bytes.size(), n_bytes);
      text.assign(bytes.begin(), bytes.begin() + long(n_bytes));
    }
    const std::vector<int32_t> want_ids = c["prompt_ids"];
    std::vector<int32_t> ids(want_ids.size() + 64);
    size_t n = 0;
    text::EncodeOptions opts;
    opts.add_bos = true;
    ASSERT_TRUE(rt.tokenize(text.data(), text.size(), opts, Span<int32_t>(ids.data(), ids.size()), &n).ok());
    ids.resize(n);
    EXPECT_EQ(ids, want_ids) << "tokenizer differs from llama.cpp on '" << text.substr(0, 60) << "'";
    ASSERT_TRUE(rt.reset(0).ok());
    Error st = rt.prefill(0, Span<const int32_t>(want_ids.data(), want_ids.size()));
    ASSERT_TRUE(st.ok()) << st.message();
    size_t step = 0;
    for (const auto& s : c["steps"]) {
      const Span<const float> logits = rt.logits(0);
      const std::vector<int32_t> top = s["top_ids"];
      const std::vector<double> top_logits = s["top_logits"];
      for (size_t j = 0; j < top.size(); ++j) {
        const double d = std::fabs(double(logits[size_t(top[j])]) - top_logits[j]);
        worst = std::max(worst, d);
        EXPECT_LE(d, kMaxDLogit) << label << " '" << text.substr(0, 40) << "' step " << step << " id " << top[j];
      }
      const int32_t chosen = argmax(logits);
      if (double(s["margin"]) >= kClearMargin) {
        ++clear_steps;
        EXPECT_EQ(chosen, top[0]) << label << " '" << text.substr(0, 40) << "' step " << step << " margin "
                                  << double(s["margin"]);
      }
      if (chosen != top[0]) break;  // the reference continued differently: nothing more to compare
      st = rt.decode(0, chosen);
      ASSERT_TRUE(st.ok()) << st.message();
      ++step;
    }
  }
  std::printf("[gemma3] %s: %zu clear greedy steps, max |dlogit| over the reference's top 5: %.4f\n", label,
              clear_steps, worst);
  EXPECT_GE(clear_steps, 10u);
}

TEST(Gemma3, MatchesTheFloat64Reference) {
  const nlohmann::json g = golden();
  ASSERT_FALSE(g.is_discarded() || g.is_null());
  std::unique_ptr<Engine> e = make_engine(KvPolicyKind::Full, 1024);
  ASSERT_NE(e, nullptr);
  check_cases(*e, g, "full, budget 1024");
}

// The window policy keeps the last `budget` tokens in a ring; with a budget above every case's
// length it must give the same answers, local layers still seeing only 512 of them.
TEST(Gemma3, WindowPolicyMatchesTheReference) {
  const nlohmann::json g = golden();
  ASSERT_FALSE(g.is_discarded() || g.is_null());
  std::unique_ptr<Engine> e = make_engine(KvPolicyKind::Window, 1024);
  ASSERT_NE(e, nullptr);
  check_cases(*e, g, "window, budget 1024");
}

}  // namespace
}  // namespace keel
