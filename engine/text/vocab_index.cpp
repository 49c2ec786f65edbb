#include "text/vocab_index.h"

#include <cstring>

namespace keel::text {

namespace {

// A 64-bit finalizer over the FNV-1a state, so that the low bits used as the slot index depend
// on every input byte.
uint64_t finish_hash(uint64_t h) {
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  return h;
}

}  // namespace

uint64_t hash_bytes(const uint8_t* a, size_t na, const uint8_t* b, size_t nb) {
  uint64_t h = VocabIndex::kFnvStart;
  for (size_t i = 0; i < na; ++i) h = VocabIndex::fnv_extend(h, a[i]);
  for (size_t i = 0; i < nb; ++i) h = VocabIndex::fnv_extend(h, b[i]);
  return finish_hash(h);
}

size_t VocabIndex::capacity_for(size_t n_tokens) {
  size_t cap = 16;
  while (cap < 2 * n_tokens) cap *= 2;
  return cap;
}

size_t VocabIndex::arena_bytes(size_t n_tokens) { return capacity_for(n_tokens) * sizeof(int32_t) + alignof(int32_t); }

bool VocabIndex::init(const TokenStrings* tokens, Arena& arena) {
  tokens_ = tokens;
  const size_t n = tokens->size();
  const size_t cap = capacity_for(n);
  slots_ = arena.allocate_array<int32_t>(cap, alignof(int32_t));
  if (!slots_) return false;
  mask_ = cap - 1;
  for (size_t i = 0; i < cap; ++i) slots_[i] = -1;
  for (size_t id = 0; id < n; ++id) {
    const flatbuffers::String* s = tokens->Get(uint32_t(id));
    const uint8_t* p = reinterpret_cast<const uint8_t*>(s->data());
    size_t slot = size_t(hash_bytes(p, s->size(), nullptr, 0)) & mask_;
    bool duplicate = false;
    while (slots_[slot] >= 0) {
      const flatbuffers::String* o = tokens->Get(uint32_t(slots_[slot]));
      if (o->size() == s->size() && memcmp(o->data(), p, s->size()) == 0) {
        duplicate = true;
        break;
      }
      slot = (slot + 1) & mask_;
    }
    if (!duplicate) slots_[slot] = int32_t(id);
  }
  return true;
}

int32_t VocabIndex::find_hashed(uint64_t fnv, const uint8_t* s, size_t n) const {
  if (!slots_) return -1;
  for (size_t slot = size_t(finish_hash(fnv)) & mask_;; slot = (slot + 1) & mask_) {
    const int32_t id = slots_[slot];
    if (id < 0) return -1;
    const flatbuffers::String* t = tokens_->Get(uint32_t(id));
    if (t->size() == n && memcmp(t->data(), s, n) == 0) return id;
  }
}

int32_t VocabIndex::find(const uint8_t* a, size_t na, const uint8_t* b, size_t nb) const {
  if (!slots_) return -1;
  size_t slot = size_t(hash_bytes(a, na, b, nb)) & mask_;
  const size_t total = na + nb;
  for (;;) {
    const int32_t id = slots_[slot];
    if (id < 0) return -1;
    const flatbuffers::String* s = tokens_->Get(uint32_t(id));
    if (s->size() == total && (na == 0 || memcmp(s->data(), a, na) == 0) &&
        (nb == 0 || memcmp(s->data() + na, b, nb) == 0)) {
      return id;
    }
    slot = (slot + 1) & mask_;
  }
}

}  // namespace keel::text
