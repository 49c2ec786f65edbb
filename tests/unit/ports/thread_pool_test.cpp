// The host tools' thread pool (ports/linux/thread_pool.h): how idle workers wait is the
// caller's choice, else KEEL_THREAD_WAIT's, else spinning unless there are more workers than
// cores; and every choice runs each task index exactly once.
#include <gtest/gtest.h>
#include <pthreadpool.h>
#include <sched.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <string>
#include <vector>

#include "ports/linux/thread_pool.h"

namespace keel::port {
namespace {

// Sets KEEL_THREAD_WAIT for one scope and restores what was there.
class ScopedWaitEnv {
 public:
  explicit ScopedWaitEnv(const char* value) {
    if (const char* old = getenv("KEEL_THREAD_WAIT")) old_ = old, had_ = true;
    if (value)
      setenv("KEEL_THREAD_WAIT", value, 1);
    else
      unsetenv("KEEL_THREAD_WAIT");
  }
  ~ScopedWaitEnv() {
    if (had_)
      setenv("KEEL_THREAD_WAIT", old_.c_str(), 1);
    else
      unsetenv("KEEL_THREAD_WAIT");
  }

 private:
  std::string old_;
  bool had_ = false;
};

bool sleeps(const LinuxThreadPool& p) { return (p.flags() & PTHREADPOOL_FLAG_YIELD_WORKERS) != 0; }

TEST(LinuxThreadPool, TheCallersChoiceWinsOverTheEnvironment) {
  ScopedWaitEnv env("sleep");
  EXPECT_FALSE(sleeps(LinuxThreadPool(2, WorkerWait::Spin)));
  ScopedWaitEnv env2("spin");
  EXPECT_TRUE(sleeps(LinuxThreadPool(2, WorkerWait::Sleep)));
}

TEST(LinuxThreadPool, AutoFollowsTheEnvironment) {
  {
    ScopedWaitEnv env("sleep");
    EXPECT_TRUE(sleeps(LinuxThreadPool(2)));
  }
  {
    ScopedWaitEnv env("spin");
    EXPECT_FALSE(sleeps(LinuxThreadPool(2)));
  }
}

TEST(LinuxThreadPool, AutoSleepsOnlyWithMoreWorkersThanCores) {
  ScopedWaitEnv env(nullptr);
  const size_t cores = usable_cores();
  ASSERT_GT(cores, 0u);
  EXPECT_FALSE(sleeps(LinuxThreadPool(cores)));
  EXPECT_TRUE(sleeps(LinuxThreadPool(cores + 1)));
  ScopedWaitEnv bad("yes");  // not a wait mode: ignored (with a warning), Auto's rule applies
  EXPECT_FALSE(sleeps(LinuxThreadPool(cores)));
}

// Pinned to one CPU, two workers are more than the process can run at once, so they sleep.
TEST(LinuxThreadPool, UsableCoresFollowTheAffinityMask) {
  ScopedWaitEnv env(nullptr);
  cpu_set_t old_mask;
  ASSERT_EQ(sched_getaffinity(0, sizeof old_mask, &old_mask), 0);
  cpu_set_t one;
  CPU_ZERO(&one);
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &old_mask)) {
      CPU_SET(cpu, &one);
      break;
    }
  }
  ASSERT_EQ(sched_setaffinity(0, sizeof one, &one), 0);
  const size_t pinned = usable_cores();
  const bool two_sleep = sleeps(LinuxThreadPool(2));
  ASSERT_EQ(sched_setaffinity(0, sizeof old_mask, &old_mask), 0);
  EXPECT_EQ(pinned, 1u);
  EXPECT_TRUE(two_sleep);
}

TEST(LinuxThreadPool, EveryWaitRunsEachIndexOnce) {
  for (WorkerWait wait : {WorkerWait::Spin, WorkerWait::Sleep}) {
    LinuxThreadPool p(3, wait);
    ASSERT_EQ(p.threads(), 3u);
    std::vector<std::atomic<int>> hits(1000);
    for (int round = 0; round < 50; ++round) {
      p.pool()->parallel_for(
          p.pool()->state, [](void* ctx, size_t i) { (*static_cast<std::vector<std::atomic<int>>*>(ctx))[i]++; }, &hits,
          hits.size());
    }
    for (size_t i = 0; i < hits.size(); ++i) ASSERT_EQ(hits[i].load(), 50) << "index " << i;
  }
}

}  // namespace
}  // namespace keel::port
