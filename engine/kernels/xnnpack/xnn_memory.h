// Where XNNPACK's memory comes from. XNNPACK allocates through one process-wide xnn_allocator,
// fixed by the first xnn_initialize() of the process. Keel's allocator serves requests from the
// region that is open at the time (a block of the persistent arena while the backend creates
// its operators, or host work memory while measuring how big that block must be) and refuses
// every request, counting it, when none is open. Once init has returned, XNNPACK therefore
// cannot take memory behind the plan's back: an operator that tried would fail, and the
// counters show it.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/status.h"

namespace keel::xnn {

// Bump region handing out 64-byte granules: with a 64-aligned base, its use depends only on the
// sequence of requests, never on where it starts, so a measurement in host work memory equals
// the use of the same requests in the arena. Releases are ignored.
struct Region {
  static constexpr size_t kGranule = 64;
  uint8_t* base = nullptr;
  size_t capacity = 0;
  size_t used = 0;
  size_t largest_refused = 0;  // bytes of the largest request that did not fit (for messages)

  void reset(uint8_t* b, size_t cap) {
    base = b;
    capacity = cap;
    used = 0;
    largest_refused = 0;
  }
  // nullptr when it does not fit. An alignment above the granule pads by what the address
  // needs, at most align - kGranule bytes; the same request then counts that worst case while
  // measuring (so measured >= used in the arena).
  void* allocate(size_t bytes, size_t align, bool measuring);
};

// xnn_initialize() with Keel's allocator; idempotent. Fails with UnsupportedBackend when the CPU
// lacks what XNNPACK needs, or when something else in the process initialized XNNPACK first
// with its own allocator (its operators would then bypass the arena).
Error initialize();

// Directs XNNPACK's allocations to `r` until close_region(). One region at a time, opened and
// closed on the thread that creates the operators (init is single-threaded).
void open_region(Region* r, bool measuring);
void close_region();

struct AllocatorCounters {
  uint64_t served = 0;   // requests served from an open region
  uint64_t refused = 0;  // requests made with no region open, or that did not fit
};
// Process-wide totals since start.
AllocatorCounters allocator_counters();

}  // namespace keel::xnn
