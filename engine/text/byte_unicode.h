// The GPT-2 byte-level alphabet: every byte is shown as a printable code point so that BPE
// works on text. Bytes '!'..'~', U+00A1..U+00AC and U+00AE..U+00FF stand for themselves; the
// other 68 bytes (controls, space, U+00AD) become U+0100, U+0101, ... in increasing byte order.
#pragma once

#include <cstdint>

namespace keel::text {

constexpr bool byte_is_self_mapped(uint32_t b) {
  return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

constexpr uint32_t kSubstituteBytes = 68;  // bytes that are not self-mapped

struct ByteAlphabet {
  uint16_t code_point[256];               // byte -> code point
  uint8_t substituted[kSubstituteBytes];  // (code point - 0x100) -> byte
};

constexpr ByteAlphabet make_byte_alphabet() {
  ByteAlphabet a{};
  uint32_t n = 0;
  for (uint32_t b = 0; b < 256; ++b) {
    if (byte_is_self_mapped(b)) {
      a.code_point[b] = uint16_t(b);
    } else {
      a.code_point[b] = uint16_t(0x100 + n);
      a.substituted[n++] = uint8_t(b);
    }
  }
  return a;
}

inline constexpr ByteAlphabet kByteAlphabet = make_byte_alphabet();

// Code point that stands for byte `b`.
constexpr uint32_t byte_to_code_point(uint8_t b) { return kByteAlphabet.code_point[b]; }

// Byte that code point `cp` stands for, or -1 when `cp` is not in the alphabet.
constexpr int code_point_to_byte(uint32_t cp) {
  if (cp < 0x100) return byte_is_self_mapped(cp) ? int(cp) : -1;
  if (cp >= 0x100 + kSubstituteBytes) return -1;
  return kByteAlphabet.substituted[cp - 0x100];
}

static_assert(byte_to_code_point(' ') == 0x120, "space is shown as U+0120");
static_assert(byte_to_code_point('\n') == 0x10A, "newline is shown as U+010A");
static_assert(code_point_to_byte(0x143) == 0xAD, "the last substitute stands for U+00AD");

}  // namespace keel::text
