// Where a word too long for the merge scratch (kMaxWordBytes) may be cut without changing its
// tokens.
//
// Merging (byte-level BPE and SentencePiece BPE alike) only ever joins two adjacent symbols into
// a token of the vocabulary, and a symbol always spells the text it covers. So if no token that
// merging can form is spelled by a stretch of the text that starts before byte offset b and ends
// after it ("covers b"), no symbol ever spans b, no candidate pair ever straddles it, and the
// merges on each side are exactly those of merging the whole word, in the same relative order
// (priorities are the same; ties go to the leftmost pair on both sides alike). Encoding
// [0, b) and then [b, n) therefore gives the ids of encoding [0, n) at once: such a b is a safe
// cut. A word with no safe cut in reach is the one case where a cut may still change the ids.
//
// The test reads only text[b - L + 1, b + L - 1] for tokens of at most L bytes; spans are tried
// at every byte offset, not only at character starts, so that ill-formed UTF-8 and byte-level
// tokens that end inside a character are covered too.
#pragma once

#include <cstddef>

namespace keel::text {

// `token_end(i, e_min, e_max)` returns the largest e in [e_min, e_max] such that text[i, e) is a
// token merging can form, or 0 when there is none (e_min > i always). `end` is where the text
// available to the test stops: the true end of the word, or a point at least L - 1 bytes past
// every boundary tried. Returns the largest safe cut b in [lo, hi] (0 < lo <= hi <= end) for
// which is_start(b) (a first symbol starts at b), or 0. Cost: (hi - lo + L) calls of token_end,
// each over at most L ends.
template <typename TokenEnd, typename IsStart>
size_t last_safe_cut(size_t end, size_t lo, size_t hi, size_t max_token_bytes, TokenEnd&& token_end,
                     IsStart&& is_start) {
  const size_t first = lo >= max_token_bytes ? lo - max_token_bytes + 1 : 0;
  // reach = the furthest end of a token starting before the boundary under test; tokens
  // starting before `first` are at most max_token_bytes long and so end at or before lo.
  size_t reach = 0, best = 0;
  for (size_t i = first; i < hi; ++i) {
    const size_t b = i + 1;  // boundary tested once the starts i' < b are all in `reach`
    const size_t e_max = i + max_token_bytes < end ? i + max_token_bytes : end;
    if (e_max > b && e_max > lo) {
      const size_t e_min = b + 1 > lo + 1 ? b + 1 : lo + 1;
      if (e_min <= e_max) {
        const size_t e = token_end(i, e_min, e_max);
        if (e > reach) reach = e;
      }
    }
    if (b >= lo && reach <= b && is_start(b)) best = b;
  }
  return best;
}

// Whether boundary b is a safe cut, testing only the tokens that start in [b - L + 1, b).
template <typename TokenEnd>
bool is_safe_cut(size_t end, size_t b, size_t max_token_bytes, TokenEnd&& token_end) {
  const size_t first = b >= max_token_bytes ? b - max_token_bytes + 1 : 0;
  for (size_t i = first; i < b; ++i) {
    const size_t e_max = i + max_token_bytes < end ? i + max_token_bytes : end;
    if (e_max > b && token_end(i, b + 1, e_max) != 0) return false;
  }
  return true;
}

}  // namespace keel::text
