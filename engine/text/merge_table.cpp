#include "text/merge_table.h"

#include "core/check.h"

namespace keel::text {
namespace {

size_t capacity_for(size_t n) {
  size_t cap = 16;
  while (cap < 2 * n) cap *= 2;
  return cap;
}

size_t pair_slot(int32_t left, int32_t right, size_t mask) {
  uint64_t h = (uint64_t(uint32_t(left)) << 32) | uint32_t(right);
  h ^= h >> 31;
  h *= 0x9e3779b97f4a7c15ull;
  h ^= h >> 29;
  return size_t(h) & mask;
}

}  // namespace

size_t MergeTable::arena_bytes(size_t n_merges) {
  return (3 * n_merges + capacity_for(n_merges)) * sizeof(int32_t) + 4 * alignof(int32_t);
}

Error MergeTable::init(const TokenStrings* merges, const VocabIndex& vocab, Arena& arena) {
  const size_t n = merges ? merges->size() : 0;
  const size_t cap = capacity_for(n);
  left_ = arena.allocate_array<int32_t>(n, alignof(int32_t));
  right_ = arena.allocate_array<int32_t>(n, alignof(int32_t));
  merged_ = arena.allocate_array<int32_t>(n, alignof(int32_t));
  slots_ = arena.allocate_array<int32_t>(cap, alignof(int32_t));
  KEEL_ENSURE(left_ && right_ && merged_ && slots_, Status::ArenaTooSmall, "tokenizer arena too small for %zu merges",
              n);
  mask_ = cap - 1;
  for (size_t i = 0; i < cap; ++i) slots_[i] = -1;
  for (size_t r = 0; r < n; ++r) {
    const flatbuffers::String* m = merges->Get(uint32_t(r));
    const uint8_t* p = reinterpret_cast<const uint8_t*>(m->data());
    const size_t len = m->size();
    int32_t l = -1, rt = -1, merged = -1;
    // Token texts of a byte-level vocabulary hold no 0x20, but try every space to be safe.
    for (size_t sp = 1; sp + 1 < len && merged < 0; ++sp) {
      if (p[sp] != ' ') continue;
      l = vocab.find(p, sp);
      rt = vocab.find(p + sp + 1, len - sp - 1);
      if (l >= 0 && rt >= 0) merged = vocab.find(p, sp, p + sp + 1, len - sp - 1);
    }
    KEEL_ENSURE(merged >= 0, Status::ModelBadTokenizer,
                "merge %zu: expected \"left right\" naming two tokens whose concatenation is a "
                "token, found \"%.*s\"",
                r, int(len < 64 ? len : 64), m->c_str());
    left_[r] = l;
    right_[r] = rt;
    merged_[r] = merged;
    size_t slot = pair_slot(l, rt, mask_);
    while (slots_[slot] >= 0) {
      const int32_t o = slots_[slot];
      if (left_[o] == l && right_[o] == rt) break;
      slot = (slot + 1) & mask_;
    }
    slots_[slot] = int32_t(r);
  }
  return Error();
}

bool MergeTable::find(int32_t left, int32_t right, uint32_t* rank, int32_t* merged) const {
  if (!slots_) return false;
  size_t slot = pair_slot(left, right, mask_);
  for (;;) {
    const int32_t r = slots_[slot];
    if (r < 0) return false;
    if (left_[r] == left && right_[r] == right) {
      *rank = uint32_t(r);
      *merged = merged_[r];
      return true;
    }
    slot = (slot + 1) & mask_;
  }
}

}  // namespace keel::text
