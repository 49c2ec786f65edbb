#include "ports/linux/thread_pool.h"

#include <pthreadpool.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

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

WorkerWait resolve_wait(WorkerWait wait, size_t threads) {
  if (wait != WorkerWait::Auto) return wait;
  if (const char* env = getenv("KEEL_THREAD_WAIT"); env && *env) {
    if (strcmp(env, "spin") == 0) return WorkerWait::Spin;
    if (strcmp(env, "sleep") == 0) return WorkerWait::Sleep;
    fprintf(stderr, "keel: KEEL_THREAD_WAIT='%s' ignored; expected spin or sleep\n", env);
  }
  // More workers than cores: spinning workers steal the time the others need and a forward
  // pass crawls (35 s instead of 20 ms for one stories260K step at 64 threads on 2 cores).
  const long cores = sysconf(_SC_NPROCESSORS_ONLN);
  return cores > 0 && threads > size_t(cores) ? WorkerWait::Sleep : WorkerWait::Spin;
}

}  // namespace

LinuxThreadPool::LinuxThreadPool(size_t threads, WorkerWait wait) {
  if (threads > 1) handle_ = pthreadpool_create(threads);
  if (resolve_wait(wait, threads) == WorkerWait::Sleep) flags_ = PTHREADPOOL_FLAG_YIELD_WORKERS;
  pool_.parallel_for = handle_ ? run : nullptr;
  pool_.state = this;
  pool_.native = handle_;
  pool_.threads = handle_ ? pthreadpool_get_threads_count(handle_) : 1;
}

LinuxThreadPool::~LinuxThreadPool() {
  if (handle_) pthreadpool_destroy(handle_);
}

}  // namespace keel::port
