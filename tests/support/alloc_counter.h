// Link-time interposition of the C and C++ allocators for the zero-allocation tests: every
// malloc, calloc, realloc, aligned allocation, free, operator new and operator delete in the
// process is counted while counting is on. Compiled only into *_noalloc_test binaries.
#pragma once

namespace keel::test {

struct AllocCounts {
  long allocations = 0;    // malloc, calloc, realloc, aligned_alloc, posix_memalign, memalign, new
  long deallocations = 0;  // free, delete
  long total() const { return allocations + deallocations; }
};

void start_alloc_counting();
AllocCounts stop_alloc_counting();

}  // namespace keel::test
