// Hand-written pre-tokenizers against the regexes of the Hugging Face reference
// (tests/reference/pretokenize_golden.py), the Unicode class table and the byte alphabet.
#include "text/pretokenize.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "support/test_support.h"
#include "text/byte_unicode.h"
#include "text/unicode_tables.h"
#include "text/utf8.h"

namespace keel::test {
namespace {

using text::CharClass;

std::vector<std::string> split(fb::PreTokenizer kind, const std::string& s) {
  std::vector<std::string> out;
  text::PreTokenIterator it(kind, reinterpret_cast<const uint8_t*>(s.data()), s.size());
  size_t begin, len;
  while (it.next(&begin, &len)) out.push_back(s.substr(begin, len));
  return out;
}

TEST(PreTokenize, MatchesReferenceSplits) {
  std::ifstream f(require_file(source_path("tests/golden/pretokenize_splits.json")));
  const nlohmann::json g = nlohmann::json::parse(f, nullptr, false);
  ASSERT_FALSE(g.is_discarded());
  const std::pair<const char*, fb::PreTokenizer> kinds[] = {
      {"Gpt2", fb::PreTokenizer::Gpt2},
      {"SmolLM", fb::PreTokenizer::SmolLM},
      {"Llama3", fb::PreTokenizer::Llama3},
      {"Qwen2", fb::PreTokenizer::Qwen2},
  };
  size_t checked = 0, matched = 0;
  for (const auto& e : g["entries"]) {
    const std::string text = e["text"].get<std::string>();
    for (const auto& [name, kind] : kinds) {
      const auto want = e["splits"][name].get<std::vector<std::string>>();
      const auto got = split(kind, text);
      ++checked;
      if (got == want) ++matched;
      EXPECT_EQ(got, want) << name << " on " << nlohmann::json(text).dump();
    }
  }
  std::printf("[ splits   ] %zu / %zu (text, pre-tokenizer) pairs match the reference\n", matched, checked);
  EXPECT_GE(checked, 4u * 80u);
}

TEST(PreTokenize, NoneIsOnePiece) {
  EXPECT_EQ(split(fb::PreTokenizer::None, "a b  c"), (std::vector<std::string>{"a b  c"}));
  EXPECT_TRUE(split(fb::PreTokenizer::Gpt2, "").empty());
}

TEST(PreTokenize, IllFormedBytesArePunctuation) {
  EXPECT_EQ(split(fb::PreTokenizer::Gpt2, "ab\xff\xfe cd \x80"),
            (std::vector<std::string>{"ab", "\xff\xfe", " cd", " \x80"}));
  EXPECT_EQ(split(fb::PreTokenizer::Llama3, "\xc3x"), (std::vector<std::string>{"\xc3x"}));
}

TEST(UnicodeTables, Classes) {
  EXPECT_STREQ(text::kUnicodeVersion, "14.0.0");
  EXPECT_EQ(text::char_class('a'), CharClass::Letter);
  EXPECT_EQ(text::char_class('7'), CharClass::Number);
  EXPECT_EQ(text::char_class(' '), CharClass::Space);
  EXPECT_EQ(text::char_class('\t'), CharClass::Space);
  EXPECT_EQ(text::char_class('\x1c'), CharClass::Other);  // not White_Space (Python: isspace)
  EXPECT_EQ(text::char_class(0x85), CharClass::Space);
  EXPECT_EQ(text::char_class(0xA0), CharClass::Space);
  EXPECT_EQ(text::char_class(0x3000), CharClass::Space);
  EXPECT_EQ(text::char_class(0x200B), CharClass::Other);   // zero width space is Cf
  EXPECT_EQ(text::char_class(0x4E2D), CharClass::Letter);  // 中
  EXPECT_EQ(text::char_class(0x0663), CharClass::Number);  // Arabic-Indic three
  EXPECT_EQ(text::char_class(0x2460), CharClass::Number);  // circled one (No)
  EXPECT_EQ(text::char_class(0x216B), CharClass::Number);  // Roman numeral twelve (Nl)
  EXPECT_EQ(text::char_class(0x0301), CharClass::Other);   // combining acute (Mn)
  EXPECT_EQ(text::char_class(0x1F999), CharClass::Other);  // llama emoji (So)
  EXPECT_EQ(text::char_class(0x10FFFF), CharClass::Other);
  EXPECT_EQ(text::char_class(0x110000), CharClass::Other);
  EXPECT_EQ(text::char_class(text::kInvalidCodePoint), CharClass::Other);
}

TEST(ByteAlphabet, IsABijection) {
  for (int b = 0; b < 256; ++b) {
    const uint32_t cp = text::byte_to_code_point(uint8_t(b));
    EXPECT_EQ(text::code_point_to_byte(cp), b);
  }
  EXPECT_EQ(text::byte_to_code_point('A'), uint32_t('A'));
  EXPECT_EQ(text::byte_to_code_point(0), 0x100u);
  EXPECT_EQ(text::code_point_to_byte(0x20), -1);  // space is shown as U+0120, not itself
  EXPECT_EQ(text::code_point_to_byte(0x144), -1);
}

TEST(Utf8, DecodeIsStrict) {
  auto dec = [](const char* s, size_t n) { return text::utf8_decode(reinterpret_cast<const uint8_t*>(s), n); };
  EXPECT_EQ(dec("\xE2\x82\xAC", 3).cp, 0x20ACu);
  EXPECT_EQ(dec("\xF0\x9F\xA6\x99", 4).cp, 0x1F999u);
  EXPECT_EQ(dec("\xC0\xAF", 2).cp, text::kInvalidCodePoint);          // overlong
  EXPECT_EQ(dec("\xED\xA0\x80", 3).cp, text::kInvalidCodePoint);      // surrogate
  EXPECT_EQ(dec("\xF4\x90\x80\x80", 4).cp, text::kInvalidCodePoint);  // > U+10FFFF
  EXPECT_EQ(dec("\xE2\x82", 2).len, 1u);                              // truncated
}

}  // namespace
}  // namespace keel::test
