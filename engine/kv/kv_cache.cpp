#include "kv/kv_cache.h"

#include "core/check.h"

namespace keel {

Error KvCache::init(const KvShape& s, Arena& persistent) {
  const uint64_t elems = uint64_t(s.n_layers) * s.n_kv_heads * s.capacity * s.head_dim;
  const uint64_t need = kv_cache_bytes(s);
  const uint64_t avail = persistent.capacity() - persistent.used();
  KEEL_ENSURE(need <= avail, Status::ArenaTooSmall, "KV cache needs %llu bytes; persistent arena has %llu left",
              (unsigned long long)need, (unsigned long long)avail);
  keys_ = persistent.allocate_array<uint16_t>(elems * 2);
  positions_ = persistent.allocate_array<int32_t>(uint64_t(s.n_layers) * s.n_kv_heads * s.capacity);
  KEEL_ENSURE(keys_ && positions_, Status::ArenaTooSmall, "KV cache needs %llu bytes; persistent arena too small",
              (unsigned long long)need);
  values_ = keys_ + elems;
  shape_ = s;
  clear();
  return Error();
}

}  // namespace keel
