#include "convert/source_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace keel::convert {

OpenFile::~OpenFile() {
  if (fd >= 0) close(fd);
}

std::shared_ptr<OpenFile> open_file(const std::string& path, std::string& error) {
  auto f = std::make_shared<OpenFile>();
  f->path = path;
  f->fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (f->fd < 0) {
    error = "cannot open '" + path + "': " + strerror(errno);
    return nullptr;
  }
  struct stat st {};
  if (fstat(f->fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    error = "'" + path + "' is not a regular file";
    return nullptr;
  }
  f->size = static_cast<uint64_t>(st.st_size);
  return f;
}

bool read_at(const OpenFile& f, void* dst, uint64_t n, uint64_t offset, std::string& error) {
  if (offset > f.size || n > f.size - offset) {
    error = "'" + f.path + "': read of " + std::to_string(n) + " bytes at offset " + std::to_string(offset) +
            " passes the end of the file (" + std::to_string(f.size) + " bytes)";
    return false;
  }
  auto* p = static_cast<uint8_t*>(dst);
  while (n > 0) {
    ssize_t got = pread(f.fd, p, n, static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      error = "'" + f.path + "': read failed at offset " + std::to_string(offset) +
              (got < 0 ? std::string(": ") + strerror(errno) : std::string(": unexpected end"));
      return false;
    }
    p += got;
    n -= static_cast<uint64_t>(got);
    offset += static_cast<uint64_t>(got);
  }
  return true;
}

bool read_file(const std::string& path, std::string& out, std::string& error, uint64_t max_bytes) {
  const auto f = open_file(path, error);
  if (!f) return false;
  if (f->size > max_bytes) {
    error = "'" + path + "' is " + std::to_string(f->size) + " bytes, more than the " + std::to_string(max_bytes) +
            " it may have";
    return false;
  }
  out.assign(f->size, '\0');
  return read_at(*f, out.data(), out.size(), 0, error);
}

}  // namespace keel::convert
