#include "ports/linux/arena_memory.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>

namespace keel::port {
namespace {

constexpr uint64_t kHugePage = uint64_t(2) << 20;  // x86-64 and arm64 with 4 KiB base pages

}  // namespace

ArenaMemory::~ArenaMemory() { release(); }

void ArenaMemory::release() {
  if (map_) munmap(map_, map_bytes_);
  map_ = nullptr, map_bytes_ = 0, data_ = nullptr, size_ = 0, advised_ = false;
}

bool ArenaMemory::reserve(uint64_t bytes, std::string& error) {
  release();
  if (bytes == 0) return true;
  // A huge page backs only a 2 MiB-aligned 2 MiB range of the mapping: large arenas are mapped
  // with one huge page of slack and start at the first boundary inside.
  const bool large = bytes >= kHugePage;
  const uint64_t want = large ? (bytes + kHugePage - 1) / kHugePage * kHugePage + kHugePage : bytes;
  void* p = mmap(nullptr, want, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    error = "cannot map " + std::to_string(bytes) + " bytes of arena: " + strerror(errno);
    return false;
  }
  map_ = p, map_bytes_ = want, size_ = bytes;
  const uintptr_t at = reinterpret_cast<uintptr_t>(p);
  data_ = reinterpret_cast<uint8_t*>(large ? (at + kHugePage - 1) / kHugePage * kHugePage : at);
#ifdef MADV_HUGEPAGE
  if (large) advised_ = madvise(data_, (bytes + kHugePage - 1) / kHugePage * kHugePage, MADV_HUGEPAGE) == 0;
#endif
  return true;
}

}  // namespace keel::port
