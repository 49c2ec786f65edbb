#include "ports/linux/thread_pool.h"

#include <pthreadpool.h>

namespace keel::port {
namespace {

struct Call {
  void (*fn)(void*, size_t);
  void* ctx;
};

void trampoline(void* call, size_t i) {
  const Call* c = static_cast<const Call*>(call);
  c->fn(c->ctx, i);
}

void run(void* state, void (*fn)(void*, size_t), void* ctx, size_t n) {
  Call c{fn, ctx};
  pthreadpool_parallelize_1d(static_cast<pthreadpool_t>(state), trampoline, &c, n, 0);
}

}  // namespace

LinuxThreadPool::LinuxThreadPool(size_t threads) {
  if (threads > 1) handle_ = pthreadpool_create(threads);
  pool_.parallel_for = handle_ ? run : nullptr;
  pool_.state = handle_;
  pool_.native = handle_;
  pool_.threads = handle_ ? pthreadpool_get_threads_count(handle_) : 1;
}

LinuxThreadPool::~LinuxThreadPool() {
  if (handle_) pthreadpool_destroy(handle_);
}

}  // namespace keel::port
