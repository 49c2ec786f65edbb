#include "text/spm.h"

#include <cstring>

#include "text/utf8.h"

namespace keel::text {
namespace {

// Order-preserving map of a float to uint32, inverted so that the highest score is smallest.
uint32_t priority_of_score(float s) {
  uint32_t u;
  memcpy(&u, &s, 4);
  u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
  return ~u;
}

void push_pair(const uint8_t* word, const Symbol* sym, int32_t left, const SpmVocab& v, PairHeap& heap) {
  if (left < 0) return;
  const int32_t right = sym[left].next;
  if (right < 0) return;
  const uint32_t bytes = uint32_t(sym[left].len) + sym[right].len;
  const int32_t id = v.index->find(word + sym[left].start, bytes);
  if (id < 0 || !v.usable(id)) return;
  heap.push(PairKey::make(priority_of_score(v.score(id)), uint32_t(left), bytes));
}

}  // namespace

bool SpmVocab::usable(int32_t id) const {
  if (types) {
    switch (types->Get(uint32_t(id))) {
      case fb::TokenType::Control:
      case fb::TokenType::Unknown:
      case fb::TokenType::Byte:
      case fb::TokenType::Unused: return false;
      default: break;
    }
  }
  const flatbuffers::String* s = index->text(id);
  return parse_byte_token(s->data(), s->size()) < 0;
}

float SpmVocab::score(int32_t id) const { return scores ? scores->Get(uint32_t(id)) : 0.0f; }

bool spm_merge_word(const uint8_t* word, size_t n, const SpmVocab& v, WordScratch& scratch) {
  Symbol* sym = scratch.symbols;
  int32_t count = 0;
  for (size_t i = 0; i < n && i < kMaxWordBytes;) {
    const uint32_t len = uint32_t(utf8_lead_length(word[i]) < n - i ? utf8_lead_length(word[i]) : n - i);
    sym[count] = Symbol{-1, uint16_t(i), uint16_t(len), int16_t(count - 1), int16_t(count + 1)};
    ++count;
    i += len;
  }
  if (count == 0) return false;
  sym[count - 1].next = -1;

  PairHeap heap(scratch.heap, kMaxHeapPairs);
  for (int32_t i = 0; i + 1 < count; ++i) push_pair(word, sym, i, v, heap);
  while (!heap.empty()) {
    const uint64_t k = heap.pop();
    const int32_t left = int32_t(PairKey::left(k));
    Symbol& l = sym[left];
    if (l.len == 0 || l.next < 0) continue;
    Symbol& r = sym[l.next];
    if (uint32_t(l.len) + r.len != PairKey::bytes(k)) continue;
    l.len = uint16_t(l.len + r.len);
    r.len = 0;
    l.next = r.next;
    if (l.next >= 0) sym[l.next].prev = int16_t(left);
    push_pair(word, sym, l.prev, v, heap);
    push_pair(word, sym, left, v, heap);
  }
  return true;
}

void spm_encode_word(const uint8_t* word, size_t n, const SpmVocab& v, WordScratch& scratch, TokenSink& sink) {
  if (!spm_merge_word(word, n, v, scratch)) return;
  const Symbol* sym = scratch.symbols;
  for (int32_t i = 0; i >= 0; i = sym[i].next) {
    const uint8_t* p = word + sym[i].start;
    const int32_t id = v.index->find(p, sym[i].len);
    if (id >= 0 && v.usable(id)) {
      sink.push(id);
      continue;
    }
    bool have_bytes = true;
    for (uint32_t b = 0; b < sym[i].len; ++b) have_bytes = have_bytes && v.byte_token[p[b]] >= 0;
    if (have_bytes) {
      for (uint32_t b = 0; b < sym[i].len; ++b) sink.push(v.byte_token[p[b]]);
    } else if (v.unk_id >= 0) {
      sink.push(v.unk_id);
    }
  }
}

}  // namespace keel::text
