// Character classes the pre-tokenizer patterns are written in. The table is generated from the
// Unicode Character Database by tests/reference/make_unicode_tables.py (version below).
#pragma once

#include <cstddef>
#include <cstdint>

namespace keel::text {

// Disjoint: every code point is in exactly one class.
enum class CharClass : uint8_t {
  Other = 0,   // [^\s\p{L}\p{N}]
  Letter = 1,  // \p{L}: Lu Ll Lt Lm Lo
  Number = 2,  // \p{N}: Nd Nl No
  Space = 3,   // \s: the White_Space property
};

extern const char* const kUnicodeVersion;

// Class of a code point; anything above U+10FFFF (including kInvalidCodePoint) is Other.
CharClass char_class(uint32_t cp);

}  // namespace keel::text
