// A source file read by byte ranges (pread), never whole: readers keep it open in
// SourceModel::keep_alive and every tensor's reader reads its own range on demand. Small files
// (JSON, prompts, texts) are read whole with read_file.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace keel::convert {

struct OpenFile {
  int fd = -1;
  uint64_t size = 0;
  std::string path;
  ~OpenFile();
};

// nullptr with `error` naming the path and the reason when it cannot be opened or is not a
// regular file.
std::shared_ptr<OpenFile> open_file(const std::string& path, std::string& error);
// Reads exactly n bytes at offset; false with an error naming the file, offset and size when
// the range passes the end or the read fails.
bool read_at(const OpenFile& f, void* dst, uint64_t n, uint64_t offset, std::string& error);
// The whole file into `out` (replaced); false with `error` naming the path and the reason when it
// cannot be opened, is not a regular file, is larger than `max_bytes` or cannot be read.
bool read_file(const std::string& path, std::string& out, std::string& error, uint64_t max_bytes = UINT64_MAX);

}  // namespace keel::convert
