// Pre-tokenizers: split text into the pieces BPE merges inside, by hand-written matchers that
// reproduce the split regexes of the Hugging Face tokenizer.json of each family (the engine has
// no regex library). Alternatives are tried in order at the current position, as a backtracking
// regex engine does; every character is covered by some alternative, so pieces tile the text.
//
//   Gpt2:   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//   SmolLM: Digits(individual_digits) first, then Gpt2 inside each non-digit run
//   Llama3: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}
//           | ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//   Qwen2:  as Llama3 with \p{N} (one digit per piece)
//   None:   the whole text is one piece
//
// Bytes that are not well-formed UTF-8 count as one [^\s\p{L}\p{N}] character each. The case
// folding of (?i:...) is ASCII only. Qwen2's NFC normalizer is not applied: input is expected
// in NFC already.
#pragma once

#include <cstddef>
#include <cstdint>

#include "keel_generated.h"

namespace keel::text {

// Length in bytes of the first pre-token of s[0..n) (n >= 1; result in 1..n).
size_t match_gpt2(const uint8_t* s, size_t n);
// Llama3 with max_digits = 3, Qwen2 with max_digits = 1.
size_t match_llama3(const uint8_t* s, size_t n, uint32_t max_digits);

class PreTokenIterator {
 public:
  PreTokenIterator(fb::PreTokenizer kind, const uint8_t* s, size_t n) : kind_(kind), s_(s), n_(n) {}
  // The next piece is s[*begin, *begin + *len); false when the text is exhausted.
  bool next(size_t* begin, size_t* len);

 private:
  fb::PreTokenizer kind_;
  const uint8_t* s_;
  size_t n_;
  size_t pos_ = 0;
  size_t run_end_ = 0;  // SmolLM: end of the current non-digit run
};

}  // namespace keel::text
