// Whole documents tokenized at once give exactly llama.cpp's ids (tests/golden/tokens_llamacpp.json,
// made by tests/reference/tokens_llamacpp.py with llama.cpp's own llama-tokenize): every essay of
// ../shared/data, the King James Bible and generated adversarial texts, through the tokenizer
// tables the converter writes for SmolLM2 (byte-level BPE) and Gemma 3 (SentencePiece BPE).
// The golden holds a hash per block of ids; on a difference the test names the first block
// that differs, prints its text and writes Keel's ids into the build tree.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "support/test_support.h"
#include "support/tokenizer_fixtures.cpp"  // NOLINT: compiled into this test binary only

namespace keel::test {
namespace {

uint64_t fnv1a64(const void* data, size_t n, uint64_t h = 0xCBF29CE484222325ull) {
  const auto* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001B3ull;
  return h;
}

std::string hex16(uint64_t v) {
  char buf[17];
  snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

std::string block_hash(const std::vector<int32_t>& ids, size_t begin, size_t end) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (size_t i = begin; i < end; ++i) {
    const uint32_t v = uint32_t(ids[i]);  // little-endian int32, as the reference script hashes
    const uint8_t le[4] = {uint8_t(v), uint8_t(v >> 8), uint8_t(v >> 16), uint8_t(v >> 24)};
    h = fnv1a64(le, 4, h);
  }
  return hex16(h);
}

nlohmann::json golden() {
  std::ifstream f(require_file(source_path("tests/golden/tokens_llamacpp.json")));
  return nlohmann::json::parse(f, nullptr, false);
}

std::string document_path(const std::string& key) {
  if (key.rfind("shared:", 0) == 0) return shared_path(key.substr(7));
  if (key == "kjv") return KEEL_KJV_TEXT;
  if (key.rfind("generated:", 0) == 0) return std::string(KEEL_TOKENIZER_TEXTS_DIR) + "/" + key.substr(10);
  ADD_FAILURE() << "unknown document key " << key;
  return "";
}

void check_model(const std::string& name, const std::string& gguf) {
  const nlohmann::json g = golden();
  ASSERT_FALSE(g.is_discarded()) << "tests/golden/tokens_llamacpp.json is not JSON";
  const size_t block = g.at("block").get<size_t>();
  const nlohmann::json& docs = g.at("models").at(name).at("documents");
  ASSERT_GE(docs.size(), 50u);

  std::string error;
  const auto src = convert::read_gguf_tokenizer(require_file(gguf), error);
  ASSERT_TRUE(src) << error;
  auto tok = make_tokenizer_as_converted(*src);
  ASSERT_TRUE(tok);

  size_t total_ids = 0;
  for (const auto& [key, want] : docs.items()) {
    SCOPED_TRACE(name + " " + key);
    const std::vector<uint8_t> bytes = read_bytes(require_file(document_path(key)));
    ASSERT_EQ(bytes.size(), want.at("bytes").get<size_t>()) << "the golden was made from another text";
    ASSERT_EQ(hex16(fnv1a64(bytes.data(), bytes.size())), want.at("text_fnv").get<std::string>())
        << "the golden was made from another text";
    const std::string text(bytes.begin(), bytes.end());
    const std::vector<int32_t> ids = tok->encode(text, /*add_bos=*/true);
    total_ids += ids.size();
    if (want.contains("no_reference")) {
      // llama.cpp cannot tokenize this text (its byte-level BPE throws on ill-formed UTF-8);
      // Keel encodes the bytes, as the Hugging Face tokenizers do, and they decode back, but for
      // the bytes the vocabulary has no character for (docs/format.md, "Tokenizers").
      std::string kept, decoded;
      for (char c : text) {
        if (!tok->encode(std::string(1, c)).empty()) kept += c;
      }
      for (int32_t id : ids) tok->tok.for_each_token_byte(id, [&](uint8_t b) { decoded += char(b); });
      EXPECT_EQ(decoded, kept);
      EXPECT_LT(kept.size(), text.size());  // the text holds bytes SmolLM2 has no character for
      continue;
    }

    const auto& blocks = want.at("blocks");
    size_t first_bad = SIZE_MAX;
    for (size_t b = 0; b * block < ids.size() && b < blocks.size(); ++b) {
      if (block_hash(ids, b * block, std::min(ids.size(), (b + 1) * block)) != blocks[b].get<std::string>()) {
        first_bad = b;
        break;
      }
    }
    const size_t want_ids = want.at("tokens").get<size_t>();
    if (first_bad == SIZE_MAX && ids.size() == want_ids) continue;
    if (first_bad == SIZE_MAX) first_bad = std::min(ids.size(), want_ids) / block;
    // Kept after the test (tmp_path is removed at exit) for a diff against llama-tokenize --ids.
    const std::string dump =
        std::string(KEEL_TEST_TMP_DIR) + "/tokens_" + name + "_" + key.substr(key.find_last_of("/:") + 1) + ".ids";
    std::ofstream out(dump);
    for (int32_t id : ids) out << id << '\n';
    const size_t lo = first_bad * block, hi = std::min(ids.size(), lo + block);
    const std::vector<int32_t> part(ids.begin() + ptrdiff_t(std::min(lo, ids.size())), ids.begin() + ptrdiff_t(hi));
    ADD_FAILURE() << "Keel: " << ids.size() << " ids, llama.cpp: " << want_ids << "; first block that differs: #"
                  << first_bad << " (ids " << lo << ".." << hi << "), whose text is:\n"
                  << tok->decode(part).substr(0, 600) << "\nKeel's ids are in " << dump;
  }
  EXPECT_GT(total_ids, 100000u);
}

TEST(TokenizerLlamaCpp, SmolLM2WholeDocuments) { check_model("smollm2", smollm2_gguf()); }

TEST(TokenizerLlamaCpp, Gemma3WholeDocuments) { check_model("gemma3", gemma3_gguf()); }

}  // namespace
}  // namespace keel::test
