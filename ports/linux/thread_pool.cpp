#include "ports/linux/thread_pool.h"

#include <pthreadpool.h>
#include <sched.h>
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
  return threads > usable_cores() ? WorkerWait::Sleep : WorkerWait::Spin;
}

// Whole cores a CFS quota grants (quota / period, rounded down), 0 when none is set or readable.
size_t cgroup_quota_cores() {
  long long quota = -1, period = 0;
  if (FILE* f = fopen("/sys/fs/cgroup/cpu.max", "r")) {  // v2: "max 100000" or "150000 100000"
    char first[32] = {};
    if (fscanf(f, "%31s %lld", first, &period) == 2 && strcmp(first, "max") != 0) quota = atoll(first);
    fclose(f);
  } else if (FILE* q = fopen("/sys/fs/cgroup/cpu/cpu.cfs_quota_us", "r")) {  // v1: -1 when unlimited
    if (fscanf(q, "%lld", &quota) != 1) quota = -1;
    fclose(q);
    if (FILE* p = fopen("/sys/fs/cgroup/cpu/cpu.cfs_period_us", "r")) {
      if (fscanf(p, "%lld", &period) != 1) period = 0;
      fclose(p);
    }
  }
  if (quota <= 0 || period <= 0) return 0;
  const long long cores = quota / period;
  return cores < 1 ? 1 : size_t(cores);
}

}  // namespace

size_t usable_cores() {
  size_t cores = 0;
  cpu_set_t mask;
  CPU_ZERO(&mask);
  if (sched_getaffinity(0, sizeof mask, &mask) == 0) cores = size_t(CPU_COUNT(&mask));
  if (cores == 0) {
    const long online = sysconf(_SC_NPROCESSORS_ONLN);
    cores = online > 0 ? size_t(online) : 1;
  }
  const size_t quota = cgroup_quota_cores();
  return quota != 0 && quota < cores ? quota : cores;
}

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
