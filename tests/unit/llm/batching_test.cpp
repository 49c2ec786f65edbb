// Continuous batching (llm/scheduler.h): a request's greedy tokens are the same whether it runs
// alone through keel::generate or batched with others through the Scheduler, for every KV policy;
// the scheduler under random submit/cancel/step sequences never leaks a slot or exceeds its
// queue; a static Engine<> with several slots drives it.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <set>
#include <memory>
#include <random>
#include <vector>

#include "keel.h"
#include "keel.hpp"
#include "llm/generate.h"
#include "llm/runtime.h"
#include "llm/scheduler.h"
#include "ports/linux/thread_pool.h"
#include "support/runtime_fixture.h"
#include "support/test_support.h"

namespace keel {
namespace {

// Every stories260K test here runs the Q8 conversion.
const test::LoadedModel& stories() { return test::stories260k(convert::QuantMode::Q8); }

struct Host {
  std::vector<uint8_t> persistent, scratch;
  Runtime rt;
  Scheduler sched;
  Error error;
  Host(const Model& model, KvPolicyKind kind, uint32_t budget, uint32_t chunk, uint32_t slots, uint32_t queue,
       const ThreadPool* pool = nullptr, uint32_t hold = 0) {
    RuntimeConfig rc;
    rc.backend = BackendKind::Native;
    rc.kv.kind = kind;
    rc.kv.window = budget / 4;
    rc.kv.hold = hold;
    rc.plan.kv_budget_tokens = budget;
    rc.plan.chunk_tokens = chunk;
    rc.plan.slots = slots;
    rc.plan.queue_capacity = queue;
    rc.plan.threads = pool ? uint32_t(pool->threads) : 1;
    const MemoryPlan plan = Runtime::plan(model, rc);
    persistent.resize(plan.persistent_bytes + 64);
    scratch.resize(plan.scratch_bytes + 64);
    uint8_t* p = persistent.data() + (64 - reinterpret_cast<uintptr_t>(persistent.data()) % 64) % 64;
    uint8_t* s = scratch.data() + (64 - reinterpret_cast<uintptr_t>(scratch.data()) % 64) % 64;
    error = rt.init(model, rc, Span<uint8_t>(p, plan.persistent_bytes), Span<uint8_t>(s, plan.scratch_bytes), pool);
    if (error.ok()) error = sched.init(rt);
  }
};

// A prompt of `n` tokens from a seeded generator (ids 3.. of the vocabulary: no BOS/EOS).
std::vector<int32_t> prompt_of(uint32_t n, uint32_t seed, uint32_t vocab) {
  std::mt19937 g(seed);
  std::vector<int32_t> p(n);
  p[0] = 1;
  for (uint32_t i = 1; i < n; ++i) p[i] = int32_t(3 + g() % (vocab - 3));
  return p;
}

struct Outcome {
  std::vector<int32_t> tokens;  // sampled, the stop token included
  FinishReason finish = FinishReason::None;
};

// Alone: keel::generate on slot 0 of a one-slot runtime (Runtime::prefill, then decode).
Outcome alone(const Model& model, KvPolicyKind kind, uint32_t budget, uint32_t chunk, const std::vector<int32_t>& p,
              uint32_t max_new, uint32_t hold = 0) {
  Host h(model, kind, budget, chunk, 1, 0, nullptr, hold);
  EXPECT_TRUE(h.error.ok()) << h.error.message();
  Outcome o;
  GenerateOptions go;
  go.max_tokens = max_new;
  GenerateResult r;
  auto cb = [](void* ctx, int32_t id, const char*, size_t) {
    if (id >= 0) static_cast<Outcome*>(ctx)->tokens.push_back(id);
    return true;
  };
  const Error e = generate(h.rt, 0, Span<const int32_t>(p.data(), p.size()), go, cb, &o, &r);
  if (!e.ok()) {
    o.finish = e.status() == Status::KvFull ? FinishReason::KvFull : FinishReason::Error;
    return o;
  }
  // The scheduler reports a stop token as its request's last token; generate() does not stream it.
  if (r.finish == FinishReason::StopToken) o.tokens.push_back(r.stop_token);
  o.finish = r.finish;
  return o;
}

// Runs every step until nothing is active or queued; collects each request's tokens.
void drain(Scheduler& s, std::map<uint64_t, Outcome>& out, uint32_t max_steps = 100000) {
  std::vector<TokenEvent> ev(s.max_events());
  for (uint32_t i = 0; i < max_steps && (s.active() > 0 || s.queued() > 0); ++i) {
    size_t n = 0;
    const Error e = s.step(Span<TokenEvent>(ev.data(), ev.size()), &n);
    ASSERT_TRUE(e.ok()) << e.message();
    for (size_t j = 0; j < n; ++j) {
      Outcome& o = out[ev[j].request];
      if (ev[j].token >= 0) o.tokens.push_back(ev[j].token);
      if (ev[j].finish != FinishReason::None) o.finish = ev[j].finish;
    }
  }
  EXPECT_EQ(s.active(), 0u);
  EXPECT_EQ(s.queued(), 0u);
}

struct Req {
  uint32_t prompt_tokens, max_new, seed;
};

// Requests submitted in two waves (the second while the first decodes) so that prompt chunks
// share passes with decode rows; compared one by one with the same request run alone.
void check_batched_equals_alone(const Model& model, KvPolicyKind kind, uint32_t budget, uint32_t chunk, uint32_t slots,
                                const std::vector<Req>& reqs, const ThreadPool* pool = nullptr) {
  SCOPED_TRACE(kv_policy_name(kind));
  const uint32_t vocab = model.shape().vocab_size;
  std::vector<std::vector<int32_t>> prompts;
  for (const Req& r : reqs) prompts.push_back(prompt_of(r.prompt_tokens, r.seed, vocab));
  Host h(model, kind, budget, chunk, slots, uint32_t(reqs.size()), pool);
  ASSERT_TRUE(h.error.ok()) << h.error.message();
  std::vector<uint64_t> ids(reqs.size());
  std::map<uint64_t, Outcome> got;
  const size_t first_wave = (reqs.size() + 1) / 2;
  auto submit = [&](size_t i) {
    SchedulerRequest q;
    q.prompt = Span<const int32_t>(prompts[i].data(), prompts[i].size());
    q.max_new_tokens = reqs[i].max_new;
    const Result<uint64_t> id = h.sched.submit(q);
    ASSERT_TRUE(id.ok()) << id.error().message();
    ids[i] = id.value();
  };
  for (size_t i = 0; i < first_wave; ++i) submit(i);
  std::vector<TokenEvent> ev(h.sched.max_events());
  for (int s = 0; s < 6; ++s) {
    size_t n = 0;
    ASSERT_TRUE(h.sched.step(Span<TokenEvent>(ev.data(), ev.size()), &n).ok());
    for (size_t j = 0; j < n; ++j) {
      Outcome& o = got[ev[j].request];
      if (ev[j].token >= 0) o.tokens.push_back(ev[j].token);
      if (ev[j].finish != FinishReason::None) o.finish = ev[j].finish;
    }
  }
  for (size_t i = first_wave; i < reqs.size(); ++i) submit(i);
  drain(h.sched, got);
  for (size_t i = 0; i < reqs.size(); ++i) {
    SCOPED_TRACE(testing::Message() << "request " << i << " (" << reqs[i].prompt_tokens << " prompt tokens)");
    const Outcome want = alone(model, kind, budget, chunk, prompts[i], reqs[i].max_new);
    EXPECT_FALSE(want.tokens.empty());
    EXPECT_EQ(got[ids[i]].tokens, want.tokens);
    EXPECT_EQ(got[ids[i]].finish, want.finish);
  }
  for (uint32_t s = 0; s < slots; ++s) {
    EXPECT_EQ(h.sched.slot_state(s).phase, SlotPhase::Free);
    EXPECT_EQ(h.rt.kv_cache(s).visible(), 0u);
  }
}

// Prompts below and above the 64-token budget (SnapKV compresses at prompt chunks, with the
// lookahead; the ring evicts while decoding); generations past the budget.
const std::vector<Req> kStoriesRequests = {{5, 40, 1},  {100, 30, 2}, {23, 90, 3}, {70, 20, 4},
                                           {41, 50, 5}, {130, 25, 6}, {1, 60, 7}};

TEST(Batching, BatchedEqualsAloneForEveryPolicy) {
  ASSERT_TRUE(stories().model.loaded());
  for (const KvPolicyKind kind : {KvPolicyKind::Window, KvPolicyKind::Streaming, KvPolicyKind::SnapKV,
                                  KvPolicyKind::SnapStream, KvPolicyKind::RocketKV}) {
    check_batched_equals_alone(stories().model, kind, 64, 16, 4, kStoriesRequests);
  }
  static_assert(uint32_t(KvPolicyKind::RocketKV) + 1 == kRunPolicyMax, "a new policy belongs in this test");
}

TEST(Batching, BatchedEqualsAloneUnderTheFullPolicyUpToItsBudget) {
  ASSERT_TRUE(stories().model.loaded());
  // 160 tokens: most requests fit; {70 + 100} and {130 + 40} reach the budget and end KvFull
  // at the same token as alone (generate's Budget); a 200-token prompt is refused up front.
  check_batched_equals_alone(stories().model, KvPolicyKind::Full, 160, 16, 3,
                             {{5, 40, 1}, {70, 100, 2}, {23, 60, 3}, {130, 40, 4}, {41, 20, 5}});
  Host h(stories().model, KvPolicyKind::Full, 160, 16, 2, 0);
  ASSERT_TRUE(h.error.ok());
  const std::vector<int32_t> p = prompt_of(200, 9, stories().model.shape().vocab_size);
  SchedulerRequest q;
  q.prompt = Span<const int32_t>(p.data(), p.size());
  ASSERT_TRUE(h.sched.submit(q).ok());
  std::map<uint64_t, Outcome> got;
  drain(h.sched, got);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_TRUE(got.begin()->second.tokens.empty());
  EXPECT_EQ(got.begin()->second.finish, FinishReason::KvFull);
}

// The question's queries that judge each chunk's compression are computed again against the
// cache as it is (docs/kv.md, "Chunked prefill and the lookahead"): run once against an empty
// cache they had never seen the text, and their retrieval heads under-scored what it holds.
TEST(Batching, LookaheadQueriesAreRecomputedAgainstTheCompressedCache) {
  ASSERT_TRUE(stories().model.loaded());
  Host h(stories().model, KvPolicyKind::SnapStream, 64, 16, 1, 0);
  ASSERT_TRUE(h.error.ok()) << h.error.message();
  const std::vector<int32_t> p = prompt_of(150, 5, stories().model.shape().vocab_size);
  ASSERT_TRUE(h.rt.begin_prompt(0, Span<const int32_t>(p.data(), p.size())).ok());
  const KvCache& kv = h.rt.kv_cache(0);
  const uint32_t last = kv.shape().n_layers - 1, q_dim = kv.shape().q_dim;
  ASSERT_EQ(kv.lookahead_count(), 16u);  // the chunk bounds it
  // The last layer's queries depend on what the tokens attended to, the cache included.
  auto queries = [&] { return std::vector<float>(kv.lookahead(last, 0), kv.lookahead(last, 0) + 16 * q_dim); };
  const std::vector<float> first = queries();
  uint32_t changes = 0;
  std::vector<float> before = first;
  for (size_t done = 0; done < p.size();) {
    SlotWork w;
    w.slot = 0;
    w.tokens = p.data() + done;
    w.n = uint32_t(p.size() - done < 16 ? p.size() - done : 16);
    w.prompt = true;
    w.prompt_end = done + w.n == p.size();
    ASSERT_TRUE(h.rt.run(&w, 1).ok());
    ASSERT_EQ(w.status, Status::Ok);
    done += w.n;
    if (w.prompt_end) break;
    const std::vector<float> now = queries();
    // Before the cache is full nothing is compressed and the queries stay; from then on (ring
    // of 16 = one chunk) every chunk is judged by queries that saw the cache it compresses.
    if (kv.visible() + 16 <= 64) {
      EXPECT_EQ(now, first) << "after " << done << " tokens";
    } else {
      EXPECT_NE(now, before) << "after " << done << " tokens";
      ++changes;
    }
    before = now;
  }
  EXPECT_GE(changes, 5u);
}

// The hold (docs/kv.md) through the runtime: the compressions the lookahead judges put what they
// evict there (a chunk's worth each, up to its 16 entries), attention never sees more than the
// budget, and the prompt's last chunk, judged by the real question, empties it.
TEST(Batching, TheHoldFillsWhileTheLookaheadJudgesAndEmptiesAtThePromptsEnd) {
  ASSERT_TRUE(stories().model.loaded());
  Host h(stories().model, KvPolicyKind::SnapStream, 64, 16, 1, 0, nullptr, 16);
  ASSERT_TRUE(h.error.ok()) << h.error.message();
  EXPECT_EQ(h.rt.memory_plan().kv_hold_tokens, 16u);
  const std::vector<int32_t> p = prompt_of(150, 7, stories().model.shape().vocab_size);
  ASSERT_TRUE(h.rt.begin_prompt(0, Span<const int32_t>(p.data(), p.size())).ok());
  const KvCache& kv = h.rt.kv_cache(0);
  ASSERT_EQ(kv.shape().hold, 16u);
  uint32_t compressions = 0;
  for (size_t done = 0; done < p.size();) {
    SlotWork w;
    w.slot = 0;
    w.tokens = p.data() + done;
    w.n = uint32_t(p.size() - done < 16 ? p.size() - done : 16);
    w.prompt = true;
    w.prompt_end = done + w.n == p.size();
    const bool compresses = kv.visible() + w.n > 64;
    ASSERT_TRUE(h.rt.run(&w, 1).ok());
    ASSERT_EQ(w.status, Status::Ok);
    done += w.n;
    EXPECT_LE(kv.visible(), 64u) << "after " << done;
    if (w.prompt_end) break;
    compressions += compresses;
    EXPECT_EQ(kv.hold_len(), compressions * 16 < 16 ? compressions * 16 : 16u) << "after " << done;
    // Held entries are ones attention no longer sees.
    for (uint32_t l = 0; l < kv.shape().n_layers; ++l) {
      for (uint32_t hd = 0; hd < kv.shape().n_kv_heads; ++hd) {
        for (uint32_t i = 0; i < kv.hold_len(); ++i) {
          const int32_t pos = kv.hold_positions(l, hd)[i];
          for (uint32_t j = 0; j < kv.visible(); ++j) ASSERT_NE(kv.positions(l, hd)[kv.physical(j)], pos);
        }
      }
    }
  }
  EXPECT_GE(compressions, 4u);
  EXPECT_EQ(kv.hold_len(), 0u);
  EXPECT_EQ(kv.visible(), 64u);
}

TEST(Batching, BatchedEqualsAloneWithTwoThreads) {
  ASSERT_TRUE(stories().model.loaded());
  port::LinuxThreadPool pool(2);
  check_batched_equals_alone(stories().model, KvPolicyKind::SnapStream, 64, 16, 3, kStoriesRequests, pool.pool());
}

TEST(Batching, SmolLM2BatchedEqualsAlone) {
  const convert::SourceModel* src = test::smollm2_source();
  ASSERT_NE(src, nullptr);
  const std::unique_ptr<test::LoadedModel> l =
      test::convert_and_load(*src, convert::QuantMode::Keep, "batching_smollm2.keel");
  ASSERT_TRUE(l && l->model.loaded());
  // A budget of 96 and chunks of 32: the 150-token prompt is compressed with the lookahead.
  check_batched_equals_alone(l->model, KvPolicyKind::SnapStream, 96, 32, 3,
                             {{20, 12, 1}, {150, 10, 2}, {60, 14, 3}, {7, 12, 4}});
}

TEST(Batching, AStepIsOneChunkPlusOneRowPerOtherSlot) {
  ASSERT_TRUE(stories().model.loaded());
  Host h(stories().model, KvPolicyKind::SnapStream, 64, 16, 3, 4);
  ASSERT_TRUE(h.error.ok()) << h.error.message();
  std::vector<std::vector<int32_t>> prompts;
  for (uint32_t i = 0; i < 3; ++i) prompts.push_back(prompt_of(40, 20 + i, 512));
  for (auto& p : prompts) {
    SchedulerRequest q;
    q.prompt = Span<const int32_t>(p.data(), p.size());
    q.max_new_tokens = 100;
    q.default_stops = false;
    ASSERT_TRUE(h.sched.submit(q).ok());
  }
  std::vector<TokenEvent> ev(h.sched.max_events());
  size_t n = 0;
  auto step = [&] { ASSERT_TRUE(h.sched.step(Span<TokenEvent>(ev.data(), ev.size()), &n).ok()); };
  // Steps 1-3: one chunk each (16 + 16 > 18 rows), the prompts in turn: a younger prompt does
  // not wait for an older one to finish prefilling.
  for (uint32_t s = 0; s < 3; ++s) {
    step();
    EXPECT_EQ(n, 0u);
    for (uint32_t i = 0; i < 3; ++i) EXPECT_EQ(h.sched.slot_state(i).prompt_done, i <= s ? 16u : 0u) << s << " " << i;
  }
  // Then until every slot decodes: each decoding slot gains exactly one token per step, and no
  // prefilling slot goes more than slots - 1 = 2 steps without a chunk.
  uint32_t waited[3] = {0, 0, 0};
  int steps = 0;
  while (steps < 20 &&
         !(h.sched.slot_state(0).phase == SlotPhase::Decoding && h.sched.slot_state(1).phase == SlotPhase::Decoding &&
           h.sched.slot_state(2).phase == SlotPhase::Decoding)) {
    SlotState before[3];
    for (uint32_t i = 0; i < 3; ++i) before[i] = h.sched.slot_state(i);
    step();
    ++steps;
    for (uint32_t i = 0; i < 3; ++i) {
      const SlotState now = h.sched.slot_state(i);
      if (before[i].phase == SlotPhase::Decoding) {
        EXPECT_EQ(now.generated, before[i].generated + 1) << i;
      }
      if (before[i].phase != SlotPhase::Prefilling) continue;
      waited[i] = now.prompt_done == before[i].prompt_done ? waited[i] + 1 : 0;
      EXPECT_LE(waited[i], 2u) << "slot " << i << " waited " << waited[i] << " steps for a chunk";
    }
  }
  EXPECT_LT(steps, 20);
  // All three prompts (40 tokens: chunks of 16, 16, 8) are done and decoding.
  for (uint32_t i = 0; i < 3; ++i) EXPECT_EQ(h.sched.slot_state(i).prompt_done, 40u);
}

TEST(Batching, FullQueueAndBadRequestsAreRefusedWithoutChange) {
  ASSERT_TRUE(stories().model.loaded());
  Host h(stories().model, KvPolicyKind::Streaming, 64, 16, 2, 1);
  ASSERT_TRUE(h.error.ok());
  const std::vector<int32_t> p = prompt_of(10, 1, 512);
  SchedulerRequest q;
  q.prompt = Span<const int32_t>(p.data(), p.size());
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(h.sched.submit(q).ok());
  EXPECT_EQ(h.sched.active(), 2u);
  EXPECT_EQ(h.sched.queued(), 1u);
  const Result<uint64_t> full = h.sched.submit(q);
  ASSERT_FALSE(full.ok());
  EXPECT_EQ(full.error().status(), Status::QueueFull);
  EXPECT_NE(std::string(full.error().message()).find("queue holds its 1"), std::string::npos) << full.error().message();
  SchedulerRequest bad = q;
  bad.max_new_tokens = 0;
  EXPECT_EQ(h.sched.submit(bad).error().status(), Status::InvalidArgument);
  bad = q;
  const int32_t out_of_vocab[2] = {1, 100000};
  bad.prompt = Span<const int32_t>(out_of_vocab, 2);
  EXPECT_EQ(h.sched.submit(bad).error().status(), Status::InvalidArgument);
  bad = q;
  bad.sampling.temperature = -1;
  EXPECT_EQ(h.sched.submit(bad).error().status(), Status::InvalidArgument);
  bad = q;
  bad.prompt = Span<const int32_t>();
  EXPECT_EQ(h.sched.submit(bad).error().status(), Status::InvalidArgument);
  EXPECT_EQ(h.sched.cancel(12345).status(), Status::InvalidArgument);
  EXPECT_EQ(h.sched.queued(), 1u);
  std::map<uint64_t, Outcome> got;
  drain(h.sched, got);
  EXPECT_EQ(got.size(), 3u);
}

// A group holds at most its share of the slots: its further requests wait while later requests
// of other groups and of no group pass them, and run, oldest first, as its own end. withdraw()
// takes a queued request out at once, with no event; a running one stays for cancel().
TEST(Batching, AGroupHoldsItsShareAndWithdrawLeavesNoTrace) {
  ASSERT_TRUE(stories().model.loaded());
  Host h(stories().model, KvPolicyKind::Streaming, 64, 16, 2, 4);
  ASSERT_TRUE(h.error.ok());
  h.sched.set_max_per_group(1);
  const std::vector<int32_t> p = prompt_of(8, 1, 512);  // two prompts fit one pass of 16 + 1 rows
  auto submit = [&](uint64_t group, uint32_t max_new) {
    SchedulerRequest q;
    q.prompt = Span<const int32_t>(p.data(), p.size());
    q.default_stops = false;
    q.max_new_tokens = max_new;
    q.group = group;
    const Result<uint64_t> r = h.sched.submit(q);
    EXPECT_TRUE(r.ok()) << r.error().message();
    return r.ok() ? r.value() : 0;
  };
  auto running = [&] {
    std::set<uint64_t> ids;
    for (uint32_t s = 0; s < h.sched.slots(); ++s)
      if (h.sched.slot_state(s).phase != SlotPhase::Free) ids.insert(h.sched.slot_state(s).request);
    return ids;
  };
  std::vector<TokenEvent> ev(h.sched.max_events());
  std::map<uint64_t, Outcome> got;
  auto step = [&] {
    size_t n = 0;
    ASSERT_TRUE(h.sched.step(Span<TokenEvent>(ev.data(), ev.size()), &n).ok());
    for (size_t j = 0; j < n; ++j) {
      if (ev[j].token >= 0) got[ev[j].request].tokens.push_back(ev[j].token);
      if (ev[j].finish != FinishReason::None) got[ev[j].request].finish = ev[j].finish;
    }
  };
  const uint64_t a1 = submit(7, 3);
  const uint64_t a2 = submit(7, 3);  // a slot is free, but group 7 holds its share: it waits
  EXPECT_EQ(running(), (std::set<uint64_t>{a1}));
  EXPECT_EQ(h.sched.queued(), 1u);
  const uint64_t b1 = submit(8, 3);
  const uint64_t w = submit(0, 3);
  step();
  EXPECT_EQ(running(), (std::set<uint64_t>{a1, b1}));  // b1 passed a2
  EXPECT_EQ(h.sched.last_step_prefilling(), 2u);
  EXPECT_EQ(h.sched.last_step_prompt_tokens(), 2 * p.size());
  EXPECT_EQ(h.sched.queued(), 2u);
  // Withdrawn: out of the queue now, and never reported.
  ASSERT_TRUE(h.sched.withdraw(w).ok());
  EXPECT_EQ(h.sched.queued(), 1u);
  EXPECT_EQ(h.sched.withdraw(w).status(), Status::InvalidArgument);
  EXPECT_EQ(h.sched.withdraw(a1).status(), Status::InvalidArgument);  // running
  // The requests that took a slot from here on, in that order.
  std::vector<uint64_t> started;
  std::set<uint64_t> seen = running();
  for (uint32_t i = 0; i < 100 && (h.sched.active() > 0 || h.sched.queued() > 0); ++i) {
    step();
    for (uint64_t id : running()) {
      if (seen.insert(id).second) started.push_back(id);
    }
    uint32_t of_group = 0;
    for (uint64_t id : running()) of_group += id == a1 || id == a2 ? 1 : 0;
    EXPECT_LE(of_group, 1u);
  }
  EXPECT_EQ(started, (std::vector<uint64_t>{a2}));
  EXPECT_EQ(got.count(w), 0u);
  for (uint64_t id : {a1, a2, b1}) {
    EXPECT_EQ(got[id].finish, FinishReason::MaxTokens) << id;
    EXPECT_EQ(got[id].tokens.size(), 3u) << id;
  }
  EXPECT_EQ(got[a1].tokens, got[a2].tokens);  // waiting did not change what it generates
}

// Random submit / cancel / step sequences: every request ends exactly once, with its tokens
// within its limit; slots and queue never exceed their plan; at the end every slot is free.
TEST(Batching, RandomSubmitCancelStepNeverLeaksASlot) {
  ASSERT_TRUE(stories().model.loaded());
  for (const KvPolicyKind kind : {KvPolicyKind::Full, KvPolicyKind::SnapStream}) {
    SCOPED_TRACE(kv_policy_name(kind));
    const uint32_t slots = 3, queue = 4;
    Host h(stories().model, kind, 96, 16, slots, queue);
    ASSERT_TRUE(h.error.ok()) << h.error.message();
    std::mt19937 g(kind == KvPolicyKind::Full ? 7 : 8);
    std::vector<std::vector<int32_t>> prompts;  // kept alive: the scheduler reads them
    prompts.reserve(2000);
    std::map<uint64_t, uint32_t> limit;  // live request -> max_new
    std::map<uint64_t, uint32_t> tokens;
    std::map<uint64_t, int> finished;
    std::vector<TokenEvent> ev(h.sched.max_events());
    uint32_t submitted = 0, refused = 0, cancels = 0;
    for (int op = 0; op < 1500; ++op) {
      const uint32_t dice = g() % 10;
      if (dice < 4) {
        prompts.push_back(prompt_of(1 + g() % 120, g(), 512));
        SchedulerRequest q;
        q.prompt = Span<const int32_t>(prompts.back().data(), prompts.back().size());
        q.max_new_tokens = 1 + g() % 30;
        q.default_stops = g() % 2 == 0;
        const bool room = h.sched.active() < slots || h.sched.queued() < queue;
        const Result<uint64_t> id = h.sched.submit(q);
        ASSERT_EQ(id.ok(), room) << (id.ok() ? "" : id.error().message());
        if (id.ok()) {
          limit[id.value()] = q.max_new_tokens;
          ++submitted;
        } else {
          ASSERT_EQ(id.error().status(), Status::QueueFull);
          ++refused;
        }
      } else if (dice < 5 && !limit.empty()) {
        auto it = limit.begin();
        std::advance(it, g() % limit.size());
        if (finished.count(it->first) == 0) {
          ASSERT_TRUE(h.sched.cancel(it->first).ok());
          ++cancels;
        }
      } else {
        size_t n = 0;
        ASSERT_TRUE(h.sched.step(Span<TokenEvent>(ev.data(), ev.size()), &n).ok());
        ASSERT_LE(n, h.sched.max_events());
        for (size_t j = 0; j < n; ++j) {
          const TokenEvent& e = ev[j];
          ASSERT_EQ(finished.count(e.request), 0u) << "an event after the end of request " << e.request;
          if (e.token >= 0) ++tokens[e.request];
          ASSERT_LE(tokens[e.request], limit.at(e.request));
          if (e.finish != FinishReason::None) {
            finished[e.request] = 1;
            limit.erase(e.request);
            limit[e.request] = tokens[e.request];  // kept for the bound above; no longer cancellable
          }
        }
      }
      ASSERT_LE(h.sched.active(), slots);
      ASSERT_LE(h.sched.queued(), queue);
      uint32_t busy = 0;
      for (uint32_t s = 0; s < slots; ++s) busy += h.sched.slot_state(s).phase != SlotPhase::Free;
      ASSERT_EQ(busy, h.sched.active());
    }
    std::map<uint64_t, Outcome> rest;
    drain(h.sched, rest);
    for (auto& [id, o] : rest) {
      ASSERT_EQ(finished.count(id), 0u);
      if (o.finish != FinishReason::None) finished[id] = 1;
    }
    EXPECT_EQ(finished.size(), submitted) << "every request ends exactly once";
    EXPECT_GT(refused, 0u);
    EXPECT_GT(cancels, 0u);
    for (uint32_t s = 0; s < slots; ++s) {
      EXPECT_EQ(h.sched.slot_state(s).phase, SlotPhase::Free);
      EXPECT_EQ(h.rt.kv_cache(s).visible(), 0u);
    }
  }
}

struct StoriesShape {
  static constexpr uint32_t vocab_size = 512;
  static constexpr uint32_t dim = 64;
  static constexpr uint32_t n_layers = 5;
  static constexpr uint32_t n_heads = 8;
  static constexpr uint32_t n_kv_heads = 4;
  static constexpr uint32_t head_dim = 8;
  static constexpr uint32_t ffn_dim = 172;
  static constexpr uint32_t context_length = 512;
  static constexpr uint32_t tokenizer_bytes = 5140;
};

// Firmware's way: a static Engine<> with three slots and a queue of two.
Engine<StoriesShape, 64, 3, 16, KvPolicyKind::SnapStream, 2> g_engine;

TEST(Batching, StaticEngineDrivesTheScheduler) {
  ASSERT_TRUE(stories().model.loaded());
  const Error e = g_engine.init(stories().file.data(), stories().file.size(), BackendKind::Native);
  ASSERT_TRUE(e.ok()) << e.message();
  Scheduler& s = g_engine.scheduler();
  EXPECT_EQ(s.slots(), 3u);
  EXPECT_EQ(s.queue_capacity(), 2u);
  std::vector<std::vector<int32_t>> prompts;
  for (uint32_t i = 0; i < 5; ++i) prompts.push_back(prompt_of(10 + 20 * i, 30 + i, 512));
  std::vector<uint64_t> ids;
  for (auto& p : prompts) {
    SchedulerRequest q;
    q.prompt = Span<const int32_t>(p.data(), p.size());
    q.max_new_tokens = 30;
    const Result<uint64_t> id = s.submit(q);
    ASSERT_TRUE(id.ok()) << id.error().message();
    ids.push_back(id.value());
  }
  std::map<uint64_t, Outcome> got;
  drain(s, got);
  for (size_t i = 0; i < prompts.size(); ++i) {
    // The engine's defaults hold what snapstream's lookahead evicts (docs/kv.md, "The hold").
    const Outcome want =
        alone(stories().model, KvPolicyKind::SnapStream, 64, 16, prompts[i], 30, decltype(g_engine)::kKv.hold);
    EXPECT_EQ(got[ids[i]].tokens, want.tokens) << "request " << i;
  }
}

// The C API over the same scheduler: one caller block, a full queue refused with its own status,
// the same tokens as the request alone.
TEST(Batching, CApiSubmitStepCancel) {
  ASSERT_TRUE(stories().model.loaded());
  keel_config cfg{};
  cfg.kv_budget_tokens = 64;
  cfg.slots = 2;
  cfg.chunk_tokens = 16;
  cfg.kv_policy = KEEL_KV_STREAMING;
  cfg.queue_capacity = 1;
  cfg.kv_sinks = 4;  // as alone() runs it
  cfg.backend = KEEL_BACKEND_NATIVE;
  keel_plan_info info{};
  ASSERT_EQ(keel_plan(stories().file.data(), stories().file.size(), &cfg, &info), KEEL_OK);
  std::vector<uint8_t> block(info.total_bytes);
  keel_engine* e = nullptr;
  char err[320] = {};
  ASSERT_EQ(
      keel_init(block.data(), block.size(), stories().file.data(), stories().file.size(), &cfg, &e, err, sizeof err),
      KEEL_OK)
      << err;
  std::vector<std::vector<int32_t>> prompts;
  for (uint32_t i = 0; i < 4; ++i) prompts.push_back(prompt_of(12 + 30 * i, 50 + i, 512));
  std::vector<uint64_t> ids;
  for (uint32_t i = 0; i < 4; ++i) {
    keel_request r{};
    r.prompt = prompts[i].data();
    r.n_prompt = prompts[i].size();
    r.max_new_tokens = 25;
    r.sampling.top_p = 1;  // greedy: temperature 0, the rest off
    r.sampling.repetition_penalty = 1;
    uint64_t id = 0;
    const keel_status st = keel_submit(e, &r, &id);
    if (i < 3) {
      ASSERT_EQ(st, KEEL_OK) << keel_last_error(e);
      ids.push_back(id);
    } else {
      EXPECT_EQ(st, KEEL_ERR_QUEUE_FULL);
      EXPECT_NE(std::string(keel_last_error(e)).find("queue"), std::string::npos) << keel_last_error(e);
    }
  }
  EXPECT_EQ(keel_queued(e), 1u);
  keel_slot_state ss{};
  ASSERT_EQ(keel_get_slot_state(e, 0, &ss), KEEL_OK);
  EXPECT_EQ(ss.phase, uint32_t(KEEL_SLOT_PREFILLING));
  EXPECT_EQ(ss.request, ids[0]);
  ASSERT_EQ(keel_cancel(e, ids[1]), KEEL_OK);
  std::vector<keel_token_event> ev(keel_max_events(e));
  std::map<uint64_t, Outcome> got;
  for (int step = 0; step < 1000; ++step) {
    size_t n = 0;
    ASSERT_EQ(keel_step(e, ev.data(), ev.size(), &n), KEEL_OK) << keel_last_error(e);
    for (size_t j = 0; j < n; ++j) {
      Outcome& o = got[ev[j].request];
      if (ev[j].token >= 0) o.tokens.push_back(ev[j].token);
      if (ev[j].finish != KEEL_FINISH_NONE) o.finish = FinishReason(ev[j].finish);
    }
    bool busy = keel_queued(e) > 0;
    for (uint32_t s = 0; s < 2; ++s) {
      ASSERT_EQ(keel_get_slot_state(e, s, &ss), KEEL_OK);
      busy = busy || ss.phase != KEEL_SLOT_FREE;
    }
    if (!busy) break;
  }
  EXPECT_EQ(got[ids[1]].finish, FinishReason::Cancelled);
  EXPECT_TRUE(got[ids[1]].tokens.empty());
  for (const size_t i : {size_t(0), size_t(2)}) {
    const Outcome want = alone(stories().model, KvPolicyKind::Streaming, 64, 16, prompts[i], 25);
    EXPECT_EQ(got[ids[i]].tokens, want.tokens) << "request " << i;
    EXPECT_EQ(got[ids[i]].finish, want.finish) << "request " << i;
  }
  size_t n = 0;
  EXPECT_EQ(keel_step(e, ev.data(), 1, &n), KEEL_ERR_BAD_ARGUMENT) << "room for fewer events than a step reports";
}

}  // namespace
}  // namespace keel
