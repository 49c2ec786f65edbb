// UTF-8 decoding and encoding of single code points, strict per RFC 3629 (no overlongs, no
// surrogates, nothing above U+10FFFF). Header-only; used by the tokenizers and the decoder.
#pragma once

#include <cstddef>
#include <cstdint>

namespace keel::text {

constexpr uint32_t kInvalidCodePoint = 0xFFFFFFFFu;
constexpr uint32_t kReplacementChar = 0xFFFD;

// Bytes a well-formed sequence starting with `lead` has; 0 when `lead` cannot start one.
constexpr uint32_t utf8_sequence_length(uint8_t lead) {
  if (lead < 0x80) return 1;
  if (lead >= 0xC2 && lead <= 0xDF) return 2;
  if (lead >= 0xE0 && lead <= 0xEF) return 3;
  if (lead >= 0xF0 && lead <= 0xF4) return 4;
  return 0;
}

// Whether `b` may follow `lead` as the second byte of a sequence (the first continuation byte
// has a narrower range after E0, ED, F0 and F4). Later continuation bytes are 80..BF.
constexpr bool utf8_valid_second(uint8_t lead, uint8_t b) {
  switch (lead) {
    case 0xE0: return b >= 0xA0 && b <= 0xBF;
    case 0xED: return b >= 0x80 && b <= 0x9F;
    case 0xF0: return b >= 0x90 && b <= 0xBF;
    case 0xF4: return b >= 0x80 && b <= 0x8F;
    default: return b >= 0x80 && b <= 0xBF;
  }
}

// Bytes of the character a byte leads, by its top four bits alone (1 for ASCII and for a
// continuation byte, 2, 3 or 4 for a lead byte), however the bytes after it look: how
// llama.cpp's SentencePiece tokenizer cuts text into its first symbols, well-formed or not.
inline uint32_t utf8_lead_length(uint8_t b) {
  static constexpr uint8_t kByTopBits[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kByTopBits[b >> 4];
}

struct DecodedChar {
  uint32_t cp;   // kInvalidCodePoint for an ill-formed byte
  uint32_t len;  // bytes consumed, >= 1 (an ill-formed byte is consumed alone)
};

// Decodes the code point at s[0..n), n >= 1.
inline DecodedChar utf8_decode(const uint8_t* s, size_t n) {
  const uint8_t b0 = s[0];
  const uint32_t len = utf8_sequence_length(b0);
  if (len == 1) return {b0, 1};
  if (len == 0 || len > n || !utf8_valid_second(b0, s[1])) return {kInvalidCodePoint, 1};
  for (uint32_t i = 2; i < len; ++i) {
    if ((s[i] & 0xC0) != 0x80) return {kInvalidCodePoint, 1};
  }
  uint32_t cp = b0 & (0x7F >> len);
  for (uint32_t i = 1; i < len; ++i) cp = (cp << 6) | (s[i] & 0x3F);
  return {cp, len};
}

// Writes the encoding of `cp` (<= U+10FFFF, not a surrogate) to out[0..4); returns its length.
inline uint32_t utf8_encode(uint32_t cp, uint8_t* out) {
  if (cp < 0x80) {
    out[0] = uint8_t(cp);
    return 1;
  }
  if (cp < 0x800) {
    out[0] = uint8_t(0xC0 | (cp >> 6));
    out[1] = uint8_t(0x80 | (cp & 0x3F));
    return 2;
  }
  if (cp < 0x10000) {
    out[0] = uint8_t(0xE0 | (cp >> 12));
    out[1] = uint8_t(0x80 | ((cp >> 6) & 0x3F));
    out[2] = uint8_t(0x80 | (cp & 0x3F));
    return 3;
  }
  out[0] = uint8_t(0xF0 | (cp >> 18));
  out[1] = uint8_t(0x80 | ((cp >> 12) & 0x3F));
  out[2] = uint8_t(0x80 | ((cp >> 6) & 0x3F));
  out[3] = uint8_t(0x80 | (cp & 0x3F));
  return 4;
}

// True when s[0..n) is well-formed UTF-8.
inline bool utf8_valid(const uint8_t* s, size_t n) {
  size_t i = 0;
  while (i < n) {
    const DecodedChar c = utf8_decode(s + i, n - i);
    if (c.cp == kInvalidCodePoint) return false;
    i += c.len;
  }
  return true;
}

}  // namespace keel::text
