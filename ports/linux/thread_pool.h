// pthreadpool-backed keel::ThreadPool for Linux hosts. Created before the engine's init (it
// allocates its workers then) and passed to the engine; running tasks allocates nothing.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/threads.h"

typedef struct pthreadpool* pthreadpool_t;

namespace keel::port {

// How idle workers wait for the next parallel call. Spinning answers a decode step's calls
// within microseconds on cores nobody else wants; sleeping (a futex wait) gives the core back,
// which a host running more runnable threads than cores needs: there a spinning worker holds
// the core the thread it waits for should run on, and every call costs a scheduler time slice
// (stories260K decode: 3.3 s alone, 40 s as one of three 2-thread processes on 2 cores under
// qemu-aarch64; 13.5 s sleeping).
enum class WorkerWait {
  Auto,  // KEEL_THREAD_WAIT=spin|sleep when set, else spin unless threads > usable_cores()
  Spin,
  Sleep,
};

// Cores this process may run on at once: the CPUs in its affinity mask, fewer when a cgroup
// CPU quota (v2 cpu.max, v1 cpu.cfs_quota_us) allows less; at least 1. Online CPUs alone
// overstate it under `taskset` or a container's quota, where two spinning threads on one core
// turn a 0.1 s stories260K run into minutes.
size_t usable_cores();

class LinuxThreadPool {
 public:
  explicit LinuxThreadPool(size_t threads, WorkerWait wait = WorkerWait::Auto);
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
