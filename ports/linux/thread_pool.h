// pthreadpool-backed keel::ThreadPool for Linux hosts. Created before the engine's init (it
// allocates its workers then) and passed to the engine; running tasks allocates nothing.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/threads.h"

typedef struct pthreadpool* pthreadpool_t;

namespace keel::port {

class LinuxThreadPool {
 public:
  explicit LinuxThreadPool(size_t threads);
  ~LinuxThreadPool();
  LinuxThreadPool(const LinuxThreadPool&) = delete;
  LinuxThreadPool& operator=(const LinuxThreadPool&) = delete;

  const ThreadPool* pool() const { return &pool_; }
  pthreadpool_t handle() const { return handle_; }
  size_t threads() const { return pool_.threads; }
  uint32_t flags() const { return flags_; }

 private:
  pthreadpool_t handle_ = nullptr;
  uint32_t flags_ = 0;  // pthreadpool flags for every parallel call
  ThreadPool pool_;
};

}  // namespace keel::port
