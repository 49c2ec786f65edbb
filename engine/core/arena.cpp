#include "core/arena.h"

namespace keel {

void Arena::reset(void* base, size_t capacity) {
  base_ = static_cast<uint8_t*>(base);
  capacity_ = base ? capacity : 0;
  used_ = 0;
  high_water_ = 0;
}

void* Arena::allocate(size_t bytes, size_t align) {
  if (align == 0 || (align & (align - 1)) != 0) return nullptr;
  const uintptr_t base = reinterpret_cast<uintptr_t>(base_);
  const uintptr_t cur = base + used_;
  const uintptr_t aligned = (cur + align - 1) & ~(uintptr_t(align) - 1);
  const size_t pad = aligned - cur;
  if (pad > capacity_ - used_ || bytes > capacity_ - used_ - pad) return nullptr;
  used_ += pad + bytes;
  if (used_ > high_water_) high_water_ = used_;
  return reinterpret_cast<void*>(aligned);
}

}  // namespace keel
