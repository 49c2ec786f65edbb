// keel::generate and keel_generate on stories260K: the same tokens as a hand-written
// prefill/sample/decode loop, every stop (end token, max tokens, callback, the budget of a full
// cache), and a stream of UTF-8-complete pieces that concatenate to the decoded text.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "keel.h"
#include "keel.hpp"
#include "llm/generate.h"
#include "ports/linux/mapped_file.h"
#include "support/runtime_fixture.h"
#include "support/test_support.h"
#include "text/stream_decoder.h"

namespace keel {
namespace {

struct StoriesShape {
  static constexpr uint32_t vocab_size = 512, dim = 64, n_layers = 5, n_heads = 8, n_kv_heads = 4, head_dim = 8,
                            ffn_dim = 172, context_length = 512, tokenizer_bytes = 5140;
};
constexpr uint32_t kBudget = 256;
using StoriesEngine = Engine<StoriesShape, kBudget, 1, 16, KvPolicyKind::Full>;
StoriesEngine g_engine;  // static storage: the arenas are members

// The bytes the engine loads itself: stories260K converted with --quant keep.
const port::MappedFile& stories() { return test::stories260k(convert::QuantMode::Keep).file; }

Runtime& fresh_runtime() {
  static const bool init = [] {
    const Error e = g_engine.init(stories().data(), stories().size(), BackendKind::Native);
    EXPECT_TRUE(e.ok()) << e.message();
    return e.ok();
  }();
  EXPECT_TRUE(init);
  Runtime& rt = g_engine.runtime();
  EXPECT_TRUE(rt.reset(0).ok());
  EXPECT_TRUE(rt.set_sampler(0, text::SamplerConfig{}).ok());
  return rt;
}

std::vector<int32_t> prompt_ids(Runtime& rt, const char* text = "Once upon a time") {
  int32_t ids[64];
  size_t n = 0;
  text::EncodeOptions eo;
  eo.add_bos = true;
  EXPECT_TRUE(rt.tokenize(text, strlen(text), eo, Span<int32_t>(ids, 64), &n).ok());
  return std::vector<int32_t>(ids, ids + n);
}

// What every application wrote by hand before generate(): prefill, then sample and decode.
std::vector<int32_t> hand_loop(Runtime& rt, const std::vector<int32_t>& prompt, uint32_t n) {
  std::vector<int32_t> out;
  EXPECT_TRUE(rt.prefill(0, Span<const int32_t>(prompt.data(), prompt.size())).ok());
  for (uint32_t i = 0; i < n; ++i) {
    const Result<int32_t> t = rt.sample(0);
    EXPECT_TRUE(t.ok());
    if (t.value() == rt.tokenizer().eos_id()) break;
    out.push_back(t.value());
    if (i + 1 < n) {
      EXPECT_TRUE(rt.decode(0, t.value()).ok());
    }
  }
  return out;
}

struct Collected {
  std::vector<int32_t> ids;
  std::vector<std::string> pieces;
  std::string text;
  int stop_after = -1;  // return false once this many tokens arrived
};

bool collect(void* ctx, int32_t token, const char* text, size_t len) {
  Collected* c = static_cast<Collected*>(ctx);
  if (token >= 0) c->ids.push_back(token);
  c->pieces.emplace_back(text, len);
  c->text.append(text, len);
  return c->stop_after < 0 || int(c->ids.size()) < c->stop_after;
}

std::string decoded(const Runtime& rt, const std::vector<int32_t>& ids) {
  std::vector<char> buf(ids.size() * 64 + 64);
  size_t n = 0;
  EXPECT_TRUE(
      text::decode(rt.tokenizer(), Span<const int32_t>(ids.data(), ids.size()), Span<char>(buf.data(), buf.size()), &n)
          .ok());
  return std::string(buf.data(), n);
}

// Well-formed UTF-8 (what the callback promises for every piece).
bool valid_utf8(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = s[i];
    size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k) {
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    }
    i += n;
  }
  return true;
}

double fake_clock() {
  static double t = 0;
  return t += 0.5;
}

TEST(Generate, GreedyEqualsTheHandWrittenLoop) {
  Runtime& rt = fresh_runtime();
  const std::vector<int32_t> prompt = prompt_ids(rt);
  const std::vector<int32_t> want = hand_loop(rt, prompt, 100);
  ASSERT_EQ(want.size(), 100u) << "the greedy story has no EOS in its first 100 tokens";
  const uint64_t after_hand = rt.sequence_length(0);
  const std::vector<float> hand_logits(rt.logits(0).begin(), rt.logits(0).end());

  fresh_runtime();
  GenerateOptions o;
  o.max_tokens = 100;
  o.now = &fake_clock;
  Collected c;
  GenerateResult r;
  const Error e = generate(rt, 0, Span<const int32_t>(prompt.data(), prompt.size()), o, &collect, &c, &r);
  ASSERT_TRUE(e.ok()) << e.message();
  EXPECT_EQ(c.ids, want);
  EXPECT_EQ(c.text, decoded(rt, want));
  EXPECT_EQ(r.tokens_generated, 100u);
  EXPECT_EQ(r.tokens_decoded, 99u) << "the last token is not fed back without feed_last";
  EXPECT_EQ(r.prompt_tokens, prompt.size());
  EXPECT_EQ(r.finish, FinishReason::MaxTokens);
  EXPECT_EQ(r.stop_token, -1);
  EXPECT_EQ(rt.sequence_length(0), after_hand);
  // The same passes: the last logits are the hand loop's, bit for bit.
  ASSERT_EQ(rt.logits(0).size(), hand_logits.size());
  EXPECT_EQ(memcmp(rt.logits(0).data(), hand_logits.data(), hand_logits.size() * sizeof(float)), 0);
  EXPECT_GT(r.prefill_seconds, 0.0);
  EXPECT_GT(r.decode_seconds, 0.0);

  // Continue the same sequence: an empty prompt carries on from the slot's logits, and
  // feed_last puts the last token in the cache.
  o.max_tokens = 5;
  o.feed_last = true;
  Collected more;
  ASSERT_TRUE(rt.decode(0, want.back()).ok());
  ASSERT_TRUE(generate(rt, 0, Span<const int32_t>(), o, &collect, &more, &r).ok());
  EXPECT_EQ(more.ids.size(), 5u);
  EXPECT_EQ(r.tokens_decoded, 5u);
  EXPECT_EQ(rt.sequence_length(0), after_hand + 1 + 5);
}

TEST(Generate, StopsAtAnEndToken) {
  Runtime& rt = fresh_runtime();
  const std::vector<int32_t> prompt = prompt_ids(rt);
  const std::vector<int32_t> want = hand_loop(rt, prompt, 40);
  ASSERT_GE(want.size(), 10u);
  // Make the 8th token a stop token: generation ends at its first occurrence.
  const int32_t stop = want[7];
  size_t first = 0;
  while (want[first] != stop) ++first;

  for (bool feed_last : {false, true}) {
    SCOPED_TRACE(feed_last ? "feed_last" : "no feed_last");
    fresh_runtime();
    GenerateOptions o;
    o.max_tokens = 40;
    o.stop_tokens[0] = stop;
    o.n_stop_tokens = 1;
    o.feed_last = feed_last;
    Collected c;
    GenerateResult r;
    ASSERT_TRUE(generate(rt, 0, Span<const int32_t>(prompt.data(), prompt.size()), o, &collect, &c, &r).ok());
    EXPECT_EQ(r.finish, FinishReason::StopToken);
    EXPECT_EQ(r.stop_token, stop);
    EXPECT_EQ(c.ids, std::vector<int32_t>(want.begin(), want.begin() + first)) << "the stop token is not streamed";
    EXPECT_EQ(r.tokens_generated, first);
    EXPECT_EQ(r.tokens_decoded, feed_last ? first + 1 : first);
    EXPECT_EQ(rt.sequence_length(0), prompt.size() + r.tokens_decoded);
  }
}

TEST(Generate, TheCallbackStopsIt) {
  Runtime& rt = fresh_runtime();
  const std::vector<int32_t> prompt = prompt_ids(rt);
  GenerateOptions o;
  o.max_tokens = 50;
  Collected c;
  c.stop_after = 3;
  GenerateResult r;
  ASSERT_TRUE(generate(rt, 0, Span<const int32_t>(prompt.data(), prompt.size()), o, &collect, &c, &r).ok());
  EXPECT_EQ(r.finish, FinishReason::Cancelled);
  EXPECT_EQ(c.ids.size(), 3u);
  EXPECT_EQ(r.tokens_generated, 3u);
  EXPECT_EQ(r.tokens_decoded, 2u);
  EXPECT_EQ(rt.sequence_length(0), prompt.size() + 2);
}

TEST(Generate, PiecesAreUtf8AndConcatenateToTheText) {
  // Hot sampling over a vocabulary with byte tokens: partial and ill-formed UTF-8 sequences.
  Runtime& rt = fresh_runtime();
  text::SamplerConfig sc;
  sc.temperature = 2.5f;
  sc.seed = 1234;
  const std::vector<int32_t> prompt = prompt_ids(rt, "The cat");
  GenerateOptions o;
  o.max_tokens = 200;
  o.default_stops = false;
  o.sampler = &sc;
  Collected c;
  GenerateResult r;
  ASSERT_TRUE(generate(rt, 0, Span<const int32_t>(prompt.data(), prompt.size()), o, &collect, &c, &r).ok());
  ASSERT_EQ(c.ids.size(), 200u);
  bool multibyte = false;
  for (const std::string& p : c.pieces) {
    EXPECT_TRUE(valid_utf8(p)) << "piece '" << p << "'";
    for (char ch : p) multibyte |= static_cast<unsigned char>(ch) >= 0x80;
  }
  EXPECT_TRUE(multibyte) << "the sample should contain non-ASCII text; pick another seed";
  EXPECT_EQ(c.text, decoded(rt, c.ids));

  // The same seed through set_sampler and a hand loop gives the same ids.
  fresh_runtime();
  ASSERT_TRUE(rt.set_sampler(0, sc).ok());
  ASSERT_TRUE(rt.prefill(0, Span<const int32_t>(prompt.data(), prompt.size())).ok());
  std::vector<int32_t> hand;
  for (int i = 0; i < 200; ++i) {
    const Result<int32_t> t = rt.sample(0);
    ASSERT_TRUE(t.ok());
    hand.push_back(t.value());
    ASSERT_TRUE(rt.decode(0, t.value()).ok());
  }
  EXPECT_EQ(c.ids, hand);
}

TEST(Generate, AFullCacheStopsAtTheBudget) {
  Runtime& rt = fresh_runtime();
  ASSERT_EQ(rt.config().kv.kind, KvPolicyKind::Full);
  const std::vector<int32_t> prompt = prompt_ids(rt);
  GenerateOptions o;
  o.max_tokens = 1000;
  o.default_stops = false;
  GenerateResult r;
  ASSERT_TRUE(generate(rt, 0, Span<const int32_t>(prompt.data(), prompt.size()), o, nullptr, nullptr, &r).ok());
  EXPECT_EQ(r.finish, FinishReason::KvFull);
  EXPECT_EQ(rt.sequence_length(0), kBudget);
  EXPECT_EQ(r.tokens_decoded, kBudget - prompt.size());
  EXPECT_EQ(r.tokens_generated, r.tokens_decoded + 1);
  // A prompt over the budget is the runtime's KvFull.
  fresh_runtime();
  std::vector<int32_t> long_prompt(kBudget + 1, prompt[1]);
  const Error e = generate(rt, 0, Span<const int32_t>(long_prompt.data(), long_prompt.size()), o, nullptr, nullptr, &r);
  EXPECT_EQ(e.status(), Status::KvFull) << e.message();
  EXPECT_EQ(r.finish, FinishReason::None);
}

TEST(Generate, BadArguments) {
  Runtime& rt = fresh_runtime();
  GenerateOptions o;
  const std::vector<int32_t> prompt = prompt_ids(rt);
  EXPECT_EQ(generate(rt, 3, Span<const int32_t>(prompt.data(), prompt.size()), o, nullptr, nullptr, nullptr).status(),
            Status::InvalidArgument);
  EXPECT_EQ(generate(rt, 0, Span<const int32_t>(), o, nullptr, nullptr, nullptr).status(), Status::InvalidArgument)
      << "nothing to continue from";
  o.n_stop_tokens = kMaxStopTokens + 1;
  EXPECT_EQ(generate(rt, 0, Span<const int32_t>(prompt.data(), prompt.size()), o, nullptr, nullptr, nullptr).status(),
            Status::InvalidArgument);
  // max_tokens 0: prefill only.
  o = GenerateOptions{};
  o.max_tokens = 0;
  GenerateResult r;
  ASSERT_TRUE(generate(rt, 0, Span<const int32_t>(prompt.data(), prompt.size()), o, nullptr, nullptr, &r).ok());
  EXPECT_EQ(r.finish, FinishReason::MaxTokens);
  EXPECT_EQ(r.tokens_generated, 0u);
  EXPECT_EQ(rt.sequence_length(0), prompt.size());
}

// The C API: keel_generate against keel_sample/keel_decode in one caller block.
struct CEngine {
  std::vector<uint8_t> block;
  keel_engine* e = nullptr;
  explicit CEngine(uint32_t budget, uint32_t policy = KEEL_KV_FULL) {
    keel_config cfg{};
    cfg.kv_budget_tokens = budget;
    cfg.kv_policy = policy;
    cfg.backend = KEEL_BACKEND_NATIVE;
    keel_plan_info plan{};
    EXPECT_EQ(keel_plan(stories().data(), stories().size(), &cfg, &plan), KEEL_OK);
    block.resize(plan.total_bytes);
    char msg[300] = "";
    EXPECT_EQ(keel_init(block.data(), block.size(), stories().data(), stories().size(), &cfg, &e, msg, sizeof msg),
              KEEL_OK)
        << msg;
  }
};

int c_collect(void* user, int32_t token, const char* text, size_t len) {
  return collect(user, token, text, len) ? 1 : 0;
}

TEST(CGenerate, GreedyEqualsSampleDecodeAndStops) {
  CEngine a(kBudget), b(kBudget);
  ASSERT_NE(a.e, nullptr);
  ASSERT_NE(b.e, nullptr);
  int32_t prompt[16];
  size_t n = 0;
  ASSERT_EQ(keel_tokenize(a.e, "Once upon a time", 16, 1, 0, prompt, 16, &n), KEEL_OK);
  ASSERT_EQ(keel_prefill(a.e, 0, prompt, n), KEEL_OK);
  std::vector<int32_t> want;
  for (int i = 0; i < 60; ++i) {
    int32_t t = -1;
    ASSERT_EQ(keel_sample(a.e, 0, &t), KEEL_OK);
    if (t == keel_eos_token(a.e)) break;
    want.push_back(t);
    ASSERT_EQ(keel_decode(a.e, 0, t), KEEL_OK);
  }
  ASSERT_EQ(want.size(), 60u);

  keel_generate_options o{};
  o.max_tokens = 60;
  Collected c;
  keel_generate_result r{};
  ASSERT_EQ(keel_generate(b.e, 0, prompt, n, &o, &c_collect, &c, &r), KEEL_OK) << keel_last_error(b.e);
  EXPECT_EQ(c.ids, want);
  EXPECT_EQ(r.tokens_generated, 60u);
  EXPECT_EQ(r.tokens_decoded, 59u);
  EXPECT_EQ(r.prompt_tokens, n);
  EXPECT_EQ(r.stop_reason, uint32_t(KEEL_STOP_MAX_TOKENS));
  EXPECT_EQ(r.stop_token, -1);
  EXPECT_EQ(r.prefill_seconds, 0.0) << "no clock given";

  // A stop token, the callback, NULL options (128 tokens, default stops, the slot's sampling).
  ASSERT_EQ(keel_reset(b.e, 0), KEEL_OK);
  o.stop_tokens[0] = want[4];
  o.n_stop_tokens = 1;
  Collected s;
  ASSERT_EQ(keel_generate(b.e, 0, prompt, n, &o, &c_collect, &s, &r), KEEL_OK);
  EXPECT_EQ(r.stop_reason, uint32_t(KEEL_STOP_END_TOKEN));
  EXPECT_EQ(r.stop_token, want[4]);
  EXPECT_LE(s.ids.size(), 4u);
  ASSERT_EQ(keel_reset(b.e, 0), KEEL_OK);
  Collected cb;
  cb.stop_after = 2;
  ASSERT_EQ(keel_generate(b.e, 0, prompt, n, nullptr, &c_collect, &cb, &r), KEEL_OK);
  EXPECT_EQ(r.stop_reason, uint32_t(KEEL_STOP_CALLBACK));
  EXPECT_EQ(cb.ids, std::vector<int32_t>(want.begin(), want.begin() + 2));
  ASSERT_EQ(keel_reset(b.e, 0), KEEL_OK);
  ASSERT_EQ(keel_generate(b.e, 0, prompt, n, nullptr, nullptr, nullptr, &r), KEEL_OK);
  EXPECT_EQ(r.stop_reason, uint32_t(KEEL_STOP_MAX_TOKENS));
  EXPECT_EQ(r.tokens_generated, 128u);

  // Bad arguments are refused and the engine stays usable.
  o.n_stop_tokens = KEEL_MAX_STOP_TOKENS + 1;
  EXPECT_EQ(keel_generate(b.e, 0, prompt, n, &o, nullptr, nullptr, &r), KEEL_ERR_BAD_ARGUMENT);
  EXPECT_NE(std::string(keel_last_error(b.e)).find("n_stop_tokens"), std::string::npos);
  EXPECT_EQ(keel_generate(b.e, 0, nullptr, 3, nullptr, nullptr, nullptr, &r), KEEL_ERR_BAD_ARGUMENT);
  EXPECT_EQ(keel_generate(nullptr, 0, prompt, n, nullptr, nullptr, nullptr, &r), KEEL_ERR_BAD_ARGUMENT);
}

TEST(CGenerate, SamplingAndTheBudget) {
  CEngine a(64), b(64);
  int32_t prompt[16];
  size_t n = 0;
  ASSERT_EQ(keel_tokenize(a.e, "Once upon a time", 16, 1, 0, prompt, 16, &n), KEEL_OK);
  keel_sampling s{};
  s.temperature = 0.9f;
  s.top_k = 40;
  s.top_p = 0.95f;
  s.repetition_penalty = 1.1f;
  s.seed = 77;
  ASSERT_EQ(keel_set_sampling(a.e, 0, &s), KEEL_OK);
  ASSERT_EQ(keel_prefill(a.e, 0, prompt, n), KEEL_OK);
  std::vector<int32_t> want;
  for (;;) {
    int32_t t = -1;
    ASSERT_EQ(keel_sample(a.e, 0, &t), KEEL_OK);
    want.push_back(t);
    if (keel_decode(a.e, 0, t) != KEEL_OK) break;  // the full cache refuses the 65th token
  }
  keel_generate_options o{};
  o.max_tokens = 1000;
  o.no_default_stops = 1;
  o.sampling = &s;
  Collected c;
  keel_generate_result r{};
  ASSERT_EQ(keel_generate(b.e, 0, prompt, n, &o, &c_collect, &c, &r), KEEL_OK) << keel_last_error(b.e);
  EXPECT_EQ(r.stop_reason, uint32_t(KEEL_STOP_BUDGET));
  EXPECT_EQ(c.ids, want) << "generate stops where a decode would overflow the budget";
  EXPECT_EQ(r.tokens_decoded, 64u - n);
}

}  // namespace
}  // namespace keel
