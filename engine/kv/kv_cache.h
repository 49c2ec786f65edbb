// The KV cache of one sequence (slot): for every layer and KV head, up to `capacity` cached
// tokens, each with its key (rotated at its position), its value and its original position.
// Every (layer, head) holds the same number of entries; which tokens they are may differ per
// head (SnapKV selects per KV head). Storage is IEEE half.
#pragma once

#include <cstdint>

#include "core/arena.h"
#include "core/result.h"

namespace keel {

struct KvShape {
  uint32_t n_layers = 0;
  uint32_t n_kv_heads = 0;
  uint32_t head_dim = 0;
  uint32_t capacity = 0;  // entries per (layer, head)
};

constexpr uint64_t kv_cache_bytes(const KvShape& s) {
  const uint64_t heads = uint64_t(s.n_layers) * s.n_kv_heads;
  const uint64_t kv = heads * s.capacity * s.head_dim * 2 /* f16 */ * 2 /* K and V */;
  const uint64_t pos = heads * s.capacity * 4;
  return ((kv + 63) / 64) * 64 + ((pos + 63) / 64) * 64;
}

class KvCache {
 public:
  Error init(const KvShape& shape, Arena& persistent);

  const KvShape& shape() const { return shape_; }
  uint32_t size() const { return size_; }          // entries per (layer, head)
  int64_t next_position() const { return next_pos_; }  // position of the next token appended
  void clear() {
    size_ = 0;
    next_pos_ = 0;
  }

  // [capacity][head_dim] halves of (layer, head)
  uint16_t* keys(uint32_t layer, uint32_t head) { return keys_ + slab(layer, head) * shape_.head_dim; }
  uint16_t* values(uint32_t layer, uint32_t head) { return values_ + slab(layer, head) * shape_.head_dim; }
  // [capacity] original positions of (layer, head)
  int32_t* positions(uint32_t layer, uint32_t head) { return positions_ + slab(layer, head); }

  // Bookkeeping after a forward pass appended `n` tokens to every (layer, head).
  void commit(uint32_t n) {
    size_ += n;
    next_pos_ += n;
  }
  // After a policy compacted every (layer, head) to `n` entries.
  void set_size(uint32_t n) { size_ = n; }

 private:
  uint64_t slab(uint32_t layer, uint32_t head) const {
    return (uint64_t(layer) * shape_.n_kv_heads + head) * shape_.capacity;
  }
  KvShape shape_;
  uint16_t* keys_ = nullptr;
  uint16_t* values_ = nullptr;
  int32_t* positions_ = nullptr;
  uint32_t size_ = 0;
  int64_t next_pos_ = 0;
};

}  // namespace keel
