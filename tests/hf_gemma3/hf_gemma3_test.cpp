// A Hugging Face Gemma 3 270M checkpoint (gemma3_text, float32 safetensors, tokenizer.json),
// which tests/reference/gemma3_hf_fixture.py writes from the Q4_K_M GGUF with transformers' own
// GGUF loader, converted by the Hugging Face reader (--quant f32) against:
//  - the GGUF reader on the same model: the same hyper-parameters, tensors and norm weights
//    (the reader adds back the 1 that Hugging Face's (1 + w) keeps out of the file);
//  - the GGUF-converted .keel's tokenizer: the same ids on every prompt and on whole essays;
//  - transformers' forward over the directory (tests/reference/gemma3_hf_reference.py, run as a
//    CTest fixture before this): its tokenizer's ids, its greedy continuations wherever its
//    top-1 leads clearly, and its top-20 logits within kMaxDLogit.
//
// Why a tolerance: the weights are transformers' float32 weights exactly, but the engine keeps
// the KV cache in f16 and sums in another order.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "convert/source_model.h"
#include "llm/run_config.h"
#include "llm/runtime.h"
#include "model/model.h"
#include "ports/linux/backend_plan.h"
#include "ports/linux/mapped_file.h"
#include "ports/linux/thread_pool.h"
#include "support/runtime_fixture.h"
#include "support/test_support.h"

namespace keel {
namespace {

constexpr uint32_t kThreads = 2;
constexpr double kClearMargin = 0.1;  // nats between transformers' top-1 and top-2
constexpr double kMaxDLogit = 0.05;   // over transformers' top 20 (measured 0.005)
constexpr uint32_t kEssays = 6;       // whole essays whose ids the two conversions must agree on

using Engine = test::TestRuntime;

// The Hugging Face directory as `keel convert DIR --quant f32` writes it, once per process.
const std::string& hf_keel() {
  static std::string path;
  if (!path.empty()) return path;
  const std::string dir = test::require_file(std::string(KEEL_GEMMA3_HF_DIR) + "/config.json");
  if (dir.empty()) return path;
  const std::string out = test::tmp_path("hf_gemma3_f32.keel");
  const test::CommandResult r =
      test::run_cli("convert '" + std::string(KEEL_GEMMA3_HF_DIR) + "' -o '" + out + "' --quant f32 -q");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  if (r.exit_code == 0) path = out;
  return path;
}

// The GGUF as `keel convert GGUF` writes it (--quant keep), once per process.
const std::string& gguf_keel() {
  static std::string path;
  if (!path.empty()) return path;
  const std::string gguf = test::require_file(test::gemma3_gguf());
  if (gguf.empty()) return path;
  const std::string out = test::tmp_path("hf_gemma3_gguf_keep.keel");
  const test::CommandResult r = test::run_cli("convert '" + gguf + "' -o '" + out + "' -q");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  if (r.exit_code == 0) path = out;
  return path;
}

// A converted model run with policy full over `budget` tokens.
std::unique_ptr<Engine> make_engine(const std::string& path, uint32_t budget) {
  if (path.empty()) return nullptr;
  RunOverrides o;
  o.kv_policy = run_policy(KvPolicyKind::Full);
  o.kv_budget_tokens = budget;
  o.threads = kThreads;
  return test::start_runtime(path, o);
}

std::optional<convert::SourceModel> read_hf() {
  const std::string dir = test::require_file(std::string(KEEL_GEMMA3_HF_DIR) + "/config.json");
  if (dir.empty()) return std::nullopt;
  std::string err;
  auto m = convert::read_hf_dir(KEEL_GEMMA3_HF_DIR, err);
  if (!m) ADD_FAILURE() << err;
  return m;
}

nlohmann::json reference() {
  const std::string path = test::require_file(KEEL_GEMMA3_HF_REFERENCE);
  if (path.empty()) return nlohmann::json();
  std::ifstream f(path);
  return nlohmann::json::parse(f, nullptr, false);
}

std::vector<float> f32_values(const convert::SourceTensor& t) {
  std::vector<uint8_t> raw;
  std::string err;
  EXPECT_TRUE(t.read(raw, err)) << t.name << ": " << err;
  uint64_t n = 1;
  for (uint64_t d : t.shape) n *= d;
  std::vector<float> out(n);
  EXPECT_TRUE(convert::dequantize(t.type, raw.data(), raw.size(), out.data(), n)) << t.name;
  return out;
}

std::vector<int32_t> tokenize(Runtime& rt, const std::string& text, bool add_bos, bool parse_special) {
  std::vector<int32_t> ids(text.size() + 8);
  size_t n = 0;
  text::EncodeOptions opts;
  opts.add_bos = add_bos;
  opts.parse_special = parse_special;
  const Error st = rt.tokenize(text.data(), text.size(), opts, Span<int32_t>(ids.data(), ids.size()), &n);
  EXPECT_TRUE(st.ok()) << st.message();
  ids.resize(st.ok() ? n : 0);
  return ids;
}

int32_t argmax(Span<const float> logits) {
  int32_t best = 0;
  for (size_t v = 1; v < logits.size(); ++v)
    if (logits[v] > logits[size_t(best)]) best = int32_t(v);
  return best;
}

TEST(HfGemma3, ReadsWhatTheGgufStates) {
  const auto hf = read_hf();
  const convert::SourceModel* gguf = test::gemma3_source();
  ASSERT_TRUE(hf && gguf);
  const convert::SourceHyper &a = hf->hyper, &b = gguf->hyper;
  EXPECT_EQ(a.family, convert::ArchFamily::Gemma3);
  EXPECT_EQ(a.arch_name, b.arch_name);
  EXPECT_EQ(a.vocab_size, b.vocab_size);
  EXPECT_EQ(a.dim, b.dim);
  EXPECT_EQ(a.n_layers, b.n_layers);
  EXPECT_EQ(a.n_heads, b.n_heads);
  EXPECT_EQ(a.n_kv_heads, b.n_kv_heads);
  EXPECT_EQ(a.head_dim, b.head_dim);
  EXPECT_EQ(a.ffn_dim, b.ffn_dim);
  EXPECT_EQ(a.rope_dim, b.rope_dim);
  EXPECT_EQ(a.context_length, b.context_length);
  EXPECT_EQ(a.rope_theta, b.rope_theta);
  EXPECT_EQ(a.rope_theta_local, b.rope_theta_local);
  EXPECT_EQ(a.rope_style, b.rope_style);
  EXPECT_EQ(a.rope_scaling, b.rope_scaling);
  EXPECT_EQ(a.norm_eps, b.norm_eps);
  EXPECT_EQ(a.query_scale, b.query_scale);
  EXPECT_EQ(a.sliding_window, b.sliding_window);
  EXPECT_EQ(a.sliding_window_pattern, b.sliding_window_pattern);
  EXPECT_EQ(a.tied_output, b.tied_output);
  EXPECT_EQ(a.qkv_bias, b.qkv_bias);

  // Same tensors by name, role, layer and shape; the norms equal the GGUF's (1 + w).
  ASSERT_EQ(hf->tensors.size(), gguf->tensors.size());
  std::map<std::string, const convert::SourceTensor*> by_name;
  for (const auto& t : gguf->tensors) by_name[t.name] = &t;
  size_t norms = 0;
  float worst_norm = 0;
  for (const auto& t : hf->tensors) {
    SCOPED_TRACE(t.name);
    auto it = by_name.find(t.name);
    ASSERT_NE(it, by_name.end());
    const convert::SourceTensor& g = *it->second;
    EXPECT_EQ(t.role, g.role);
    EXPECT_EQ(t.layer, g.layer);
    EXPECT_EQ(t.shape, g.shape);
    if (t.shape.size() != 1) continue;
    ++norms;
    EXPECT_EQ(t.type, convert::SrcType::F32);
    const std::vector<float> x = f32_values(t), y = f32_values(g);
    ASSERT_EQ(x.size(), y.size());
    for (size_t i = 0; i < x.size(); ++i) worst_norm = std::max(worst_norm, std::fabs(x[i] - y[i]));
  }
  EXPECT_EQ(norms, 18u * 6 + 1);
  // transformers stored the GGUF's f32 weight minus 1; adding 1 back rounds once.
  EXPECT_LE(worst_norm, 1e-6f);
}

TEST(HfGemma3, TokenizerIdsEqualTheGgufConversionAndTransformers) {
  const nlohmann::json ref = reference();
  ASSERT_FALSE(ref.is_discarded() || ref.is_null());
  std::unique_ptr<Engine> a = make_engine(hf_keel(), 256);
  std::unique_ptr<Engine> b = make_engine(gguf_keel(), 256);
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->model.meta()->tokenizer()->bos_id(), b->model.meta()->tokenizer()->bos_id());
  EXPECT_EQ(a->model.meta()->tokenizer()->eos_id(), b->model.meta()->tokenizer()->eos_id());
  for (const auto& c : ref["cases"]) {
    const std::string text = c["text"];
    const bool chat = c["parse_special"];
    SCOPED_TRACE(std::string(c["name"]));
    const std::vector<int32_t> want = c["prompt_ids"];
    const std::vector<int32_t> got = tokenize(a->runtime, text, !chat, chat);
    EXPECT_EQ(got, want) << "the HF-converted tokenizer differs from transformers'";
    EXPECT_EQ(tokenize(b->runtime, text, !chat, chat), got) << "the HF and GGUF conversions differ";
  }
  size_t essays = 0, ids = 0;
  for (const auto& entry : std::filesystem::directory_iterator(test::shared_path("data/paul_graham_essays"))) {
    if (essays == kEssays) break;
    const std::vector<uint8_t> bytes = test::read_bytes(entry.path().string());
    const std::string text(bytes.begin(), bytes.end());
    const std::vector<int32_t> x = tokenize(a->runtime, text, true, false);
    EXPECT_EQ(x, tokenize(b->runtime, text, true, false)) << entry.path();
    ids += x.size();
    ++essays;
  }
  EXPECT_EQ(essays, kEssays);
  std::printf("[hf_gemma3] %zu essays, %zu ids: the two conversions agree\n", essays, ids);
}

TEST(HfGemma3, GreedyAndLogitsMatchTransformers) {
  const nlohmann::json ref = reference();
  ASSERT_FALSE(ref.is_discarded() || ref.is_null());
  std::unique_ptr<Engine> e = make_engine(hf_keel(), 1024);
  ASSERT_NE(e, nullptr);
  Runtime& rt = e->runtime;
  size_t clear_steps = 0, same_continuations = 0;
  double worst = 0;
  for (const auto& c : ref["cases"]) {
    const std::string name = c["name"];
    const std::vector<int32_t> ids = c["prompt_ids"];
    ASSERT_TRUE(rt.reset(0).ok());
    Error st = rt.prefill(0, Span<const int32_t>(ids.data(), ids.size()));
    ASSERT_TRUE(st.ok()) << st.message();
    std::vector<int32_t> continuation;
    size_t step = 0;
    for (const auto& s : c["steps"]) {
      const Span<const float> logits = rt.logits(0);
      const std::vector<int32_t> top = s["top_ids"];
      const std::vector<double> top_logits = s["top_logits"];
      for (size_t j = 0; j < top.size(); ++j) {
        const double d = std::fabs(double(logits[size_t(top[j])]) - top_logits[j]);
        worst = std::max(worst, d);
        EXPECT_LE(d, kMaxDLogit) << name << " step " << step << " id " << top[j];
      }
      const int32_t chosen = argmax(logits);
      if (double(s["margin"]) >= kClearMargin) {
        ++clear_steps;
        EXPECT_EQ(chosen, top[0]) << name << " step " << step << " margin " << double(s["margin"]);
      }
      continuation.push_back(chosen);
      if (chosen != top[0]) break;  // transformers continued differently: nothing more to compare
      st = rt.decode(0, chosen);
      ASSERT_TRUE(st.ok()) << st.message();
      ++step;
    }
    if (continuation == c["continuation"].get<std::vector<int32_t>>()) ++same_continuations;
  }
  std::printf(
      "[hf_gemma3] %zu of %zu greedy continuations identical to transformers', %zu clear steps, max |dlogit| over "
      "its top %d: %.5f\n",
      same_continuations, ref["cases"].size(), clear_steps, int(ref["top"]), worst);
  EXPECT_GE(clear_steps, 20u);
  EXPECT_EQ(same_continuations, ref["cases"].size());
}

}  // namespace
}  // namespace keel
