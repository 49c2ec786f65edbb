#include "ports/linux/thread_pool.h"

#include <pthreadpool.h>
#include <unistd.h>

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
  const LinuxThreadPool* self = static_cast<const LinuxThreadPool*>(state);
  pthreadpool_parallelize_1d(self->handle(), trampoline, &c, n, self->flags());
}

}  // namespace

LinuxThreadPool::LinuxThreadPool(size_t threads) {
  if (threads > 1) handle_ = pthreadpool_create(threads);
  // Workers spin between calls, which is what decode wants on idle cores. With more workers
  // than cores, spinning workers steal the time the others need and a forward pass crawls
  // (35 s instead of 20 ms for one stories260K step at 64 threads on 2 cores): let them sleep.
  const long cores = sysconf(_SC_NPROCESSORS_ONLN);
  if (cores > 0 && threads > size_t(cores)) flags_ = PTHREADPOOL_FLAG_YIELD_WORKERS;
  pool_.parallel_for = handle_ ? run : nullptr;
  pool_.state = this;
  pool_.native = handle_;
  pool_.threads = handle_ ? pthreadpool_get_threads_count(handle_) : 1;
}

LinuxThreadPool::~LinuxThreadPool() {
  if (handle_) pthreadpool_destroy(handle_);
}

}  // namespace keel::port
