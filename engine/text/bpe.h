// Byte-level BPE of one word (GPT-2 / Hugging Face semantics): the word's bytes start as the
// tokens of their alphabet characters; the adjacent pair with the lowest merge rank is merged,
// leftmost first among equal ranks, until no pair merges.
#pragma once

#include <cstddef>
#include <cstdint>

#include "text/merge_table.h"
#include "text/merge_work.h"

namespace keel::text {

// `byte_token[b]` is the token of byte b's alphabet character (-1 drops the byte, as the
// reference does for characters missing from the vocabulary). n <= kMaxWordBytes.
// The merges alone: scratch.symbols holds the final symbols, a list from index 0 linked by
// `next`, each covering word[start, start + len). False when no byte of the word has a token.
bool bpe_merge_word(const uint8_t* word, size_t n, const int32_t* byte_token, const MergeTable& merges,
                    WordScratch& scratch);
void bpe_encode_word(const uint8_t* word, size_t n, const int32_t* byte_token, const MergeTable& merges,
                     WordScratch& scratch, TokenSink& sink);

}  // namespace keel::text
