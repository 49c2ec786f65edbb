// Byte-level BPE against the Hugging Face reference (tests/reference/tokenizer_golden.py) on
// the SmolLM2 tokenizer, and the encode contract: output sizing, scratch, ill-formed UTF-8.
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
  EXPECT_EQ(src.pre, convert::PreTokenizer::SmolLM);
  return make_tokenizer(src);
}

nlohmann::json golden(const std::string& name) {
  std::ifstream f(require_file(source_path("tests/golden/" + name)));
  return nlohmann::json::parse(f, nullptr, false);
}

TEST(TokenizerBpe, MatchesHuggingFaceOnGoldenCorpus) {
  auto t = smollm2();
  ASSERT_TRUE(t);
  const nlohmann::json g = golden("smollm2_tokenizer.json");
  ASSERT_FALSE(g.is_discarded());
  const auto& entries = g["entries"];
  ASSERT_GE(entries.size(), 60u);
  size_t matched = 0, roundtrips = 0;
  for (const auto& e : entries) {
    const std::string text = e["text"].get<std::string>();
    const std::vector<int32_t> want = e["ids"].get<std::vector<int32_t>>();
    const std::vector<int32_t> got = t->encode(text, /*add_bos=*/false, /*parse_special=*/true);
    if (got == want) ++matched;
    EXPECT_EQ(got, want) << "text: " << nlohmann::json(text).dump();
    if (e["roundtrip"].get<bool>()) {
      EXPECT_EQ(t->decode(got, /*print_special=*/true), text);
      ++roundtrips;
    }
  }
  std::printf("[ corpus   ] %zu / %zu strings match the reference, %zu decoded back exactly\n", matched, entries.size(),
              roundtrips);
  EXPECT_EQ(matched, entries.size());
}

TEST(TokenizerBpe, SpecialTokensOnlyWhenParsed) {
  auto t = smollm2();
  ASSERT_TRUE(t);
  EXPECT_EQ(t->tok.im_start_id(), 1);
  EXPECT_EQ(t->tok.im_end_id(), 2);
  const std::string chat = "<|im_start|>user\nhi<|im_end|>";
  EXPECT_EQ(t->encode(chat, false, true), (std::vector<int32_t>{1, 4093, 198, 6004, 2}));
  const std::vector<int32_t> plain = t->encode(chat, false, false);
  for (int32_t id : plain) EXPECT_GT(id, 16) << "control token matched without parse_special";
  EXPECT_EQ(t->decode(plain), chat);
  // Control tokens print only on request.
  EXPECT_EQ(t->decode({1, 4093, 198, 6004, 2}), "user\nhi");
  EXPECT_EQ(t->decode({1, 4093, 198, 6004, 2}, true), chat);
}

TEST(TokenizerBpe, OutputTooSmallSaysHowManyIdsAreNeeded) {
  auto t = smollm2();
  ASSERT_TRUE(t);
  const std::string text = "The quick brown fox jumps over the lazy dog.";
  const std::vector<int32_t> all = t->encode(text);
  ASSERT_GT(all.size(), 3u);
  int32_t out[3] = {-1, -1, -1};
  size_t n = 0;
  const Error e = t->tok.encode(text.data(), text.size(), {}, Span<int32_t>(out), &n, t->scratch);
  EXPECT_EQ(e.status(), Status::PromptTooLong);
  EXPECT_EQ(n, all.size());
  EXPECT_NE(std::string(e.message()).find(std::to_string(all.size())), std::string::npos) << e.message();
  for (int i = 0; i < 3; ++i) EXPECT_EQ(out[i], all[size_t(i)]);
}

TEST(TokenizerBpe, ScratchTooSmallIsAnError) {
  auto t = smollm2();
  ASSERT_TRUE(t);
  std::vector<uint8_t> small(text::Tokenizer::scratch_bytes() / 2);
  Arena scratch(small.data(), small.size());
  int32_t out[16];
  size_t n = 0;
  const Error e = t->tok.encode("hi", 2, {}, Span<int32_t>(out), &n, scratch);
  EXPECT_EQ(e.status(), Status::ArenaTooSmall);
  EXPECT_EQ(scratch.used(), 0u);
}

TEST(TokenizerBpe, IllFormedUtf8EncodesItsBytes) {
  auto t = smollm2();
  ASSERT_TRUE(t);
  const std::string text = "ok \x80\x80 bytes \xc3 and \xe2\x82 cut \xf0\x9f";
  const std::vector<int32_t> ids = t->encode(text);
  std::string bytes;
  for (int32_t id : ids) t->tok.for_each_token_byte(id, [&](uint8_t b) { bytes += char(b); });
  EXPECT_EQ(bytes, text);
  // The stream decoder never emits ill-formed UTF-8: each maximal bad subpart is one U+FFFD.
  const std::string fffd = "\xEF\xBF\xBD";
  EXPECT_EQ(t->decode(ids), "ok " + fffd + fffd + " bytes " + fffd + " and " + fffd + " cut " + fffd);
  // Bytes whose alphabet character the vocabulary lacks (0xFE, 0xFF never occur in UTF-8) are
  // dropped, as the reference drops characters it has no token for.
  EXPECT_EQ(t->encode("a\xfe\xff"), t->encode("a"));

  text::EncodeOptions strict;
  strict.reject_invalid_utf8 = true;
  int32_t out[64];
  size_t n = 0;
  const Error e = t->tok.encode(text.data(), text.size(), strict, Span<int32_t>(out), &n, t->scratch);
  EXPECT_EQ(e.status(), Status::InvalidUtf8);
  EXPECT_EQ(n, 0u);
}

TEST(TokenizerBpe, LongPreTokensAreCutAndStillRoundTrip) {
  auto t = smollm2();
  ASSERT_TRUE(t);
  for (const std::string& text : {std::string(5000, ' ') + "x", std::string(3000, 'a'), std::string(2500, '!'), [] {
                                    std::string s;
                                    for (int i = 0; i < 800; ++i) s += "\xC3\xA9";  // é: cut only at character starts
                                    return s;
                                  }()}) {
    const std::vector<int32_t> ids = t->encode(text);
    EXPECT_FALSE(ids.empty());
    EXPECT_EQ(t->decode(ids), text);
  }
}

TEST(TokenizerBpe, EmptyTextAndBos) {
  auto t = smollm2();
  ASSERT_TRUE(t);
  EXPECT_TRUE(t->encode("").empty());
  // SmolLM2 does not ask for BOS, so add_bos adds nothing.
  EXPECT_FALSE(t->tok.adds_bos());
  EXPECT_EQ(t->encode("hi", true), t->encode("hi", false));
}

TEST(TokenizerBpe, ArenaBytesArePinned) {
  auto t = smollm2();
  ASSERT_TRUE(t);
  const auto* table = flatbuffers::GetRoot<fb::Tokenizer>(t->table.data());
  // 49152 tokens -> 131072 slots; 48900 merges -> 3 x 48900 + 131072 slots; 17 specials.
  EXPECT_EQ(text::Tokenizer::arena_bytes(table), 1636496u);
  EXPECT_LE(t->arena.used(), text::Tokenizer::arena_bytes(table));
  EXPECT_EQ(text::Tokenizer::scratch_bytes(), 37912u);
  EXPECT_LE(t->scratch.high_water(), text::Tokenizer::scratch_bytes());
}

TEST(TokenizerBpe, RejectsBrokenTables) {
  convert::SourceTokenizer src;
  src.kind = convert::TokenizerKind::ByteLevelBpe;
  src.tokens = {"a", "b", "ab"};
  src.merges = {"a b"};
  src.bos_id = 7;  // out of range
  auto table = build_tokenizer_table(src);
  std::vector<uint8_t> mem(text::Tokenizer::arena_bytes(flatbuffers::GetRoot<fb::Tokenizer>(table.data())));
  Arena arena(mem.data(), mem.size());
  text::Tokenizer tok;
  EXPECT_EQ(tok.init(flatbuffers::GetRoot<fb::Tokenizer>(table.data()), arena).status(), Status::ModelBadTokenizer);

  src.bos_id = -1;
  src.merges = {"a c"};  // names a token that does not exist
  table = build_tokenizer_table(src);
  arena.reset(mem.data(), mem.size());
  const Error e = tok.init(flatbuffers::GetRoot<fb::Tokenizer>(table.data()), arena);
  EXPECT_EQ(e.status(), Status::ModelBadTokenizer);
  EXPECT_NE(std::string(e.message()).find("a c"), std::string::npos) << e.message();

  src.merges = {"a b"};
  table = build_tokenizer_table(src);
  std::vector<uint8_t> tiny(64);
  Arena small(tiny.data(), tiny.size());
  EXPECT_EQ(tok.init(flatbuffers::GetRoot<fb::Tokenizer>(table.data()), small).status(), Status::ArenaTooSmall);
  EXPECT_EQ(tok.init(nullptr, small).status(), Status::ModelMissingField);
}

}  // namespace
}  // namespace keel::test
