// The allocation probe: link it into an executable (CMake target keel_alloc_probe, or
// keel_add_memory_check(... TARGET app) from cmake/KeelMemoryCheck.cmake) and every allocator
// entry point of the process — malloc, calloc, realloc, reallocarray, memalign, aligned_alloc,
// posix_memalign, valloc, pvalloc, free and every form of operator new and delete — is counted,
// whoever calls it (the app, the engine, libstdc++, glibc itself, a worker thread), then
// forwarded to the real allocator: glibc's, or the malloc replacement the process links
// (mimalloc's shared library provides glibc's __libc_* entry points the probe forwards to).
//
// Counting never stops, so a program proves that a phase does not allocate by comparing two
// snapshots:
//
//   const keel::probe::Counts before = keel::probe::counts();
//   ... decode a million tokens ...
//   assert(keel::probe::since(before).calls() == 0);
//
// Not for sanitizer builds: the sanitizers replace the allocator themselves.
#pragma once

#include <cstdint>

namespace keel::probe {

struct Counts {
  uint64_t allocations = 0;  // calls that return memory: the malloc family and operator new
  uint64_t frees = 0;        // free and operator delete of a non-null pointer
  uint64_t bytes = 0;        // bytes the allocations asked for
  uint64_t calls() const { return allocations + frees; }
};

// Totals since the process started.
Counts counts();
uint64_t allocations();
uint64_t frees();
// now - start.
Counts since(const Counts& start);

// While on, the next allocator call prints what it was on stderr and aborts, so a debugger
// (or the core dump) shows who called. For finding the caller once a check has failed.
void set_trap(bool on);

// "mimalloc" when the process links mimalloc, else "glibc".
const char* allocator_name();

// Resident set size of the process now (VmRSS) and at its peak (VmHWM), in bytes, read from
// /proc without allocating; 0 if unavailable.
uint64_t rss_bytes();
uint64_t peak_rss_bytes();

}  // namespace keel::probe
