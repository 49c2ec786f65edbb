#include "text/bpe.h"

namespace keel::text {
namespace {

void push_pair(const Symbol* sym, int32_t left, const MergeTable& merges, PairHeap& heap) {
  if (left < 0) return;
  const int32_t right = sym[left].next;
  if (right < 0) return;
  uint32_t rank;
  int32_t merged;
  if (!merges.find(sym[left].id, sym[right].id, &rank, &merged)) return;
  heap.push(PairKey::make(rank, uint32_t(left), uint32_t(sym[left].len) + sym[right].len));
}

}  // namespace

bool bpe_merge_word(const uint8_t* word, size_t n, const int32_t* byte_token, const MergeTable& merges,
                    WordScratch& scratch) {
  Symbol* sym = scratch.symbols;
  int32_t count = 0;
  for (size_t i = 0; i < n && i < kMaxWordBytes; ++i) {
    const int32_t id = byte_token[word[i]];
    if (id < 0) continue;
    sym[count] = Symbol{id, uint16_t(i), 1, int16_t(count - 1), int16_t(count + 1)};
    ++count;
  }
  if (count == 0) return false;
  sym[count - 1].next = -1;

  PairHeap heap(scratch.heap, kMaxHeapPairs);
  for (int32_t i = 0; i + 1 < count; ++i) push_pair(sym, i, merges, heap);
  while (!heap.empty()) {
    const uint64_t k = heap.pop();
    const int32_t left = int32_t(PairKey::left(k));
    Symbol& l = sym[left];
    if (l.len == 0 || l.next < 0) continue;
    Symbol& r = sym[l.next];
    if (uint32_t(l.len) + r.len != PairKey::bytes(k)) continue;
    uint32_t rank;
    int32_t merged;
    if (!merges.find(l.id, r.id, &rank, &merged)) continue;
    l.id = merged;
    l.len = uint16_t(l.len + r.len);
    r.len = 0;
    l.next = r.next;
    if (l.next >= 0) sym[l.next].prev = int16_t(left);
    push_pair(sym, l.prev, merges, heap);
    push_pair(sym, left, merges, heap);
  }
  return true;
}

void bpe_encode_word(const uint8_t* word, size_t n, const int32_t* byte_token, const MergeTable& merges,
                     WordScratch& scratch, TokenSink& sink) {
  if (!bpe_merge_word(word, n, byte_token, merges, scratch)) return;
  for (int32_t i = 0; i >= 0; i = scratch.symbols[i].next) sink.push(scratch.symbols[i].id);
}

}  // namespace keel::text
