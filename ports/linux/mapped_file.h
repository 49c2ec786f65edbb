// Read-only memory mapping of a whole file (Linux port). The engine never opens files; the
// host maps the .keel image and hands the engine a byte span.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace keel::port {

class MappedFile {
 public:
  MappedFile() = default;
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  // Returns false and fills `error` (naming the path and the reason) on failure.
  bool open(const std::string& path, std::string& error);
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
  bool mapped_ = false;
};

// Peak resident set size of this process in bytes (VmHWM), 0 if unknown.
uint64_t peak_rss_bytes();
// Current resident set size in bytes (VmRSS), 0 if unknown.
uint64_t current_rss_bytes();
// Memory the kernel can give this process without swapping (MemAvailable), 0 if unknown.
uint64_t available_memory_bytes();

}  // namespace keel::port
