// Arena memory of the host tools (Linux port): an anonymous private mapping that the kernel is
// asked to back with transparent huge pages. The engine's arenas are a few large buffers read
// all over at every token: sparse decode attention gathers a few hundred scattered pages of K
// and V rows per KV head and reads rows of page summaries spread over megabytes, and over
// 4 KiB pages nearly every such read also walks the page table (docs/results.md, "Sparse
// decode attention"). Where huge pages are unavailable the mapping still works, with small
// pages.
#pragma once

#include <cstdint>
#include <string>

namespace keel::port {

class ArenaMemory {
 public:
  ArenaMemory() = default;
  ~ArenaMemory();
  ArenaMemory(const ArenaMemory&) = delete;
  ArenaMemory& operator=(const ArenaMemory&) = delete;

  // Maps `bytes` (64-byte aligned, zero-filled, not yet resident); false with `error` naming
  // the size and the reason when the system refuses. Releases what was mapped before.
  bool reserve(uint64_t bytes, std::string& error);
  void release();
  uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }
  // Whether the kernel accepted the huge-page advice for the mapping (it may still back parts
  // of it with small pages when none are free).
  bool huge_page_advice() const { return advised_; }

 private:
  void* map_ = nullptr;
  uint64_t map_bytes_ = 0;
  uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
  bool advised_ = false;
};

}  // namespace keel::port
