// Byte-level BPE merges: (left id, right id) -> (rank, merged id). Rank is the index of the
// merge in the model's list; a lower rank merges first. Open addressing over rank numbers,
// capacity the power of two >= 2 x merges.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/arena.h"
#include "core/status.h"
#include "text/vocab_index.h"

namespace keel::text {

class MergeTable {
 public:
  static size_t arena_bytes(size_t n_merges);

  // `merges` (may be null: no merges) holds "left right" strings. A merge whose halves or concatenation are not tokens
  // is a ModelBadTokenizer error, as it is for the Hugging Face loader. A pair listed twice
  // keeps its later rank (the Hugging Face map is built by inserting in order).
  Error init(const TokenStrings* merges, const VocabIndex& vocab, Arena& arena);

  // True when (left, right) merges; then *rank and *merged are set.
  bool find(int32_t left, int32_t right, uint32_t* rank, int32_t* merged) const;

 private:
  int32_t* left_ = nullptr;    // [n_merges]
  int32_t* right_ = nullptr;   // [n_merges]
  int32_t* merged_ = nullptr;  // [n_merges]
  int32_t* slots_ = nullptr;   // [capacity], rank or -1
  size_t mask_ = 0;
};

}  // namespace keel::text
