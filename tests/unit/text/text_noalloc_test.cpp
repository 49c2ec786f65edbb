// encode, stream decoding and sampling never call the allocator: every allocator entry point
// of the process is counted while they run (support/alloc_counter.cpp).
#include <gtest/gtest.h>

#include "support/alloc_counter.h"
#include "support/test_support.h"
#include "support/tokenizer_fixtures.cpp"  // NOLINT: compiled into this test binary only
#include "text/sampler.h"
#include "text/stream_decoder.h"

namespace keel::test {
namespace {

// Encodes and stream-decodes `text` with pre-sized buffers; returns the allocator calls made.
long allocations_for(LoadedTokenizer& t, const std::string& text, bool parse_special) {
  std::vector<int32_t> ids(4096);
  std::vector<char> out(1 << 16);
  text::StreamDecoder dec;
  text::DecodeOptions print;
  print.print_special = true;
  text::EncodeOptions opt;
  opt.add_bos = false;
  opt.parse_special = parse_special;
  size_t n = 0, at = 0;

  start_alloc_counting();
  const Error e = t.tok.encode(text.data(), text.size(), opt, Span<int32_t>(ids.data(), ids.size()), &n, t.scratch);
  dec.reset(t.tok, print);
  for (size_t i = 0; i < n && e.ok(); ++i) {
    size_t k = 0;
    (void)dec.push(ids[i], Span<char>(out.data() + at, out.size() - at), &k);
    at += k;
  }
  at += dec.flush(Span<char>(out.data() + at, out.size() - at));
  const AllocCounts counts = stop_alloc_counting();

  EXPECT_TRUE(e.ok()) << e.message();
  EXPECT_EQ(std::string(out.data(), at), text);
  return counts.total();
}

TEST(TextNoAlloc, EncodeAndDecode) {
  convert::SourceTokenizer bpe, spm;
  std::string error;
  const std::string dir = shared_path("fixtures/smollm2-135m-tokenizer");
  require_file(dir + "/tokenizer.json");
  ASSERT_TRUE(load_hf_tokenizer_json(dir, bpe, error)) << error;
  ASSERT_TRUE(load_gguf_vocab(require_file(shared_path("fixtures/ggml-vocab-llama-spm.gguf")), spm, error)) << error;
  auto b = make_tokenizer(bpe);
  auto s = make_tokenizer(spm);
  ASSERT_TRUE(b && s);
  const std::string text =
      "Hello, w\xC3\xB6rld! 1234 \xF0\x9F\xA6\x99 \t\n  code(x) { return y; }" + std::string(2000, ' ') + "end";
  EXPECT_EQ(allocations_for(*b, text, false), 0);
  EXPECT_EQ(allocations_for(*b, "<|im_start|>user\nhi<|im_end|>", true), 0);
  EXPECT_EQ(allocations_for(*s, text, false), 0);
}

TEST(TextNoAlloc, Sample) {
  text::SamplerConfig cfg;
  cfg.temperature = 0.8f;
  cfg.top_k = 40;
  cfg.top_p = 0.9f;
  cfg.min_p = 0.05f;
  cfg.repetition_penalty = 1.1f;
  const uint32_t vocab = 49152;
  std::vector<uint8_t> mem(text::Sampler::arena_bytes(vocab));
  Arena arena(mem.data(), mem.size());
  text::Sampler sampler;
  ASSERT_TRUE(sampler.init(cfg, vocab, arena).ok());
  std::vector<float> logits(vocab);
  for (uint32_t i = 0; i < vocab; ++i) logits[i] = float((i * 2654435761u) % 1000) / 100.0f;
  const std::vector<int32_t> recent = {1, 2, 3, 4, 5};
  int32_t id = -1;
  start_alloc_counting();
  for (int i = 0; i < 10; ++i) {
    id = sampler.sample(Span<float>(logits.data(), logits.size()), Span<const int32_t>(recent.data(), recent.size()));
  }
  const AllocCounts counts = stop_alloc_counting();
  EXPECT_EQ(counts.total(), 0);
  EXPECT_GE(id, 0);
}

}  // namespace
}  // namespace keel::test
