#include "ports/linux/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace keel::port {

MappedFile::~MappedFile() {
  if (mapped_) munmap(data_, size_);
}

bool MappedFile::open(const std::string& path, std::string& error) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    error = "cannot open " + path + ": " + strerror(errno);
    return false;
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    error = "cannot read " + path + ": not a regular file";
    ::close(fd);
    return false;
  }
  size_ = static_cast<size_t>(st.st_size);
  if (size_ == 0) {
    // mmap of 0 bytes fails; an empty span is still a valid (and invalid-model) input.
    alignas(64) static const uint8_t kEmpty[8] = {};
    data_ = const_cast<uint8_t*>(kEmpty);
    ::close(fd);
    return true;
  }
  void* p = mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (p == MAP_FAILED) {
    error = "cannot map " + path + ": " + strerror(errno);
    return false;
  }
  data_ = static_cast<uint8_t*>(p);
  mapped_ = true;
  return true;
}

static uint64_t read_kb(const char* file, const char* key) {
  FILE* f = fopen(file, "r");
  if (!f) return 0;
  char line[256];
  uint64_t kb = 0;
  const size_t klen = strlen(key);
  while (fgets(line, sizeof line, f)) {
    if (strncmp(line, key, klen) == 0) {
      kb = strtoull(line + klen, nullptr, 10);
      break;
    }
  }
  fclose(f);
  return kb * 1024;
}

uint64_t peak_rss_bytes() { return read_kb("/proc/self/status", "VmHWM:"); }
uint64_t current_rss_bytes() { return read_kb("/proc/self/status", "VmRSS:"); }
uint64_t available_memory_bytes() { return read_kb("/proc/meminfo", "MemAvailable:"); }

}  // namespace keel::port
