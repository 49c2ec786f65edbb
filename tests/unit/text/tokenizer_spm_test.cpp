// SentencePiece BPE: llama.cpp's Llama-2 vocab test vectors (../shared/fixtures/
// ggml-vocab-llama-spm.gguf.inp / .out, produced with the Hugging Face Llama-2 tokenizer and
// add_special_tokens=False: a U+2581 prefix, no BOS) and llama2.c's encoder on stories260K
// (tests/reference/llama2c_tokenize.py).
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "support/test_support.h"
#include "support/tokenizer_fixtures.cpp"  // NOLINT: compiled into this test binary only

namespace keel::test {
namespace {

std::unique_ptr<LoadedTokenizer> llama_spm() {
  convert::SourceTokenizer src;
  std::string error;
  if (!load_gguf_vocab(require_file(shared_path("fixtures/ggml-vocab-llama-spm.gguf")), src, error)) {
    ADD_FAILURE() << error;
    return nullptr;
  }
  EXPECT_EQ(src.kind, convert::TokenizerKind::SentencePieceBpe);
  return make_tokenizer(src);
}

std::unique_ptr<LoadedTokenizer> stories260k() {
  convert::SourceTokenizer src;
  std::string error;
  if (!load_llama2c_tokenizer(require_file(shared_path("models/stories260K/tok512.bin")), src, error)) {
    ADD_FAILURE() << error;
    return nullptr;
  }
  return make_tokenizer(src);
}

TEST(TokenizerSpm, MatchesLlamaCppVocabTestVectors) {
  auto t = llama_spm();
  ASSERT_TRUE(t);
  const auto inputs = read_ggml_vocab_inputs(require_file(shared_path("fixtures/ggml-vocab-llama-spm.gguf.inp")));
  const auto outputs = read_ggml_vocab_outputs(require_file(shared_path("fixtures/ggml-vocab-llama-spm.gguf.out")));
  ASSERT_FALSE(inputs.empty());
  ASSERT_EQ(inputs.size(), outputs.size());
  size_t matched = 0, roundtrips = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const std::vector<int32_t> got = t->encode(inputs[i]);
    if (got == outputs[i]) ++matched;
    EXPECT_EQ(got, outputs[i]) << "text #" << i << ": " << nlohmann::json(inputs[i]).dump();
    const std::string back = t->decode(got);
    if (back == inputs[i]) ++roundtrips;
    EXPECT_EQ(back, inputs[i]) << "text #" << i;
  }
  std::printf("[ vectors  ] %zu / %zu strings match llama.cpp, %zu decoded back exactly\n", matched, inputs.size(),
              roundtrips);
}

TEST(TokenizerSpm, BosAndSpecialTokens) {
  auto t = llama_spm();
  ASSERT_TRUE(t);
  EXPECT_TRUE(t->tok.adds_bos());
  EXPECT_EQ(t->encode("Hello world", true), (std::vector<int32_t>{1, 15043, 3186}));
  EXPECT_TRUE(t->encode("", true) == std::vector<int32_t>{1});
  // "<s>" is text unless special tokens are parsed; each run of text after a special token
  // gets the space prefix again (llama.cpp, Hugging Face legacy Llama tokenizer).
  const std::vector<int32_t> parsed = t->encode("<s>Hello</s>", false, true);
  EXPECT_EQ(parsed, (std::vector<int32_t>{1, 15043, 2}));
  const std::vector<int32_t> plain = t->encode("<s>Hello</s>", false, false);
  for (int32_t id : plain) EXPECT_GT(id, 2);
  // Decoding drops control tokens and the prefix space after BOS.
  EXPECT_EQ(t->decode({1, 15043, 3186, 2}), "Hello world");
  EXPECT_EQ(t->decode({1, 15043, 3186, 2}, true), "<s>Hello world</s>");
}

TEST(TokenizerSpm, ByteFallbackAndIllFormedUtf8) {
  auto t = llama_spm();
  ASSERT_TRUE(t);
  // U+1F999 has no piece: its four bytes come back as <0xF0> <0x9F> <0xA6> <0x99> (id = byte+3).
  EXPECT_EQ(t->encode("\xF0\x9F\xA6\x99"), (std::vector<int32_t>{29871, 243, 162, 169, 156}));
  // An ill-formed byte is one symbol of its own and falls back to its byte token.
  EXPECT_EQ(t->encode("a\xFF"), (std::vector<int32_t>{263, 258}));
  const std::string fffd = "\xEF\xBF\xBD";
  EXPECT_EQ(t->decode({263, 258}), "a" + fffd);
}

TEST(TokenizerSpm, LongWordsAreCutAndStillRoundTrip) {
  auto t = llama_spm();
  ASSERT_TRUE(t);
  for (const std::string& text : {std::string(3000, 'a'), std::string(2000, ' ') + "x", std::string("word ") + "x"}) {
    const std::vector<int32_t> ids = t->encode(text);
    EXPECT_EQ(t->decode(ids), text);
  }
}

TEST(TokenizerSpm, MatchesLlama2cOnStories260K) {
  auto t = stories260k();
  ASSERT_TRUE(t);
  std::ifstream f(require_file(source_path("tests/golden/stories260K_tokenizer.json")));
  const nlohmann::json g = nlohmann::json::parse(f, nullptr, false);
  ASSERT_FALSE(g.is_discarded());
  size_t matched = 0;
  for (const auto& e : g["entries"]) {
    const std::string text = e["text"].get<std::string>();
    const std::vector<int32_t> want = e["ids"].get<std::vector<int32_t>>();
    const std::vector<int32_t> got = t->encode(text);
    if (got == want) ++matched;
    EXPECT_EQ(got, want) << "text: " << nlohmann::json(text).dump();
    EXPECT_EQ(t->decode(got), text);
    // run.c encodes prompts with BOS.
    std::vector<int32_t> with_bos = {1};
    with_bos.insert(with_bos.end(), want.begin(), want.end());
    EXPECT_EQ(t->encode(text, true), with_bos);
    EXPECT_EQ(t->decode(with_bos), text);
  }
  std::printf("[ llama2.c ] %zu / %zu strings match\n", matched, g["entries"].size());
  EXPECT_EQ(matched, g["entries"].size());
}

TEST(TokenizerSpm, ArenaBytesArePinned) {
  auto t = stories260k();
  ASSERT_TRUE(t);
  const auto* table = flatbuffers::GetRoot<fb::Tokenizer>(t->table.data());
  // 512 tokens -> 1024 slots, 256 byte tokens, BOS and EOS special.
  EXPECT_EQ(text::Tokenizer::arena_bytes(table), 5140u);
  EXPECT_LE(t->arena.used(), text::Tokenizer::arena_bytes(table));
}

}  // namespace
}  // namespace keel::test

namespace keel::test {
namespace {

// A vocabulary with a piece that joins across a space ("a▁b") must not be cut into words at
// spaces: the merge through the space has to stay possible.
TEST(TokenizerSpm, PieceAcrossSpaceDisablesWordCuts) {
  convert::SourceTokenizer src;
  src.kind = convert::TokenizerKind::SentencePieceBpe;
  src.tokens = {"<unk>",
                "<s>",
                "</s>",
                "\xE2\x96\x81",
                "a",
                "b",
                "\xE2\x96\x81"
                "a",
                "\xE2\x96\x81"
                "b",
                "a\xE2\x96\x81"
                "b"};
  src.scores = {0, 0, 0, -1, -2, -3, -10, -5, -4};
  src.token_types = {2, 3, 3, 1, 1, 1, 1, 1, 1};
  src.unk_id = 0;
  src.bos_id = 1;
  src.eos_id = 2;
  src.add_space_prefix = true;
  auto t = make_tokenizer(src);
  ASSERT_TRUE(t);
  // ▁ a ▁ b -> ▁ a ▁b (-5) -> ▁ a▁b (-4); "▁a" (-10) loses.
  EXPECT_EQ(t->encode("a b"), (std::vector<int32_t>{3, 8}));
  EXPECT_EQ(t->decode({3, 8}), "a b");
  // Characters without a piece and without byte tokens become <unk>.
  EXPECT_EQ(t->encode("ac"), (std::vector<int32_t>{6, 0}));
}

}  // namespace
}  // namespace keel::test
