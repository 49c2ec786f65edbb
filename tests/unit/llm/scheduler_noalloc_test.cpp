// Zero allocations after init under continuous batching: every allocator call in the process is
// counted while the Scheduler admits, queues, prefills in chunks beside decode rows, compresses
// (snapstream), cancels and finishes requests over four slots and a queue.
#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <vector>

#include "llm/runtime.h"
#include "llm/scheduler.h"
#include "support/alloc_counter.h"
#include "support/runtime_fixture.h"
#include "support/test_support.h"

namespace keel {
namespace {

TEST(SchedulerNoAlloc, StepsAllocateNothing) {
  const Model& model = test::stories260k(convert::QuantMode::Q8).model;
  ASSERT_TRUE(model.loaded());

  RuntimeConfig rc;
  rc.backend = BackendKind::Native;
  rc.kv.kind = KvPolicyKind::SnapStream;
  rc.plan.kv_budget_tokens = 64;
  rc.plan.chunk_tokens = 16;
  rc.plan.slots = 4;
  rc.plan.queue_capacity = 4;
  const MemoryPlan plan = Runtime::plan(model, rc);
  std::vector<uint8_t> persistent(plan.persistent_bytes + 64), scratch(plan.scratch_bytes + 64);
  uint8_t* p = persistent.data() + (64 - reinterpret_cast<uintptr_t>(persistent.data()) % 64) % 64;
  uint8_t* s = scratch.data() + (64 - reinterpret_cast<uintptr_t>(scratch.data()) % 64) % 64;
  Runtime rt;
  Error e = rt.init(model, rc, Span<uint8_t>(p, plan.persistent_bytes), Span<uint8_t>(s, plan.scratch_bytes), nullptr);
  ASSERT_TRUE(e.ok()) << e.message();
  Scheduler sched;
  ASSERT_TRUE(sched.init(rt).ok());

  // Inputs and the event buffer exist before counting starts.
  std::mt19937 g(5);
  std::vector<std::vector<int32_t>> prompts(24);
  for (auto& pr : prompts) {
    pr.resize(1 + g() % 150);
    pr[0] = 1;
    for (size_t i = 1; i < pr.size(); ++i) pr[i] = int32_t(3 + g() % 509);
  }
  std::vector<TokenEvent> events(sched.max_events());
  uint64_t tokens = 0, finished = 0, refused = 0, steps = 0;

  test::start_alloc_counting();
  size_t next = 0;
  while (steps < 2000 && (next < prompts.size() || sched.active() > 0 || sched.queued() > 0)) {
    // Submit until the queue refuses, as a server under load would.
    while (next < prompts.size()) {
      SchedulerRequest q;
      q.prompt = Span<const int32_t>(prompts[next].data(), prompts[next].size());
      q.max_new_tokens = 20 + uint32_t(next * 7 % 60);
      q.default_stops = false;
      q.sampling.temperature = next % 2 ? 0.8f : 0.0f;
      q.sampling.seed = next;
      const Result<uint64_t> id = sched.submit(q);
      if (!id.ok()) {
        ++refused;
        break;
      }
      if (next % 5 == 3) (void)sched.cancel(id.value());
      ++next;
    }
    size_t n = 0;
    e = sched.step(Span<TokenEvent>(events.data(), events.size()), &n);
    if (!e.ok()) break;
    for (size_t i = 0; i < n; ++i) {
      tokens += events[i].token >= 0 ? 1 : 0;
      finished += events[i].finish != FinishReason::None ? 1 : 0;
    }
    ++steps;
  }
  const test::AllocCounts counts = test::stop_alloc_counting();
  ASSERT_TRUE(e.ok()) << e.message();
  EXPECT_EQ(counts.total(), 0) << counts.allocations << " allocations, " << counts.deallocations << " frees";
  EXPECT_EQ(finished, prompts.size());
  EXPECT_GT(tokens, 500u);
  EXPECT_GT(refused, 0u);
  EXPECT_EQ(sched.active(), 0u);
}

}  // namespace
}  // namespace keel
