// The allocation probe counts what it claims: each C entry point, each form of new and delete,
// calls made inside glibc and libstdc++, calls from other threads; reading it allocates nothing;
// its RSS readers follow touched memory; the trap stops at the first call. Built twice: with the
// process allocator glibc's and with mimalloc linked (the keel CLI's setup), where the memory
// must still come from mimalloc.
#include <gtest/gtest.h>

#include <malloc.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "alloc_probe/alloc_probe.h"

#if KEEL_PROBE_TEST_MIMALLOC
#include <mimalloc.h>
#endif

namespace keel {
namespace {

// Results pass through a volatile so the compiler cannot pair and remove malloc/free calls.
void* volatile g_sink;

struct Delta {
  probe::Counts start = probe::counts();
  probe::Counts get() const { return probe::since(start); }
};

TEST(MemcheckProbe, CountsEveryCEntryPoint) {
  struct Case {
    const char* name;
    void* (*alloc)();
  };
  const Case cases[] = {
      {"malloc", [] { return malloc(24); }},
      {"calloc", [] { return calloc(3, 8); }},
      {"realloc(NULL)", [] { return realloc(nullptr, 24); }},
      {"reallocarray", [] { return reallocarray(nullptr, 3, 8); }},
      {"memalign", [] { return memalign(64, 24); }},
      {"aligned_alloc", [] { return aligned_alloc(64, 64); }},
      {"posix_memalign",
       [] {
         void* p = nullptr;
         return posix_memalign(&p, 64, 24) == 0 ? p : nullptr;
       }},
      {"valloc", [] { return valloc(24); }},
      {"pvalloc", [] { return pvalloc(24); }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const Delta d;
    g_sink = c.alloc();
    void* p = g_sink;
    const probe::Counts after_alloc = d.get();
    ASSERT_NE(p, nullptr);
    memset(p, 0xab, 24);  // the memory is real and writable
    free(p);
    const probe::Counts after_free = d.get();
    EXPECT_EQ(after_alloc.allocations, 1u);
    EXPECT_EQ(after_alloc.frees, 0u);
    EXPECT_EQ(after_free.allocations, 1u);
    EXPECT_EQ(after_free.frees, 1u);
  }
  // realloc of a live block is one more allocation call; free(NULL) is no call at all.
  g_sink = malloc(8);
  const Delta d;
  g_sink = realloc(g_sink, 4096);
  free(g_sink);
  free(nullptr);
  EXPECT_EQ(d.get().allocations, 1u);
  EXPECT_EQ(d.get().frees, 1u);
  EXPECT_EQ(d.get().bytes, 4096u);
}

TEST(MemcheckProbe, CountsNewAndDelete) {
  // 128, not 256: Debian's mimalloc 2.0.9 misaligns aligned blocks of 256 to 1024 bytes at
  // alignments of 256 and up (microsoft/mimalloc#700), with or without the probe.
  struct alignas(128) Wide {
    char bytes[128];
  };
  const Delta d;
  int* one = new int(7);
  int* many = new int[100];
  Wide* wide = new Wide;
  int* nothrow = new (std::nothrow) int(3);
  g_sink = one;
  g_sink = many;
  g_sink = wide;
  g_sink = nothrow;
  const probe::Counts allocated = d.get();  // read before any EXPECT: a failing one allocates
  delete one;
  delete[] many;
  delete wide;
  delete nothrow;
  const probe::Counts freed = d.get();
  EXPECT_EQ(reinterpret_cast<uintptr_t>(wide) % 128, 0u);
  EXPECT_EQ(allocated.allocations, 4u);
  EXPECT_EQ(allocated.bytes, sizeof(int) + 100 * sizeof(int) + sizeof(Wide) + sizeof(int));
  EXPECT_EQ(freed.allocations, 4u);
  EXPECT_EQ(freed.frees, 4u);
}

TEST(MemcheckProbe, CountsCallsInsideTheLibraries) {
  const Delta d;
  char* copy = strdup("glibc allocates this copy itself");  // malloc called from inside libc
  std::string s(1000, 'x');                                 // operator new from libstdc++
  std::vector<int> v;
  for (int i = 0; i < 100; ++i) v.push_back(i);  // growth: several calls
  g_sink = copy;
  g_sink = s.data();
  g_sink = v.data();
  const probe::Counts c = d.get();
  EXPECT_GE(c.allocations, 3u);
  EXPECT_GE(c.frees, 1u);  // the vector's old buffers
  free(copy);
}

TEST(MemcheckProbe, CountsCallsFromOtherThreads) {
  std::atomic<int> stage{0};
  std::thread worker([&] {
    while (stage.load() != 1) std::this_thread::yield();
    for (int i = 0; i < 100; ++i) {
      g_sink = malloc(16);
      free(g_sink);
    }
    stage.store(2);
    // std::thread frees its start state when the function returns: keep that outside too.
    while (stage.load() != 3) std::this_thread::yield();
  });
  // The thread exists before the window opens: its creation's own allocations are outside.
  const Delta d;
  stage.store(1);
  while (stage.load() != 2) std::this_thread::yield();
  const probe::Counts c = d.get();
  stage.store(3);
  worker.join();
  EXPECT_EQ(c.allocations, 100u);
  EXPECT_EQ(c.frees, 100u);
}

TEST(MemcheckProbe, ReadingTheProbeDoesNotAllocate) {
  const Delta d;
  uint64_t sum = 0;
  for (int i = 0; i < 1000; ++i) {
    sum += probe::rss_bytes() + probe::peak_rss_bytes() + probe::allocations() + probe::frees();
    sum += probe::counts().bytes;
  }
  const probe::Counts c = d.get();
  EXPECT_GT(sum, 0u);
  EXPECT_EQ(c.calls(), 0u);
}

TEST(MemcheckProbe, RssFollowsTouchedMemory) {
  const uint64_t before = probe::rss_bytes();
  ASSERT_GT(before, 0u);
  constexpr size_t kBytes = 64u << 20;
  char* p = static_cast<char*>(malloc(kBytes));
  ASSERT_NE(p, nullptr);
  for (size_t i = 0; i < kBytes; i += 4096) p[i] = char(i);
  g_sink = p;
  const uint64_t touched = probe::rss_bytes();
  // Kernel RSS counters are approximate by a few hundred KiB; 64 MiB dwarfs that.
  EXPECT_GE(touched, before + (kBytes * 7) / 8) << "before " << before << ", after touching " << touched;
  EXPECT_GE(probe::peak_rss_bytes(), touched - (1u << 20));
  free(p);
}

TEST(MemcheckProbe, ForwardsToTheProcessAllocator) {
#if KEEL_PROBE_TEST_MIMALLOC
  EXPECT_STREQ(probe::allocator_name(), "mimalloc");
  // Every entry point still lands in mimalloc's heap, as it would without the probe.
  void* a = malloc(100);
  int* b = new int[10];
  void* c = nullptr;
  ASSERT_EQ(posix_memalign(&c, 128, 100), 0);
  EXPECT_TRUE(mi_is_in_heap_region(a));
  EXPECT_TRUE(mi_is_in_heap_region(b));
  EXPECT_TRUE(mi_is_in_heap_region(c));
  EXPECT_GE(mi_usable_size(a), 100u);
  free(a);
  delete[] b;
  free(c);
#else
  EXPECT_STREQ(probe::allocator_name(), "glibc");
  void* a = malloc(100);
  EXPECT_GE(malloc_usable_size(a), 100u);  // glibc's own bookkeeping: the block is glibc's
  free(a);
#endif
}

TEST(MemcheckProbeDeathTest, TrapStopsAtTheFirstCall) {
  EXPECT_DEATH(
      {
        probe::set_trap(true);
        g_sink = malloc(7);
      },
      "malloc\\(7\\) while the trap is set");
}

}  // namespace
}  // namespace keel
