#include "support/alloc_counter.h"

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <new>

// glibc's own entry points, which the interposed functions forward to.
extern "C" {
void* __libc_malloc(size_t);
void* __libc_calloc(size_t, size_t);
void* __libc_realloc(void*, size_t);
void* __libc_memalign(size_t, size_t);
void __libc_free(void*);
}

namespace {
std::atomic<bool> g_on{false};
std::atomic<long> g_alloc{0};
std::atomic<long> g_free{0};

inline void count_alloc() {
  if (g_on.load(std::memory_order_relaxed)) g_alloc.fetch_add(1, std::memory_order_relaxed);
}
inline void count_free(void* p) {
  if (p && g_on.load(std::memory_order_relaxed)) g_free.fetch_add(1, std::memory_order_relaxed);
}
}  // namespace

extern "C" {
void* malloc(size_t n) {
  count_alloc();
  return __libc_malloc(n);
}
void* calloc(size_t a, size_t b) {
  count_alloc();
  return __libc_calloc(a, b);
}
void* realloc(void* p, size_t n) {
  count_alloc();
  return __libc_realloc(p, n);
}
void free(void* p) {
  count_free(p);
  __libc_free(p);
}
void* memalign(size_t a, size_t n) {
  count_alloc();
  return __libc_memalign(a, n);
}
void* aligned_alloc(size_t a, size_t n) {
  count_alloc();
  return __libc_memalign(a, n);
}
int posix_memalign(void** out, size_t a, size_t n) {
  count_alloc();
  void* p = __libc_memalign(a, n);
  if (!p) return ENOMEM;
  *out = p;
  return 0;
}
}  // extern "C"

void* operator new(size_t n) {
  if (void* p = malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void* operator new[](size_t n) { return operator new(n); }
void* operator new(size_t n, std::align_val_t a) {
  if (void* p = aligned_alloc(static_cast<size_t>(a), n ? n : 1)) return p;
  throw std::bad_alloc();
}
void* operator new[](size_t n, std::align_val_t a) { return operator new(n, a); }
void* operator new(size_t n, const std::nothrow_t&) noexcept { return malloc(n ? n : 1); }
void* operator new[](size_t n, const std::nothrow_t&) noexcept { return malloc(n ? n : 1); }
void operator delete(void* p) noexcept { free(p); }
void operator delete[](void* p) noexcept { free(p); }
void operator delete(void* p, size_t) noexcept { free(p); }
void operator delete[](void* p, size_t) noexcept { free(p); }
void operator delete(void* p, std::align_val_t) noexcept { free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { free(p); }
void operator delete(void* p, size_t, std::align_val_t) noexcept { free(p); }
void operator delete[](void* p, size_t, std::align_val_t) noexcept { free(p); }

namespace keel::test {

void start_alloc_counting() {
  g_alloc = 0;
  g_free = 0;
  g_on = true;
}

AllocCounts stop_alloc_counting() {
  g_on = false;
  AllocCounts c;
  c.allocations = g_alloc.load();
  c.deallocations = g_free.load();
  return c;
}

}  // namespace keel::test
