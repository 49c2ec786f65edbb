// encode, stream decoding and sampling never call the allocator: every replaceable global
// operator new is counted while they run (the engine has no other way to allocate, and the
// library is built without exceptions, whose objects would be heap-allocated too).
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <new>

#include "support/test_support.h"
#include "support/tokenizer_fixtures.cpp"  // NOLINT: compiled into this test binary only
#include "text/sampler.h"
#include "text/stream_decoder.h"

namespace {
std::atomic<long> g_news{0};

void* counted(size_t n) {
  g_news.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void* counted_aligned(size_t n, std::align_val_t a) {
  g_news.fetch_add(1, std::memory_order_relaxed);
  const size_t al = static_cast<size_t>(a);
  if (void* p = std::aligned_alloc(al, (n + al - 1) / al * al)) return p;
  throw std::bad_alloc();
}
}  // namespace

void* operator new(size_t n) { return counted(n); }
void* operator new[](size_t n) { return counted(n); }
void* operator new(size_t n, std::align_val_t a) { return counted_aligned(n, a); }
void* operator new[](size_t n, std::align_val_t a) { return counted_aligned(n, a); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t, std::align_val_t) noexcept { std::free(p); }

namespace keel::test {
namespace {

// Encodes and stream-decodes `text` with pre-sized buffers; returns allocations counted.
long allocations_for(LoadedTokenizer& t, const std::string& text, bool parse_special) {
  std::vector<int32_t> ids(4096);
  std::vector<char> out(1 << 16);
  text::StreamDecoder dec;
  const long before = g_news.load();
  text::EncodeOptions opt;
  opt.parse_special = parse_special;
  size_t n = 0;
  const Error e = t.tok.encode(text.data(), text.size(), opt,
                               Span<int32_t>(ids.data(), ids.size()), &n, t.scratch);
  dec.reset(t.tok);
  size_t at = 0;
  for (size_t i = 0; i < n && e.ok(); ++i) {
    size_t k = 0;
    (void)dec.push(ids[i], Span<char>(out.data() + at, out.size() - at), &k);
    at += k;
  }
  at += dec.flush(Span<char>(out.data() + at, out.size() - at));
  const long after = g_news.load();
  EXPECT_TRUE(e.ok()) << e.message();
  EXPECT_EQ(std::string(out.data(), at), text);
  return after - before;
}

TEST(TextNoAllocation, EncodeAndDecode) {
  convert::SourceTokenizer bpe, spm;
  std::string error;
  const std::string dir = shared_path("fixtures/smollm2-135m-tokenizer");
  require_file(dir + "/tokenizer.json");
  ASSERT_TRUE(load_hf_tokenizer_json(dir, bpe, error)) << error;
  ASSERT_TRUE(load_gguf_vocab(require_file(shared_path("fixtures/ggml-vocab-llama-spm.gguf")),
                              spm, error))
      << error;
  auto b = make_tokenizer(bpe);
  auto s = make_tokenizer(spm);
  ASSERT_TRUE(b && s);
  const std::string text = "Hello, wörld! 1234 🦙 \t\n  code(x) { return y; }" +
                           std::string(2000, ' ') + "end";
  EXPECT_EQ(allocations_for(*b, text, false), 0);
  EXPECT_EQ(allocations_for(*b, "<|im_start|>user\nhi<|im_end|>", true), 0);
  EXPECT_EQ(allocations_for(*s, text, false), 0);
}

TEST(TextNoAllocation, Sample) {
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
  const long before = g_news.load();
  int32_t id = -1;
  for (int i = 0; i < 10; ++i) {
    id = sampler.sample(Span<float>(logits.data(), logits.size()),
                        Span<const int32_t>(recent.data(), recent.size()));
  }
  EXPECT_EQ(g_news.load() - before, 0);
  EXPECT_GE(id, 0);
}

}  // namespace
}  // namespace keel::test
