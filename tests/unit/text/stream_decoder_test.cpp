// Incremental decoding: held-back UTF-8, never an ill-formed byte out, output sizing, control
// tokens, SentencePiece leading space.
#include "text/stream_decoder.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "support/test_support.h"
#include "support/tokenizer_fixtures.cpp"  // NOLINT: compiled into this test binary only

namespace keel::test {
namespace {

std::unique_ptr<LoadedTokenizer> smollm2() {
  convert::SourceTokenizer src;
  std::string error;
  const std::string dir = shared_path("fixtures/smollm2-135m-tokenizer");
  require_file(dir + "/tokenizer.json");
  if (!load_hf_tokenizer_json(dir, src, error)) {
    ADD_FAILURE() << error;
    return nullptr;
  }
  return make_tokenizer(src);
}

std::unique_ptr<LoadedTokenizer> llama_spm() {
  convert::SourceTokenizer src;
  std::string error;
  if (!load_gguf_vocab(require_file(shared_path("fixtures/ggml-vocab-llama-spm.gguf")), src, error)) {
    ADD_FAILURE() << error;
    return nullptr;
  }
  return make_tokenizer(src);
}

bool valid_utf8(const std::string& s) { return text::utf8_valid(reinterpret_cast<const uint8_t*>(s.data()), s.size()); }

// Pushes ids one by one; every chunk must be well-formed UTF-8 on its own.
std::string stream(const text::Tokenizer& tok, const std::vector<int32_t>& ids, text::DecodeOptions opt = {}) {
  text::StreamDecoder dec(tok, opt);
  std::vector<char> buf(dec.max_push_bytes());
  std::string out;
  for (int32_t id : ids) {
    size_t n = 0;
    const Error e = dec.push(id, Span<char>(buf.data(), buf.size()), &n);
    EXPECT_TRUE(e.ok()) << e.message();
    const std::string chunk(buf.data(), n);
    EXPECT_TRUE(valid_utf8(chunk)) << "token " << id << " emitted ill-formed UTF-8";
    out += chunk;
  }
  out.append(buf.data(), dec.flush(Span<char>(buf.data(), buf.size())));
  return out;
}

TEST(StreamDecoder, EveryChunkIsWellFormedOnTheGoldenCorpus) {
  auto t = smollm2();
  ASSERT_TRUE(t);
  std::ifstream f(require_file(source_path("tests/golden/smollm2_tokenizer.json")));
  const nlohmann::json g = nlohmann::json::parse(f, nullptr, false);
  ASSERT_FALSE(g.is_discarded());
  text::DecodeOptions opt;
  opt.print_special = true;
  for (const auto& e : g["entries"]) {
    if (!e["roundtrip"].get<bool>()) continue;
    const std::string text = e["text"].get<std::string>();
    EXPECT_EQ(stream(t->tok, e["ids"].get<std::vector<int32_t>>(), opt), text);
  }
}

TEST(StreamDecoder, HoldsBackAnIncompleteCharacter) {
  auto t = llama_spm();
  ASSERT_TRUE(t);
  // U+1F999 as four byte tokens <0xF0> <0x9F> <0xA6> <0x99>.
  text::StreamDecoder dec(t->tok);
  std::vector<char> buf(dec.max_push_bytes());
  const Span<char> out(buf.data(), buf.size());
  size_t n = 99;
  ASSERT_TRUE(dec.push(243, out, &n).ok());
  EXPECT_EQ(n, 0u);
  ASSERT_TRUE(dec.push(162, out, &n).ok());
  EXPECT_EQ(n, 0u);
  ASSERT_TRUE(dec.push(169, out, &n).ok());
  EXPECT_EQ(n, 0u);
  EXPECT_EQ(dec.pending_bytes(), 3u);
  ASSERT_TRUE(dec.push(156, out, &n).ok());
  EXPECT_EQ(std::string(buf.data(), n), "\xF0\x9F\xA6\x99");
  EXPECT_EQ(dec.pending_bytes(), 0u);
  EXPECT_EQ(dec.flush(out), 0u);

  // Broken by a plain token: the held-back bytes become one U+FFFD, then the token.
  ASSERT_TRUE(dec.push(243, out, &n).ok());
  ASSERT_TRUE(dec.push(162, out, &n).ok());
  ASSERT_TRUE(dec.push(29874, out, &n).ok());  // "a"
  EXPECT_EQ(std::string(buf.data(), n),
            "\xEF\xBF\xBD"
            "a");
  // Cut off by the end of the stream.
  ASSERT_TRUE(dec.push(228, out, &n).ok());  // <0xE1>
  EXPECT_EQ(dec.flush(out), 3u);
  EXPECT_EQ(std::string(buf.data(), 3), "\xEF\xBF\xBD");
}

TEST(StreamDecoder, TooSmallOutputLeavesTheStreamUnchanged) {
  auto t = llama_spm();
  ASSERT_TRUE(t);
  text::StreamDecoder dec(t->tok);
  char small[2];
  char big[64];
  size_t n = 0;
  ASSERT_TRUE(dec.push(243, Span<char>(big), &n).ok());  // <0xF0> held back
  ASSERT_TRUE(dec.push(162, Span<char>(big), &n).ok());  // <0x9F> held back
  // "▁Hello" after the broken sequence needs U+FFFD + " Hello": more than 2 bytes.
  const Error e = dec.push(15043, Span<char>(small), &n);
  EXPECT_EQ(e.status(), Status::InvalidArgument);
  EXPECT_EQ(n, 0u);
  EXPECT_EQ(dec.pending_bytes(), 2u);
  ASSERT_TRUE(dec.push(15043, Span<char>(big), &n).ok());
  // One U+FFFD for the held-back bytes: the failed attempt consumed nothing. (Byte tokens came
  // first, so "▁Hello" is not the first piece and keeps its space.)
  EXPECT_EQ(std::string(big, n), "\xEF\xBF\xBD Hello");
  EXPECT_EQ(dec.push(-1, Span<char>(big), &n).status(), Status::InvalidArgument);
  EXPECT_EQ(dec.push(32000, Span<char>(big), &n).status(), Status::InvalidArgument);
}

TEST(StreamDecoder, SentencePieceLeadingSpace) {
  auto t = llama_spm();
  ASSERT_TRUE(t);
  const std::vector<int32_t> ids = {15043, 3186};  // ▁Hello ▁world
  EXPECT_EQ(stream(t->tok, ids), "Hello world");
  text::DecodeOptions keep;
  keep.strip_leading_space = false;
  EXPECT_EQ(stream(t->tok, ids, keep), " Hello world");
  // After BOS the prefix space goes whatever the option says (llama2.c does the same).
  EXPECT_EQ(stream(t->tok, {1, 15043, 3186}, keep), "Hello world");
  // A <0x20> byte token is a real space and stays.
  EXPECT_EQ(stream(t->tok, {1, 35, 15043}), "  Hello");
  // Unknown prints U+FFFD.
  EXPECT_EQ(stream(t->tok, {0}), "\xEF\xBF\xBD");
}

TEST(StreamDecoder, ByteLevelControlTokensAreSilentUnlessAsked) {
  auto t = smollm2();
  ASSERT_TRUE(t);
  const std::vector<int32_t> ids = t->encode("<|im_start|>assistant\nHi!<|im_end|>", false, true);
  EXPECT_EQ(stream(t->tok, ids), "assistant\nHi!");
  text::DecodeOptions opt;
  opt.print_special = true;
  EXPECT_EQ(stream(t->tok, ids, opt), "<|im_start|>assistant\nHi!<|im_end|>");
}

TEST(StreamDecoder, WholeSequenceDecode) {
  auto t = smollm2();
  ASSERT_TRUE(t);
  const std::string text = "héllo wörld 🦙";
  const std::vector<int32_t> ids = t->encode(text);
  char out[64];
  size_t n = 0;
  ASSERT_TRUE(text::decode(t->tok, Span<const int32_t>(ids.data(), ids.size()), Span<char>(out), &n).ok());
  EXPECT_EQ(std::string(out, n), text);
  char tiny[4];
  EXPECT_EQ(text::decode(t->tok, Span<const int32_t>(ids.data(), ids.size()), Span<char>(tiny), &n).status(),
            Status::InvalidArgument);
}

}  // namespace
}  // namespace keel::test
