// The C library functions the engine and the compiler's code call, for a target without one
// (Debian has no aarch64-none-elf newlib; glibc's would assume Linux). Which ones: those the
// link of the engine leaves undefined; the symbol check in scripts/aarch64_virt.sh lists them.
// Plain loops, word-at-a-time where it is simple: copies are not on the engine's hot path
// (the kernels read the model in place). Built with -fno-tree-loop-distribute-patterns so
// that the compiler does not turn these loops back into calls to themselves.
#include <cstddef>
#include <cstdint>

namespace {

// Unaligned 8-byte access: RAM is Normal memory (the MMU is on before any of this runs).
inline uint64_t load8(const unsigned char* p) {
  uint64_t v;
  __builtin_memcpy(&v, p, 8);
  return v;
}
inline void store8(unsigned char* p, uint64_t v) { __builtin_memcpy(p, &v, 8); }

}  // namespace

extern "C" {

void* memcpy(void* __restrict dst, const void* __restrict src, size_t n) {
  unsigned char* d = static_cast<unsigned char*>(dst);
  const unsigned char* s = static_cast<const unsigned char*>(src);
  for (; n >= 8; n -= 8, d += 8, s += 8) store8(d, load8(s));
  for (; n > 0; --n) *d++ = *s++;
  return dst;
}

void* memmove(void* dst, const void* src, size_t n) {
  unsigned char* d = static_cast<unsigned char*>(dst);
  const unsigned char* s = static_cast<const unsigned char*>(src);
  if (d == s || n == 0) return dst;
  if (d < s || d >= s + n) {
    // Forward is safe when the destination starts before the source or past its end; an
    // 8-byte step reads the source before it writes over it.
    for (; n >= 8; n -= 8, d += 8, s += 8) store8(d, load8(s));
    for (; n > 0; --n) *d++ = *s++;
  } else {
    d += n;
    s += n;
    for (; n >= 8; n -= 8) {
      d -= 8;
      s -= 8;
      store8(d, load8(s));
    }
    for (; n > 0; --n) *--d = *--s;
  }
  return dst;
}

void* memset(void* dst, int c, size_t n) {
  unsigned char* d = static_cast<unsigned char*>(dst);
  const uint64_t v = uint64_t(uint8_t(c)) * 0x0101010101010101ull;
  for (; n >= 8; n -= 8, d += 8) store8(d, v);
  for (; n > 0; --n) *d++ = uint8_t(c);
  return dst;
}

int memcmp(const void* a, const void* b, size_t n) {
  const unsigned char* p = static_cast<const unsigned char*>(a);
  const unsigned char* q = static_cast<const unsigned char*>(b);
  for (; n > 0; --n, ++p, ++q) {
    if (*p != *q) return *p < *q ? -1 : 1;
  }
  return 0;
}

void* memchr(const void* s, int c, size_t n) {
  const unsigned char* p = static_cast<const unsigned char*>(s);
  for (; n > 0; --n, ++p) {
    if (*p == uint8_t(c)) return const_cast<unsigned char*>(p);
  }
  return nullptr;
}

size_t strlen(const char* s) {
  const char* p = s;
  while (*p) ++p;
  return size_t(p - s);
}

int strcmp(const char* a, const char* b) {
  for (; *a && *a == *b; ++a, ++b) {
  }
  return int(uint8_t(*a)) - int(uint8_t(*b));
}

int strncmp(const char* a, const char* b, size_t n) {
  for (; n > 0; --n, ++a, ++b) {
    if (*a != *b || !*a) return int(uint8_t(*a)) - int(uint8_t(*b));
  }
  return 0;
}

}  // extern "C"
