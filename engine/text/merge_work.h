// Working memory for merging the symbols of one word (byte-level BPE and SentencePiece BPE):
// the symbols as a linked list over an array, and a min-heap of candidate pairs. Both live in
// scratch memory sized for kMaxWordBytes symbols.
#pragma once

#include <cstddef>
#include <cstdint>

namespace keel::text {

// Longest word merged as a whole, in bytes (after SentencePiece's space -> U+2581 rewrite).
// A longer pre-token is merged in pieces of at most this many bytes, cut where no token reaches
// across (word_cut.h), which leaves the ids those of merging it whole, as the reference
// tokenizers do; only a stretch with no such place within reach is cut where it must be, and
// only then can the ids differ (docs/format.md, "Tokenizers").
constexpr size_t kMaxWordBytes = 1024;
// Each merge pushes at most two pairs, so a word of n symbols pushes fewer than 3n.
constexpr size_t kMaxHeapPairs = 3 * kMaxWordBytes;

struct Symbol {
  int32_t id;      // byte-level BPE: current token; SentencePiece: unused
  uint16_t start;  // first byte in the word
  uint16_t len;    // bytes covered; 0 once merged into its left neighbour
  int16_t prev;    // index of the previous live symbol, -1 at the start
  int16_t next;    // index of the next live symbol, -1 at the end
};

// A candidate merge of symbol `left` with its right neighbour, ordered by (priority, left):
// lower priority first, then leftmost. `bytes` is the span of the pair when it was pushed; a
// pair whose span changed since is stale (one side has merged with something else).
struct PairKey {
  static uint64_t make(uint32_t priority, uint32_t left, uint32_t bytes) {
    return (uint64_t(priority) << 32) | (uint64_t(left & 0xFFFF) << 16) | (bytes & 0xFFFF);
  }
  static uint32_t left(uint64_t k) { return uint32_t(k >> 16) & 0xFFFF; }
  static uint32_t bytes(uint64_t k) { return uint32_t(k) & 0xFFFF; }
};
static_assert(kMaxWordBytes <= 0x7FFF, "symbol indices and spans must fit 16 bits");

// Binary min-heap of PairKey values over caller memory.
class PairHeap {
 public:
  PairHeap(uint64_t* mem, size_t capacity) : a_(mem), cap_(capacity) {}
  bool empty() const { return n_ == 0; }
  void push(uint64_t k) {
    if (n_ == cap_) return;  // unreachable when sized kMaxHeapPairs for kMaxWordBytes symbols
    size_t i = n_++;
    while (i > 0) {
      const size_t parent = (i - 1) / 2;
      if (a_[parent] <= k) break;
      a_[i] = a_[parent];
      i = parent;
    }
    a_[i] = k;
  }
  uint64_t pop() {
    const uint64_t top = a_[0];
    const uint64_t last = a_[--n_];
    size_t i = 0;
    for (;;) {
      size_t c = 2 * i + 1;
      if (c >= n_) break;
      if (c + 1 < n_ && a_[c + 1] < a_[c]) ++c;
      if (last <= a_[c]) break;
      a_[i] = a_[c];
      i = c;
    }
    if (n_ > 0) a_[i] = last;
    return top;
  }

 private:
  uint64_t* a_;
  size_t cap_;
  size_t n_ = 0;
};

// Where encoded ids go: written while they fit, counted always, so that a caller whose buffer
// is too small learns how many ids the text needs.
struct TokenSink {
  int32_t* out;
  size_t capacity;
  size_t count = 0;
  void push(int32_t id) {
    if (count < capacity) out[count] = id;
    ++count;
  }
};

// Scratch for one word: symbols, heap and (SentencePiece) the rewritten word text.
struct WordScratch {
  Symbol* symbols;  // [kMaxWordBytes]
  uint64_t* heap;   // [kMaxHeapPairs]
  uint8_t* text;    // [kMaxWordBytes]
};

}  // namespace keel::text
