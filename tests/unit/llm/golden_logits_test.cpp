// SmolLM2-135M-Instruct (Q4_1, converted with --quant keep) against llama.cpp's next-token
// distributions over a whole essay (tests/golden/smollm2_logits.*, written by
// tests/reference/smollm2_logits.py): top-1 agreement, logit error over the reference's top-k,
// an approximate KL divergence and the perplexity; and the engine's tokenizer against the ids
// the reference was given.
//
// Why top-1 agreement is asserted at 99% only where the reference is decided: llama.cpp and the
// engine both multiply Q4_1 weights by activations rounded to 8 bits, each in its own way, so
// near-ties flip. On this essay llama.cpp agrees with an exact float64 evaluation of the same
// weights on 96.8% of positions (smollm2_logits.json, "llama_cpp_vs_float64") and the engine
// did on 96.5% when the golden was made; every such disagreement had the float64 top-1 ahead of
// its top-2 by less than 0.33 nats. Small margins flip by rounding; at 0.25 nats or more
// (about 80% of positions) the two implementations should agree.
//
// Approximate KL: both distributions are coarsened to the reference's top-k ids plus one tail
// bucket holding the rest of the probability mass, KL(ref || keel) over those k + 1 outcomes.
// Coarsening can only lower a KL divergence, so this is a lower bound of the full one.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
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
namespace {

constexpr uint32_t kThreads = 2;
constexpr uint32_t kLogitRows = 16;
constexpr double kDecidedMargin = 0.25;        // nats between the reference's top-1 and top-2
constexpr double kMinDecidedAgreement = 0.99;  // over positions with at least that margin
constexpr size_t kMinDecidedPositions = 2000;
constexpr double kMinTop1Agreement = 0.95;  // over all positions (measured 0.96)
constexpr double kMaxMeanKl = 5e-3;         // approximate KL, mean (measured 2.2e-3)
constexpr double kMaxPplRelError = 0.01;

struct Golden {
  nlohmann::json meta;
  std::vector<int32_t> ids;
  uint32_t k = 0, vocab = 0;
  std::vector<int32_t> top_ids;  // [n][k]
  std::vector<float> top_lp;     // [n][k]
  std::vector<float> next_lp;    // [n]
  std::vector<float> lse;        // [n]
  std::string text;              // the essay
};

template <typename T>
T load_le(const uint8_t* p) {
  T v;
  memcpy(&v, p, sizeof v);
  return v;
}

// Fails the test (and returns false) when an input is missing or malformed.
bool load_golden(Golden& g) {
  const std::string json_path = test::require_file(test::source_path("tests/golden/smollm2_logits.json"));
  const std::string bin_path = test::require_file(test::source_path("tests/golden/smollm2_logits.bin"));
  if (json_path.empty() || bin_path.empty()) return false;
  std::ifstream jf(json_path);
  g.meta = nlohmann::json::parse(jf, nullptr, false);
  if (g.meta.is_discarded()) {
    ADD_FAILURE() << json_path << " is not JSON";
    return false;
  }
  const std::vector<uint8_t> bin = test::read_bytes(bin_path);
  if (bin.size() < 24 || memcmp(bin.data(), "KEELLGT1", 8) != 0) {
    ADD_FAILURE() << bin_path << ": expected magic KEELLGT1 and a 24-byte header";
    return false;
  }
  const uint32_t n = load_le<uint32_t>(&bin[8]);
  g.k = load_le<uint32_t>(&bin[12]);
  g.vocab = load_le<uint32_t>(&bin[16]);
  const uint32_t record = load_le<uint32_t>(&bin[20]);
  if (record != 8 * g.k + 8 || bin.size() != 24 + uint64_t(n) * 4 + uint64_t(n) * record) {
    ADD_FAILURE() << bin_path << ": " << bin.size() << " bytes do not match n " << n << ", k " << g.k;
    return false;
  }
  const uint8_t* p = bin.data() + 24;
  g.ids.resize(n);
  for (uint32_t i = 0; i < n; ++i) g.ids[i] = load_le<int32_t>(p + 4 * i);
  p += 4 * uint64_t(n);
  g.top_ids.resize(uint64_t(n) * g.k);
  g.top_lp.resize(uint64_t(n) * g.k);
  g.next_lp.resize(n);
  g.lse.resize(n);
  for (uint32_t i = 0; i < n; ++i, p += record) {
    for (uint32_t j = 0; j < g.k; ++j) {
      g.top_ids[uint64_t(i) * g.k + j] = load_le<int32_t>(p + 4 * j);
      g.top_lp[uint64_t(i) * g.k + j] = load_le<float>(p + 4 * (g.k + j));
    }
    g.next_lp[i] = load_le<float>(p + 8 * g.k);
    g.lse[i] = load_le<float>(p + 8 * g.k + 4);
  }
  const std::string essay = g.meta.value("essay", "");
  const std::string essay_path = test::require_file(test::shared_path("data/paul_graham_essays/" + essay));
  if (essay.empty() || essay_path.empty()) return false;
  const std::vector<uint8_t> text = test::read_bytes(essay_path);
  g.text.assign(text.begin(), text.end());
  return true;
}

// The converted model with an initialized runtime, shared by the tests of this file.
using Engine = test::TestRuntime;

std::unique_ptr<Engine> make_engine(uint32_t kv_budget) {
  const convert::SourceModel* src = test::smollm2_source();
  if (!src) return nullptr;
  RuntimeConfig cfg;
  cfg.backend = BackendKind::Auto;
  cfg.plan.kv_budget_tokens = kv_budget;
  cfg.plan.chunk_tokens = 64;
  cfg.plan.threads = kThreads;
  cfg.plan.logit_rows = kLogitRows;
  return test::start_runtime(test::convert_and_load(*src, convert::QuantMode::Keep, "golden_logits_smollm2_keep.keel"),
                             cfg);
}

class GoldenLogits : public ::testing::Test {
 protected:
  // Inputs load on the first test and stay for the others; a missing input fails each test.
  static void load_once() {
    if (tried_) return;
    tried_ = true;
    golden_ = new Golden();
    if (!load_golden(*golden_)) return;
    // Budget: the whole essay in the cache (full causal context, as the reference had).
    engine_ = make_engine(uint32_t(golden_->ids.size() + 64)).release();
  }
  static void TearDownTestSuite() {
    delete engine_;
    delete golden_;
    engine_ = nullptr;
    golden_ = nullptr;
    tried_ = false;
  }
  void SetUp() override {
    load_once();
    ASSERT_NE(golden_, nullptr);
    ASSERT_FALSE(golden_->ids.empty()) << "golden data did not load";
    ASSERT_NE(engine_, nullptr) << "model did not convert, load or initialize";
  }
  static bool tried_;
  static Golden* golden_;
  static Engine* engine_;
};
bool GoldenLogits::tried_ = false;
Golden* GoldenLogits::golden_ = nullptr;
Engine* GoldenLogits::engine_ = nullptr;

struct Comparison {
  const Golden* g = nullptr;
  uint32_t vocab = 0;
  size_t positions = 0;
  size_t top1_agree = 0;
  size_t first_disagreement = SIZE_MAX;
  double max_margin_disagreeing = 0;      // largest reference top-1/top-2 margin where top-1 differs
  size_t decided = 0, decided_agree = 0;  // positions with a margin of at least kDecidedMargin
  double max_dlogit = 0;                  // over the reference's top-k, raw logits
  size_t max_dlogit_at = 0;
  double kl_sum = 0, kl_max = 0;
  size_t kl_max_at = 0;
  double nll_sum = 0;      // keel, tokens 1..n-1
  double ref_nll_sum = 0;  // reference, same tokens
  size_t nll_terms = 0;
  double max_dnll = 0;
  bool finite = true;
};

void compare_row(void* ctx, size_t i, const float* logits) {
  Comparison& c = *static_cast<Comparison*>(ctx);
  const Golden& g = *c.g;
  if (i >= g.ids.size()) return;
  double mx = -INFINITY;
  int32_t arg = -1;
  for (uint32_t v = 0; v < c.vocab; ++v) {
    if (!std::isfinite(logits[v])) c.finite = false;
    if (logits[v] > mx) {
      mx = logits[v];
      arg = int32_t(v);
    }
  }
  double sum = 0;
  for (uint32_t v = 0; v < c.vocab; ++v) sum += std::exp(double(logits[v]) - mx);
  const double lse = mx + std::log(sum);

  const int32_t* ref_ids = &g.top_ids[i * g.k];
  const float* ref_lp = &g.top_lp[i * g.k];
  c.positions += 1;
  const double margin = g.k > 1 ? double(ref_lp[0]) - double(ref_lp[1]) : INFINITY;
  if (margin >= kDecidedMargin) {
    c.decided += 1;
    if (arg == ref_ids[0]) c.decided_agree += 1;
  }
  if (arg == ref_ids[0]) {
    c.top1_agree += 1;
  } else {
    if (c.first_disagreement == SIZE_MAX) c.first_disagreement = i;
    c.max_margin_disagreeing = std::max(c.max_margin_disagreeing, margin);
  }
  double p_ref_top = 0, p_keel_top = 0, kl = 0;
  for (uint32_t j = 0; j < g.k; ++j) {
    const double keel_logit = logits[ref_ids[j]];
    const double ref_logit = double(ref_lp[j]) + double(g.lse[i]);
    const double d = std::fabs(keel_logit - ref_logit);
    if (d > c.max_dlogit) {
      c.max_dlogit = d;
      c.max_dlogit_at = i;
    }
    const double keel_lp = keel_logit - lse;
    const double p = std::exp(double(ref_lp[j]));
    p_ref_top += p;
    p_keel_top += std::exp(keel_lp);
    kl += p * (double(ref_lp[j]) - keel_lp);
  }
  const double tail_ref = std::max(0.0, 1.0 - p_ref_top);
  const double tail_keel = std::max(1e-30, 1.0 - p_keel_top);
  if (tail_ref > 0) kl += tail_ref * std::log(tail_ref / tail_keel);
  c.kl_sum += kl;
  if (kl > c.kl_max) {
    c.kl_max = kl;
    c.kl_max_at = i;
  }
  if (i + 1 < g.ids.size()) {
    const double nll = -(double(logits[g.ids[i + 1]]) - lse);
    c.nll_sum += nll;
    c.ref_nll_sum += -double(g.next_lp[i]);
    ++c.nll_terms;
    c.max_dnll = std::max(c.max_dnll, std::fabs(nll + double(g.next_lp[i])));
  }
}

// KEEL_GOLDEN_POSITIONS=N scores the essay's first N tokens only (256 <= N), for runs under an
// emulator, where the whole essay takes over ten minutes: the same bounds, the position counts
// scaled to N, the perplexity compared with the reference's over the same tokens.
size_t golden_positions(size_t all) {
  const char* v = std::getenv("KEEL_GOLDEN_POSITIONS");
  if (v == nullptr || *v == 0) return all;
  const size_t n = std::strtoull(v, nullptr, 10);
  EXPECT_GE(n, 256u) << "KEEL_GOLDEN_POSITIONS=" << v << ": expected at least 256";
  return std::min(std::max<size_t>(n, 256), all);
}

TEST_F(GoldenLogits, MatchesLlamaCppOverTheEssay) {
  const Golden& g = *golden_;
  Runtime& rt = engine_->runtime;
  ASSERT_EQ(g.vocab, rt.model().shape().vocab_size);
  ASSERT_GE(g.ids.size(), 2048u);
  ASSERT_TRUE(rt.reset(0).ok());
  Comparison c;
  c.g = &g;
  c.vocab = g.vocab;
  const size_t n = golden_positions(g.ids.size());
  const bool whole = n == g.ids.size();
  const Error e = rt.score(0, Span<const int32_t>(g.ids.data(), n), compare_row, &c);
  ASSERT_TRUE(e.ok()) << to_string(e.status()) << ": " << e.message();
  ASSERT_EQ(c.positions, n);
  EXPECT_TRUE(c.finite) << "non-finite logits";

  const double agreement = double(c.top1_agree) / double(c.positions);
  ASSERT_GT(c.nll_terms, 0u);
  const double ppl = std::exp(c.nll_sum / double(c.nll_terms));
  const double ref_ppl_recomputed = std::exp(c.ref_nll_sum / double(c.nll_terms));
  // The essay's perplexity from the JSON, or over a prefix the reference's own per-token values.
  const double ref_ppl = whole ? g.meta.value("ref_ppl", 0.0) : ref_ppl_recomputed;
  const double kl_mean = c.kl_sum / double(c.positions);
  std::printf("[golden] SmolLM2-135M-Instruct Q4_1 on %s, %zu tokens, backend %s, %u threads\n",
              g.meta.value("essay", "?").c_str(), n, backend_name(rt.backend().kind()), kThreads);
  std::printf("[golden] top-1 agreement %.4f (%zu / %zu), first disagreement at %lld\n", agreement, c.top1_agree,
              c.positions, c.first_disagreement == SIZE_MAX ? -1LL : (long long)c.first_disagreement);
  std::printf(
      "[golden] top-1 agreement where the reference's top-1 leads by >= %.2f nats: %.4f (%zu / %zu); "
      "largest reference margin at a disagreement %.4f\n",
      kDecidedMargin, c.decided ? double(c.decided_agree) / double(c.decided) : 0.0, c.decided_agree, c.decided,
      c.max_margin_disagreeing);
  std::printf("[golden] max |dlogit| over reference top-%u: %.4f (position %zu)\n", g.k, c.max_dlogit, c.max_dlogit_at);
  std::printf("[golden] approx KL(ref||keel) over top-%u + tail: mean %.3e, max %.3e (position %zu)\n", g.k, kl_mean,
              c.kl_max, c.kl_max_at);
  std::printf("[golden] max |dNLL| of the next token: %.4f\n", c.max_dnll);
  if (g.meta.contains("llama_cpp_vs_float64") && g.meta["llama_cpp_vs_float64"].is_object()) {
    const nlohmann::json& f = g.meta["llama_cpp_vs_float64"];
    std::printf("[golden] for scale, llama.cpp vs exact float64: top-1 agreement %.4f, float64 perplexity %.4f\n",
                f.value("top1_agreement", 0.0), f.value("float64_ppl", 0.0));
  }
  std::printf("[golden] perplexity keel %.4f, reference %.4f (relative difference %+.4f%%)\n", ppl, ref_ppl,
              100.0 * (ppl - ref_ppl) / ref_ppl);

  EXPECT_NEAR(ref_ppl_recomputed, ref_ppl, 1e-3 * ref_ppl) << "golden binary and JSON disagree";
  EXPECT_GE(c.positions, whole ? 2000u : n);
  EXPECT_GE(c.decided, kMinDecidedPositions * n / g.ids.size());
  EXPECT_GE(c.decided ? double(c.decided_agree) / double(c.decided) : 0.0, kMinDecidedAgreement);
  EXPECT_GE(agreement, kMinTop1Agreement);
  EXPECT_LE(kl_mean, kMaxMeanKl);
  ASSERT_GT(ref_ppl, 0.0);
  EXPECT_LE(std::fabs(ppl - ref_ppl) / ref_ppl, kMaxPplRelError) << "keel " << ppl << " vs reference " << ref_ppl;
}

TEST_F(GoldenLogits, TokenizerGivesTheReferenceIds) {
  const Golden& g = *golden_;
  text::EncodeOptions opts;
  opts.add_bos = false;
  opts.parse_special = false;
  std::vector<int32_t> ids(g.ids.size() + 256);
  size_t n = 0;
  const Error e =
      engine_->runtime.tokenize(g.text.data(), g.text.size(), opts, Span<int32_t>(ids.data(), ids.size()), &n);
  ASSERT_TRUE(e.ok()) << to_string(e.status()) << ": " << e.message();
  ids.resize(std::min(n, ids.size()));
  EXPECT_EQ(n, g.ids.size());
  size_t first = 0;
  while (first < ids.size() && first < g.ids.size() && ids[first] == g.ids[first]) ++first;
  EXPECT_EQ(first, std::min(ids.size(), g.ids.size()))
      << "first difference at token " << first << ": keel " << (first < ids.size() ? ids[first] : -1) << ", reference "
      << (first < g.ids.size() ? g.ids[first] : -1);
}

}  // namespace
}  // namespace keel
