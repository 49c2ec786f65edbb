#include "kernels/xnnpack/xnn_memory.h"

#include <xnnpack.h>

#include <atomic>
#include <cstring>

namespace keel::xnn {
namespace {

Region* g_region = nullptr;
bool g_measuring = false;
std::atomic<uint64_t> g_served{0};
std::atomic<uint64_t> g_refused{0};

void* serve(size_t bytes, size_t align) {
  if (g_region == nullptr) {
    g_refused.fetch_add(1, std::memory_order_relaxed);
    return nullptr;
  }
  void* p = g_region->allocate(bytes, align, g_measuring);
  (p ? g_served : g_refused).fetch_add(1, std::memory_order_relaxed);
  return p;
}

void* allocate(void*, size_t size) { return serve(size, Region::kGranule); }

// Operators never reallocate (only XNNPACK's subgraph runtime does, which Keel does not use);
// a bump region cannot grow a block in place, and it does not know the old size to copy.
void* reallocate(void*, void* pointer, size_t size) {
  if (pointer == nullptr) return serve(size, Region::kGranule);
  g_refused.fetch_add(1, std::memory_order_relaxed);
  return nullptr;
}

void release(void*, void*) {}

void* aligned_allocate(void*, size_t alignment, size_t size) { return serve(size, alignment); }

const xnn_allocator kAllocator = {nullptr, allocate, reallocate, release, aligned_allocate, release};

struct InitResult {
  Status status = Status::Ok;
  const char* why = "";
};

InitResult initialize_once() {
  const xnn_status s = xnn_initialize(&kAllocator);
  if (s == xnn_status_unsupported_hardware) return {Status::UnsupportedBackend, "XNNPACK does not support this CPU"};
  if (s != xnn_status_success) return {Status::UnsupportedBackend, "xnn_initialize failed"};
  // The first xnn_initialize() of the process fixes the allocator: check it is this one by
  // creating a small operator inside a probe region.
  alignas(64) static uint8_t probe_memory[8192];
  Region probe;
  probe.reset(probe_memory, sizeof(probe_memory));
  open_region(&probe, true);
  xnn_operator_t op = nullptr;
  const xnn_status c = xnn_create_softmax_nc_f32(1, 1, 1, 0, &op);
  close_region();
  if (c != xnn_status_success) return {Status::UnsupportedBackend, "XNNPACK cannot create a softmax operator"};
  xnn_delete_operator(op);
  if (probe.used == 0) {
    return {Status::UnsupportedBackend,
            "XNNPACK was initialized in this process with another allocator; its operators would bypass the arena"};
  }
  return {};
}

}  // namespace

void* Region::allocate(size_t bytes, size_t align, bool measuring) {
  if (align < kGranule) align = kGranule;
  size_t offset = (used + kGranule - 1) / kGranule * kGranule;
  if (align > kGranule) {
    if (measuring) {
      offset += align - kGranule;
    } else {
      const uintptr_t at = reinterpret_cast<uintptr_t>(base) + offset;
      offset += (align - at % align) % align;
    }
  }
  const size_t size = (bytes + kGranule - 1) / kGranule * kGranule;
  if (offset > capacity || size > capacity - offset) {
    if (bytes > largest_refused) largest_refused = bytes;
    return nullptr;
  }
  used = offset + size;
  uint8_t* p = base + offset;
  if (measuring && align > kGranule) {
    // The worst-case padding was counted; hand out an address that really is aligned.
    p = base + (offset - (align - kGranule));
    const uintptr_t at = reinterpret_cast<uintptr_t>(p);
    p += (align - at % align) % align;
  }
  return p;
}

Error initialize() {
  static const InitResult result = initialize_once();
  if (result.status != Status::Ok) return Error(result.status, "backend 'xnnpack': %s", result.why);
  return Error();
}

void open_region(Region* r, bool measuring) {
  g_region = r;
  g_measuring = measuring;
}

void close_region() {
  g_region = nullptr;
  g_measuring = false;
}

AllocatorCounters allocator_counters() {
  return AllocatorCounters{g_served.load(std::memory_order_relaxed), g_refused.load(std::memory_order_relaxed)};
}

}  // namespace keel::xnn
