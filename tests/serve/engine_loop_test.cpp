// tools/keel/serve/engine_loop.h on stories260K: a request's tokens do not depend on what runs
// beside it, the queue is bounded, `full` refuses what cannot fit, one client holds at most its
// share of the slots, the prefill count of each step adds up to the prompts, and random submit /
// cancel / step sequences never leak a slot or lose a request.
#include "keel/serve/engine_loop.h"

#include <gtest/gtest.h>

#include <map>
#include <set>

#include "keel/serve/prompt.h"
#include "keel/cli/session.h"
#include "support/test_support.h"

namespace keel::cli {
namespace {

struct Rig {
  Session session;
  HostTokenizer tok;
  Rig(uint32_t slots, const char* policy = "snapstream", uint32_t budget = 256) {
    SessionOptions o;
    o.model_path = test::stories260k_keel();
    o.threads = 1;
    o.kv_policy = policy;
    o.slots = slots;
    // Room for the largest queue a test gives its loop.
    o.queue_capacity = EngineLoop::plan_queue_capacity(slots, 8);
    std::string error;
    EXPECT_TRUE(session.load(o, error)) << error;
    EXPECT_TRUE(session.resolve_policy(nullptr, error)) << error;
    EXPECT_TRUE(session.start(budget, error)) << error;
    EXPECT_TRUE(tok.init(session.model(), error)) << error;
  }
  LoopRequest request(const std::string& text, uint32_t max_tokens) {
    LoopRequest r;
    std::string error;
    EXPECT_TRUE(tok.encode(text, true, false, r.prompt, error)) << error;
    r.max_tokens = max_tokens;
    return r;  // greedy sampler
  }
};

// Runs until idle; tokens per id and how each ended.
void drain(EngineLoop& loop, std::map<uint64_t, std::vector<int32_t>>& tokens, std::map<uint64_t, FinishReason>& ends) {
  std::vector<LoopEvent> events;
  for (int guard = 0; !loop.idle() && guard < 100000; ++guard) {
    events.clear();
    loop.step(events);
    for (const LoopEvent& ev : events) {
      EXPECT_EQ(ends.count(ev.id), 0u) << "event after the end of request " << ev.id;
      if (ev.token >= 0) tokens[ev.id].push_back(ev.token);
      if (ev.finish != FinishReason::None) ends[ev.id] = ev.finish;
    }
  }
  EXPECT_TRUE(loop.idle());
}

const char* const kPrompts[] = {
    "Once upon a time", "The little dog", "Lily wanted to play with", "One day, a big bird flew over the house and saw",
    "Tom had a red ball",
    // Longer than a prefill chunk (64): prefilled over several steps.
    "Once upon a time there was a little girl named Lily. She liked to play in the park with "
    "her friends. One day she saw a big red ball under a tree. She ran to the ball and "
    "picked it up. Then a small dog came and wanted to play too. Lily threw the ball and "
    "the dog ran after it. They played all day and"};

TEST(EngineLoop, TokensDoNotDependOnWhatRunsBeside) {
  Rig rig(3);
  EngineLoop loop(rig.session.runtime(), 8);
  std::vector<std::vector<int32_t>> alone;
  for (const char* p : kPrompts) {
    std::map<uint64_t, std::vector<int32_t>> tokens;
    std::map<uint64_t, FinishReason> ends;
    const SubmitResult s = loop.submit(rig.request(p, 40));
    ASSERT_EQ(s.kind, SubmitResult::Accepted);
    drain(loop, tokens, ends);
    alone.push_back(tokens[s.id]);
    EXPECT_FALSE(alone.back().empty());
  }
  // All at once: three run, the others wait.
  std::vector<uint64_t> ids;
  for (const char* p : kPrompts) ids.push_back(loop.submit(rig.request(p, 40)).id);
  std::map<uint64_t, std::vector<int32_t>> tokens;
  std::map<uint64_t, FinishReason> ends;
  drain(loop, tokens, ends);
  for (size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(tokens[ids[i]], alone[i]) << kPrompts[i];
}

TEST(EngineLoop, QueueIsBounded) {
  Rig rig(2);
  EngineLoop loop(rig.session.runtime(), 3);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(loop.submit(rig.request("Once", 8)).kind, SubmitResult::Accepted) << i;
  EXPECT_EQ(loop.submit(rig.request("Once", 8)).kind, SubmitResult::QueueFull);
  std::vector<LoopEvent> events;
  loop.step(events);  // two slots admitted, three wait: still full
  EXPECT_EQ(loop.active(), 2u);
  EXPECT_EQ(loop.queued(), 3u);
  EXPECT_EQ(loop.submit(rig.request("Once", 8)).kind, SubmitResult::QueueFull);
}

TEST(EngineLoop, FullPolicyRefusesWhatCannotFit) {
  Rig rig(1, "full", 32);
  EngineLoop loop(rig.session.runtime(), 1);
  std::string text;
  for (int i = 0; i < 20; ++i) text += "Once upon a time ";
  const SubmitResult s = loop.submit(rig.request(text, 4));
  EXPECT_EQ(s.kind, SubmitResult::Refused);
  EXPECT_NE(s.error.find("32 tokens"), std::string::npos) << s.error;
  // Generation stops at the budget.
  const SubmitResult ok = loop.submit(rig.request("Once", 100));
  ASSERT_EQ(ok.kind, SubmitResult::Accepted);
  std::map<uint64_t, std::vector<int32_t>> tokens;
  std::map<uint64_t, FinishReason> ends;
  drain(loop, tokens, ends);
  if (ends[ok.id] != FinishReason::StopToken) {
    EXPECT_EQ(ends[ok.id], FinishReason::KvFull);
  }
  EXPECT_LE(tokens[ok.id].size() + rig.request("Once", 1).prompt.size(), 33u);
}

// The ids running in slots.
std::set<uint64_t> running(const EngineLoop& loop) {
  std::vector<SlotState> states;
  loop.slot_states(states);
  std::set<uint64_t> ids;
  for (const SlotState& st : states)
    if (st.phase != SlotPhase::Free) ids.insert(st.id);
  return ids;
}

TEST(EngineLoop, OneClientHoldsAtMostItsShare) {
  Rig rig(2);
  EngineLoop loop(rig.session.runtime(), 8, 1);
  auto from = [&](const char* client, const char* text) {
    LoopRequest r = rig.request(text, 30);
    r.client = client;
    const SubmitResult s = loop.submit(std::move(r));
    EXPECT_EQ(s.kind, SubmitResult::Accepted) << s.error;
    return s.id;
  };
  const uint64_t a1 = from("10.0.0.1", kPrompts[0]);
  const uint64_t a2 = from("10.0.0.1", kPrompts[1]);
  const uint64_t b1 = from("10.0.0.2", kPrompts[2]);
  std::vector<LoopEvent> events;
  loop.step(events);
  // a2 came before b1 but its client holds its one slot: b1 passes it.
  EXPECT_EQ(running(loop), (std::set<uint64_t>{a1, b1}));
  EXPECT_EQ(loop.queued(), 1u);
  // A request without a client is not limited.
  LoopRequest anon = rig.request(kPrompts[3], 30);
  const uint64_t n1 = loop.submit(anon).id;
  // The client's slot freed by a cancel goes to its own waiting request at the next step.
  EXPECT_TRUE(loop.cancel(a1));
  events.clear();
  loop.step(events);
  EXPECT_EQ(running(loop), (std::set<uint64_t>{a2, b1}));
  std::map<uint64_t, std::vector<int32_t>> tokens;
  std::map<uint64_t, FinishReason> ends;
  for (const LoopEvent& ev : events) {
    if (ev.token >= 0) tokens[ev.id].push_back(ev.token);
    if (ev.finish != FinishReason::None) ends[ev.id] = ev.finish;
  }
  drain(loop, tokens, ends);
  EXPECT_EQ(ends.count(a1), 0u);
  for (uint64_t id : {a2, b1, n1}) EXPECT_EQ(ends.count(id), 1u) << id;
  // Waiting did not change what a request generates.
  EngineLoop alone(rig.session.runtime(), 8);
  const uint64_t solo = alone.submit(rig.request(kPrompts[1], 30)).id;
  std::map<uint64_t, std::vector<int32_t>> solo_tokens;
  std::map<uint64_t, FinishReason> solo_ends;
  drain(alone, solo_tokens, solo_ends);
  EXPECT_EQ(tokens[a2], solo_tokens[solo]);
}

TEST(EngineLoop, PrefillTokensAddUpToThePrompts) {
  Rig rig(2);
  EngineLoop loop(rig.session.runtime(), 4);
  // Two prompts longer than a chunk, one finishing in the step that runs its last chunk.
  const LoopRequest long1 = rig.request(kPrompts[5], 1);
  const LoopRequest long2 = rig.request(std::string(kPrompts[5]) + " " + kPrompts[5], 5);
  const size_t want = long1.prompt.size() + long2.prompt.size();
  ASSERT_GT(long1.prompt.size(), 64u);
  loop.submit(long1);
  loop.submit(long2);
  std::vector<LoopEvent> events;
  uint64_t counted = 0;
  int prefilling_steps = 0;
  for (int guard = 0; !loop.idle() && guard < 1000; ++guard) {
    events.clear();
    loop.step(events);
    counted += loop.last_prefill_tokens();
    prefilling_steps += loop.last_step_prefilled() ? 1 : 0;
  }
  EXPECT_EQ(counted, want);
  EXPECT_GE(prefilling_steps, 2);
  // Decode-only steps run no prompt.
  loop.submit(rig.request("Once", 8));
  events.clear();
  loop.step(events);  // the whole prompt in one chunk
  events.clear();
  loop.step(events);
  EXPECT_FALSE(loop.last_step_prefilled());
  EXPECT_EQ(loop.last_prefill_tokens(), 0u);
}

TEST(EngineLoop, RandomSubmitCancelNeverLeaksASlot) {
  Rig rig(3, "snapstream", 64);
  EngineLoop loop(rig.session.runtime(), 4);
  uint64_t s = 0x9E3779B97F4A7C15ull;
  auto below = [&](uint64_t n) {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    return s % n;
  };
  std::set<uint64_t> live;
  std::map<uint64_t, FinishReason> ends;
  std::vector<LoopEvent> events;
  std::vector<SlotState> states;
  size_t submitted = 0, cancelled = 0;
  for (int op = 0; op < 600; ++op) {
    const uint64_t what = below(10);
    if (what < 4) {
      std::string text;
      for (uint64_t k = below(60) + 1; k > 0; --k) text += "the cat ";
      const SubmitResult r = loop.submit(rig.request(text, uint32_t(below(12) + 1)));
      if (r.kind == SubmitResult::Accepted) live.insert(r.id), ++submitted;
      ASSERT_NE(r.kind, SubmitResult::Refused) << r.error;
    } else if (what < 6 && !live.empty()) {
      auto it = live.begin();
      std::advance(it, below(live.size()));
      EXPECT_TRUE(loop.cancel(*it));
      EXPECT_FALSE(loop.cancel(*it));
      live.erase(it);
      ++cancelled;
    } else {
      events.clear();
      loop.step(events);
      for (const LoopEvent& ev : events) {
        ASSERT_EQ(live.count(ev.id), 1u) << "event for request " << ev.id << " that is not live";
        if (ev.finish != FinishReason::None) {
          EXPECT_NE(ev.finish, FinishReason::Error) << ev.error;
          live.erase(ev.id);
          ends[ev.id] = ev.finish;
        }
      }
    }
    loop.slot_states(states);
    uint32_t busy = 0;
    for (const SlotState& st : states) busy += st.phase != SlotPhase::Free;
    ASSERT_EQ(busy, loop.active());
    ASSERT_EQ(busy + loop.queued(), live.size()) << "op " << op;
  }
  std::map<uint64_t, std::vector<int32_t>> tokens;
  drain(loop, tokens, ends);
  loop.slot_states(states);
  for (const SlotState& st : states) {
    EXPECT_EQ(st.phase, SlotPhase::Free);
    EXPECT_EQ(st.kv_tokens, 0u);
  }
  EXPECT_EQ(ends.size() + cancelled, submitted);
  EXPECT_GT(cancelled, 10u);
  EXPECT_GT(ends.size(), 10u);
}

}  // namespace
}  // namespace keel::cli
