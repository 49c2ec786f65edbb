// The engine's view of parallelism: a port hands in a `ThreadPool` (pthreadpool on Linux);
// bare metal passes none and everything runs on the caller's thread. The pool must not
// allocate while running tasks.
#pragma once

#include <cstddef>

namespace keel {

struct ThreadPool {
  // Calls fn(ctx, i) for i in [0, n), possibly concurrently; returns when all calls are done.
  void (*parallel_for)(void* pool_state, void (*fn)(void* ctx, size_t i), void* ctx, size_t n) = nullptr;
  void* state = nullptr;
  size_t threads = 1;
  // The port's native pool when it is a pthreadpool (pthreadpool_t), else nullptr. XNNPACK
  // operators run on it directly, so they share the engine's workers.
  void* native = nullptr;
};

// Runs fn over [0, n) on the pool, or inline when there is none.
inline void parallel_for(const ThreadPool* pool, size_t n, void (*fn)(void*, size_t), void* ctx) {
  if (pool && pool->parallel_for && pool->threads > 1 && n > 1) {
    pool->parallel_for(pool->state, fn, ctx, n);
    return;
  }
  for (size_t i = 0; i < n; ++i) fn(ctx, i);
}

}  // namespace keel
