// SentencePiece BPE of one word (llama.cpp / llama2.c semantics). The word's text has spaces
// already rewritten as U+2581. Symbols start as its UTF-8 characters, cut by their lead bytes
// as llama.cpp cuts them (utf8_lead_length: an ill-formed lead byte takes the bytes after it); the adjacent pair whose
// concatenation is a token with the highest score is merged, leftmost first among equal
// scores, until no pair is a token. A final symbol that is not a token becomes byte-fallback
// tokens <0xNN> for each of its bytes, or one unknown token when the vocabulary lacks one
// of those byte tokens.
#pragma once

#include <cstddef>
#include <cstdint>

#include "keel_generated.h"
#include "text/merge_work.h"
#include "text/vocab_index.h"

namespace keel::text {

struct SpmVocab {
  const VocabIndex* index = nullptr;
  const flatbuffers::Vector<float>* scores = nullptr;         // may be null: all scores 0
  const flatbuffers::Vector<fb::TokenType>* types = nullptr;  // may be null: all Normal
  const int32_t* byte_token = nullptr;                        // [256], -1 where the vocabulary has no <0xNN>
  int32_t unk_id = -1;

  // Tokens text may become: not control, unknown, byte (by type or by text) or unused tokens.
  bool usable(int32_t id) const;
  float score(int32_t id) const;
};

// The byte a SentencePiece byte token "<0xNN>" stands for, or -1 for any other text.
inline int parse_byte_token(const char* s, size_t n) {
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  if (n != 6 || s[0] != '<' || s[1] != '0' || s[2] != 'x' || s[5] != '>') return -1;
  const int hi = hex(s[3]), lo = hex(s[4]);
  return (hi < 0 || lo < 0) ? -1 : hi * 16 + lo;
}

// The merges alone: scratch.symbols holds the final symbols, a list from index 0 linked by
// `next`, each covering word[start, start + len). False for an empty word. n <= kMaxWordBytes.
bool spm_merge_word(const uint8_t* word, size_t n, const SpmVocab& vocab, WordScratch& scratch);
// n <= kMaxWordBytes.
void spm_encode_word(const uint8_t* word, size_t n, const SpmVocab& vocab, WordScratch& scratch, TokenSink& sink);

}  // namespace keel::text
