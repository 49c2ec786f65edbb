// Bump allocator over caller-provided memory, with scoped mark/release. The arena never
// calls the system allocator; running out is an ArenaTooSmall status, never a crash.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/span.h"

namespace keel {

constexpr size_t align_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

class Arena {
 public:
  static constexpr size_t kDefaultAlign = 64;

  Arena() = default;
  Arena(void* base, size_t capacity) { reset(base, capacity); }
  void reset(void* base, size_t capacity);

  // Returns nullptr when the request does not fit; `used()` is unchanged then.
  void* allocate(size_t bytes, size_t align = kDefaultAlign);
  template <typename T>
  T* allocate_array(size_t n, size_t align = kDefaultAlign) {
    if (n != 0 && sizeof(T) > SIZE_MAX / n) return nullptr;
    return static_cast<T*>(allocate(n * sizeof(T), align));
  }

  size_t mark() const { return used_; }
  void release(size_t mark) {
    if (mark <= used_) used_ = mark;
  }
  size_t used() const { return used_; }
  size_t high_water() const { return high_water_; }
  size_t capacity() const { return capacity_; }

 private:
  uint8_t* base_ = nullptr;
  size_t capacity_ = 0;
  size_t used_ = 0;
  size_t high_water_ = 0;
};

// Releases everything allocated in its scope.
class ArenaScope {
 public:
  explicit ArenaScope(Arena& a) : arena_(a), mark_(a.mark()) {}
  ~ArenaScope() { arena_.release(mark_); }
  ArenaScope(const ArenaScope&) = delete;
  ArenaScope& operator=(const ArenaScope&) = delete;

 private:
  Arena& arena_;
  size_t mark_;
};

}  // namespace keel
