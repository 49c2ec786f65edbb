// Link-time interposition: an executable's own definitions of malloc, free, operator new, ...
// take precedence over every shared library's, so each call in the process lands here, is
// counted, and is forwarded to glibc's __libc_* entry points. A malloc replacement linked into
// the process (mimalloc's shared library, as the keel CLI does) exports those __libc_* names
// too and, loaded before libc, receives the forwarded calls: the probe never changes which
// allocator serves the memory, it only counts.
//
// Nothing here may allocate: the counters are constant-initialized atomics (usable before any
// constructor runs) and the /proc readers use a stack buffer and raw system calls.
#include "alloc_probe/alloc_probe.h"

#include <fcntl.h>
#include <malloc.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <new>

extern "C" {
// glibc's allocator, or the replacement that overrides these names.
void* __libc_malloc(size_t);
void* __libc_calloc(size_t, size_t);
void* __libc_realloc(void*, size_t);
void* __libc_memalign(size_t, size_t);
void* __libc_valloc(size_t);
void* __libc_pvalloc(size_t);
void __libc_free(void*);
// Defined only when the process links mimalloc.
int mi_version(void) __attribute__((weak));
}

namespace {

constinit std::atomic<uint64_t> g_allocations{0};
constinit std::atomic<uint64_t> g_frees{0};
constinit std::atomic<uint64_t> g_bytes{0};
constinit std::atomic<bool> g_trap{false};

// Writes "keel alloc probe: <what>(<n>) while the trap is set" and aborts. The flag is cleared
// first so that anything abort() itself allocates cannot recurse here.
[[noreturn]] void trap(const char* what, uint64_t n) {
  g_trap.store(false);
  char buf[128];
  size_t len = 0;
  auto put = [&](const char* s) {
    while (*s && len < sizeof buf) buf[len++] = *s++;
  };
  put("keel alloc probe: ");
  put(what);
  put("(");
  char digits[24];
  int k = 0;
  do {
    digits[k++] = char('0' + n % 10);
    n /= 10;
  } while (n);
  while (k > 0 && len < sizeof buf) buf[len++] = digits[--k];
  put(") while the trap is set; aborting so a debugger shows the caller\n");
  ssize_t ignored = write(STDERR_FILENO, buf, len);
  (void)ignored;
  abort();
}

inline void count_allocation(const char* what, uint64_t bytes) {
  if (g_trap.load(std::memory_order_relaxed)) trap(what, bytes);
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  g_bytes.fetch_add(bytes, std::memory_order_relaxed);
}

inline void count_free(const char* what, void* p) {
  if (!p) return;  // free(NULL) touches no allocator state
  if (g_trap.load(std::memory_order_relaxed)) trap(what, 0);
  g_frees.fetch_add(1, std::memory_order_relaxed);
}

bool valid_alignment(size_t a) { return a && (a & (a - 1)) == 0 && a % sizeof(void*) == 0; }

// operator new's contract: never null; call the new-handler and retry, else throw.
void* new_impl(size_t n, size_t align) {
  if (n == 0) n = 1;
  for (;;) {
    void* p = align ? __libc_memalign(align, n) : __libc_malloc(n);
    if (p) return p;
    std::new_handler h = std::get_new_handler();
    if (!h) throw std::bad_alloc();
    h();
  }
}

void* new_nothrow(size_t n, size_t align) noexcept {
  try {
    return new_impl(n, align);
  } catch (...) {
    return nullptr;
  }
}

// The kernel's counters for this process: reads /proc/self/<file> into a stack buffer.
size_t read_proc(const char* path, char* buf, size_t cap) {
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  size_t n = 0;
  while (n + 1 < cap) {
    const ssize_t r = read(fd, buf + n, cap - 1 - n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    n += size_t(r);
  }
  close(fd);
  buf[n] = '\0';
  return n;
}

uint64_t parse_u64(const char*& s) {
  while (*s == ' ' || *s == '\t') ++s;
  uint64_t v = 0;
  while (*s >= '0' && *s <= '9') v = v * 10 + uint64_t(*s++ - '0');
  return v;
}

}  // namespace

extern "C" {

void* malloc(size_t n) noexcept {
  count_allocation("malloc", n);
  return __libc_malloc(n);
}

void* calloc(size_t count, size_t size) noexcept {
  count_allocation("calloc", uint64_t(count) * size);
  return __libc_calloc(count, size);
}

void* realloc(void* p, size_t n) noexcept {
  count_allocation("realloc", n);
  return __libc_realloc(p, n);
}

void* reallocarray(void* p, size_t count, size_t size) noexcept {
  count_allocation("reallocarray", uint64_t(count) * size);
  size_t n = 0;
  if (__builtin_mul_overflow(count, size, &n)) {
    errno = ENOMEM;
    return nullptr;
  }
  return __libc_realloc(p, n);
}

void free(void* p) noexcept {
  count_free("free", p);
  __libc_free(p);
}

void* memalign(size_t align, size_t n) noexcept {
  count_allocation("memalign", n);
  return __libc_memalign(align, n);
}

void* aligned_alloc(size_t align, size_t n) noexcept {
  count_allocation("aligned_alloc", n);
  return __libc_memalign(align, n);
}

int posix_memalign(void** out, size_t align, size_t n) noexcept {
  count_allocation("posix_memalign", n);
  if (!valid_alignment(align)) return EINVAL;
  void* p = __libc_memalign(align, n);
  if (!p) return ENOMEM;
  *out = p;
  return 0;
}

void* valloc(size_t n) noexcept {
  count_allocation("valloc", n);
  return __libc_valloc(n);
}

void* pvalloc(size_t n) noexcept {
  count_allocation("pvalloc", n);
  return __libc_pvalloc(n);
}

}  // extern "C"

void* operator new(size_t n) {
  count_allocation("operator new", n);
  return new_impl(n, 0);
}
void* operator new[](size_t n) {
  count_allocation("operator new[]", n);
  return new_impl(n, 0);
}
void* operator new(size_t n, std::align_val_t a) {
  count_allocation("operator new", n);
  return new_impl(n, size_t(a));
}
void* operator new[](size_t n, std::align_val_t a) {
  count_allocation("operator new[]", n);
  return new_impl(n, size_t(a));
}
void* operator new(size_t n, const std::nothrow_t&) noexcept {
  count_allocation("operator new", n);
  return new_nothrow(n, 0);
}
void* operator new[](size_t n, const std::nothrow_t&) noexcept {
  count_allocation("operator new[]", n);
  return new_nothrow(n, 0);
}
void* operator new(size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  count_allocation("operator new", n);
  return new_nothrow(n, size_t(a));
}
void* operator new[](size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  count_allocation("operator new[]", n);
  return new_nothrow(n, size_t(a));
}

void operator delete(void* p) noexcept {
  count_free("operator delete", p);
  __libc_free(p);
}
void operator delete[](void* p) noexcept {
  count_free("operator delete[]", p);
  __libc_free(p);
}
void operator delete(void* p, size_t) noexcept { operator delete(p); }
void operator delete[](void* p, size_t) noexcept { operator delete[](p); }
void operator delete(void* p, std::align_val_t) noexcept { operator delete(p); }
void operator delete[](void* p, std::align_val_t) noexcept { operator delete[](p); }
void operator delete(void* p, size_t, std::align_val_t) noexcept { operator delete(p); }
void operator delete[](void* p, size_t, std::align_val_t) noexcept { operator delete[](p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { operator delete(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { operator delete[](p); }
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept { operator delete(p); }
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept { operator delete[](p); }

namespace keel::probe {

Counts counts() {
  Counts c;
  c.allocations = g_allocations.load(std::memory_order_relaxed);
  c.frees = g_frees.load(std::memory_order_relaxed);
  c.bytes = g_bytes.load(std::memory_order_relaxed);
  return c;
}

uint64_t allocations() { return g_allocations.load(std::memory_order_relaxed); }
uint64_t frees() { return g_frees.load(std::memory_order_relaxed); }

Counts since(const Counts& start) {
  const Counts now = counts();
  Counts d;
  d.allocations = now.allocations - start.allocations;
  d.frees = now.frees - start.frees;
  d.bytes = now.bytes - start.bytes;
  return d;
}

void set_trap(bool on) { g_trap.store(on); }

const char* allocator_name() { return mi_version ? "mimalloc" : "glibc"; }

uint64_t rss_bytes() {
  // statm: size resident shared text lib data dt, in pages.
  char buf[256];
  if (!read_proc("/proc/self/statm", buf, sizeof buf)) return 0;
  const char* s = buf;
  parse_u64(s);
  const uint64_t resident = parse_u64(s);
  const long page = sysconf(_SC_PAGESIZE);
  return resident * uint64_t(page > 0 ? page : 4096);
}

uint64_t peak_rss_bytes() {
  char buf[4096];
  if (!read_proc("/proc/self/status", buf, sizeof buf)) return 0;
  const char* s = strstr(buf, "VmHWM:");
  if (!s) return 0;
  s += 6;
  return parse_u64(s) * 1024;  // "VmHWM:\t  1234 kB"
}

}  // namespace keel::probe
