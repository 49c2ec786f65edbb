// The tokenizer tables the converter writes (readers + keel::convert::build_tokenizer) encode
// exactly like the reference: llama.cpp's Llama-2 vectors through read_gguf, and llama2.c's
// encoder through read_llama2c on stories260K. read_gguf wants a whole model, so the vectors of
// the vocab-only ggml-vocab-llama-spm.gguf are run on llama-2-tiny-random.gguf, which carries
// the same Llama-2 vocabulary (the test checks that it is the same).
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "support/test_support.h"
#include "support/tokenizer_fixtures.cpp"  // NOLINT: compiled into this test binary only

namespace keel::test {
namespace {

TEST(TokenizerFromConverter, GgufLlamaSpmVocab) {
  std::string error;
  const auto model = convert::read_gguf(require_file(shared_path("fixtures/llama-2-tiny-random.gguf")), error);
  ASSERT_TRUE(model) << error;
  convert::SourceTokenizer vocab_only;
  ASSERT_TRUE(load_gguf_vocab(shared_path("fixtures/ggml-vocab-llama-spm.gguf"), vocab_only, error)) << error;
  ASSERT_EQ(model->tokenizer.tokens, vocab_only.tokens);
  ASSERT_EQ(model->tokenizer.scores, vocab_only.scores);
  auto t = make_tokenizer_as_converted(model->tokenizer);
  ASSERT_TRUE(t);
  const auto inputs = read_ggml_vocab_inputs(require_file(shared_path("fixtures/ggml-vocab-llama-spm.gguf.inp")));
  const auto outputs = read_ggml_vocab_outputs(require_file(shared_path("fixtures/ggml-vocab-llama-spm.gguf.out")));
  ASSERT_EQ(inputs.size(), outputs.size());
  ASSERT_FALSE(inputs.empty());
  for (size_t i = 0; i < inputs.size(); ++i) {
    EXPECT_EQ(t->encode(inputs[i]), outputs[i]) << "text #" << i;
  }
}

TEST(TokenizerFromConverter, Llama2cStories260K) {
  std::string error;
  const auto model = convert::read_llama2c(require_file(shared_path("models/stories260K/stories260K.bin")),
                                           require_file(shared_path("models/stories260K/tok512.bin")), error);
  ASSERT_TRUE(model) << error;
  auto t = make_tokenizer_as_converted(model->tokenizer);
  ASSERT_TRUE(t);
  std::ifstream f(require_file(source_path("tests/golden/stories260K_tokenizer.json")));
  const nlohmann::json g = nlohmann::json::parse(f, nullptr, false);
  ASSERT_FALSE(g.is_discarded());
  for (const auto& e : g["entries"]) {
    const std::string text = e["text"].get<std::string>();
    EXPECT_EQ(t->encode(text), e["ids"].get<std::vector<int32_t>>()) << text;
    EXPECT_EQ(t->decode(t->encode(text, true)), text);
  }
}

}  // namespace
}  // namespace keel::test
