// Token text -> id, an open-addressing hash table over the token strings of the model image
// (the strings are not copied; slots hold ids). Capacity is the power of two >= 2 x tokens, so
// the load factor stays <= 1/2 and unsuccessful probes, the common case while merging, are short.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/arena.h"
#include "keel_generated.h"

namespace keel::text {

using TokenStrings = flatbuffers::Vector<flatbuffers::Offset<flatbuffers::String>>;

uint64_t hash_bytes(const uint8_t* a, size_t na, const uint8_t* b, size_t nb);

class VocabIndex {
 public:
  static size_t capacity_for(size_t n_tokens);
  static size_t arena_bytes(size_t n_tokens);

  // Returns false when the arena is too small. Duplicate texts keep the lowest id.
  bool init(const TokenStrings* tokens, Arena& arena);

  // Id of the token whose text is a[0..na) followed by b[0..nb), or -1.
  int32_t find(const uint8_t* a, size_t na, const uint8_t* b = nullptr, size_t nb = 0) const;
  // The same for s[0..n), given `fnv`, the FNV-1a state after s[0..n) (kFnvStart extended by
  // each byte): a caller looking up every prefix of a string hashes each byte once.
  int32_t find_hashed(uint64_t fnv, const uint8_t* s, size_t n) const;
  static constexpr uint64_t kFnvStart = 0xcbf29ce484222325ull;
  static uint64_t fnv_extend(uint64_t h, uint8_t b) { return (h ^ b) * 0x100000001b3ull; }
  const flatbuffers::String* text(int32_t id) const { return tokens_->Get(uint32_t(id)); }

 private:
  const TokenStrings* tokens_ = nullptr;
  int32_t* slots_ = nullptr;  // [capacity_], -1 = empty
  size_t mask_ = 0;
};

}  // namespace keel::text
