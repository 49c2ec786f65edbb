// The hold (docs/kv.md, "The hold"), at a scale where every score is chosen: a chunked prefill
// under snapstream whose compressions the lookahead judges, and one entry (the "needle") that
// the lookahead scores lowest and the real question highest. Without the hold the lookahead's
// first judgement is final and the needle is gone; with it the prompt's last compression, which
// the real question judges, finds the needle among the held entries and keeps it. All the while
// attention sees no more than the budget, and the hold is empty once the prompt is in.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "kv/kv_cache.h"
#include "kv/kv_hooks.h"
#include "kv/kv_manager.h"
#include "kv/kv_policy.h"
#include "kv/slot_memory.h"
#include "llm/plan.h"

namespace keel {
namespace {

constexpr uint32_t kHeadDim = 2;  // key[0] = position; value[0] = position + kValueOffset
constexpr int32_t kValueOffset = 1000;
constexpr int32_t kNeedle = 41;
constexpr float kLookahead = 1.0f, kQuestion = 2.0f;  // query[0] of each kind of observer

// Scores an entry by its position (read from its key, so keys that move keep their identity):
// every entry gets a middling weight that varies with the position, except the needle, which
// the lookahead's queries hardly see and the real question's look for.
class ChosenScores final : public KvModelHooks {
 public:
  uint32_t rope_pairs() const override { return 1; }
  void rope_angles(int64_t, float* cos, float* sin) const override {
    cos[0] = 1.0f;
    sin[0] = 0.0f;
  }
  void rotate_keys(uint16_t*, uint32_t, int64_t) const override {}  // keys name positions here
  void attention_row(uint32_t, const float* q, const float*, const float*, const uint16_t* keys, const int32_t*,
                     uint32_t, uint32_t total, const uint16_t* extra_keys, const int32_t* extra_positions,
                     uint32_t extra, int64_t t, float* row) override {
    float sum = 0.0f;
    for (uint32_t i = 0; i < total + extra; ++i) {
      const uint16_t* k = i < total ? keys + uint64_t(i) * kHeadDim : extra_keys + uint64_t(i - total) * kHeadDim;
      const int32_t pos = int32_t(k[0]);
      if (i >= total) {
        EXPECT_EQ(extra_positions[i - total], pos);
      }
      if (pos > t) {
        row[i] = 0.0f;  // causal
        continue;
      }
      row[i] = pos == kNeedle ? (q[0] == kQuestion ? 50.0f : 0.01f) : 1.0f + float((pos * 7) % 5);
      sum += row[i];
    }
    for (uint32_t i = 0; i < total + extra; ++i) row[i] /= sum;
  }
};

struct Prefill {
  static constexpr uint32_t kBudget = 24, kChunk = 4, kWindow = 8, kSinks = 1, kObs = 2;
  KvPolicyConfig policy;
  KvShape shape;
  std::vector<uint16_t> kv_rows, hold_rows;
  std::vector<int32_t> positions, hold_positions;
  std::vector<float> obs, look, rows, sums, pooled, rope;
  std::vector<uint32_t> order, keep, candidates;
  std::vector<uint8_t> compact;
  std::vector<int32_t> lookahead_tokens;
  KvManager manager;
  SlotMemory mem;  // the slot's memory, driven as Runtime drives it
  KvCache& kv = mem.cache();
  ChosenScores hooks;
  uint32_t lookahead_passes = 0;

  explicit Prefill(uint32_t hold) {
    policy.kind = KvPolicyKind::SnapStream;
    policy.sinks = kSinks;
    policy.window = kWindow;
    policy.obs_window = kObs;
    policy.snap_kernel = 1;  // no pooling: each entry stands on its own score
    const uint32_t cap = kBudget + kChunk;
    shape = KvShape{1, 1, kHeadDim, cap, kBudget, kHeadDim, kObs, KvType::F16, 0, 0, hold};
    kv_rows.assign(2ull * cap * kHeadDim, 0);
    positions.assign(cap, 0);
    hold_rows.assign(2ull * hold * kHeadDim, 0);
    hold_positions.assign(2ull * hold, 0);
    obs.assign(kObs * kHeadDim, 0.0f);
    look.assign(kObs * kHeadDim, 0.0f);
    KvBuffers b;
    b.keys_values = kv_rows.data();
    b.positions = positions.data();
    b.observations = obs.data();
    b.lookahead = look.data();
    b.hold_keys_values = hold ? hold_rows.data() : nullptr;
    b.hold_positions = hold ? hold_positions.data() : nullptr;
    lookahead_tokens.assign(kObs, -1);
    EXPECT_TRUE(mem.init(shape, b, KvShape{}, KvBuffers{}, lookahead_tokens.data(), &manager).ok());
    const uint32_t entries = cap + hold;
    rows.assign(entries, 0.0f);
    sums.assign(entries, 0.0f);
    pooled.assign(entries, 0.0f);
    order.assign(entries, 0);
    keep.assign(entries, 0);
    candidates.assign(entries, 0);
    compact.assign(uint64_t(cap) * (kHeadDim * 4 + 4), 0);
    rope.assign(2 * kObs * 4, 0.0f);
    SnapScratch s;
    s.rows = rows.data();
    s.sums = sums.data();
    s.pooled = pooled.data();
    s.order = order.data();
    s.keep = keep.data();
    s.candidates = candidates.data();
    s.compact = compact.data();
    s.rope = rope.data();
    s.row_entries = entries;
    EXPECT_TRUE(manager.init(policy, kBudget, kChunk, cap, s, nullptr, &hooks).ok());
  }

  // What the transformer writes for a chunk: keys, values and positions behind the visible
  // entries, and the chunk's own queries (the real question's, at the prompt's end).
  void stage(uint32_t n) {
    const int64_t p0 = kv.next_position();
    for (uint32_t j = 0; j < n; ++j) {
      const uint32_t at = kv.visible() + j;
      kv.positions(0, 0)[at] = int32_t(p0 + j);
      kv.keys(0, 0)[at * kHeadDim] = uint16_t(p0 + j);
      kv.values(0, 0)[at * kHeadDim] = uint16_t(p0 + j + kValueOffset);
      kv.observation(0, p0 + j)[0] = kQuestion;
    }
    kv.advance(n);
  }
  // The lookahead pass over the prompt's last tokens: their queries only, the cache as it was.
  void lookahead(uint32_t length) {
    const Span<const int32_t> t = mem.begin_lookahead();
    EXPECT_EQ(t.size(), kObs);
    for (uint32_t i = 0; i < t.size(); ++i) {
      EXPECT_EQ(t[i], int32_t(length - kObs + i)) << "the prompt's end";
      kv.observation(0, kv.next_position() + i)[0] = kLookahead;
    }
    mem.end_lookahead(true);
    ++lookahead_passes;
  }
  // Positions attention sees (logical order), checking each value travelled with its key.
  std::vector<int32_t> visible() const {
    std::vector<int32_t> out;
    for (uint32_t i = 0; i < kv.visible(); ++i) {
      const uint32_t p = kv.physical(i);
      const int32_t pos = kv.positions(0, 0)[p];
      EXPECT_EQ(int32_t(kv.keys(0, 0)[p * kHeadDim]), pos);
      EXPECT_EQ(int32_t(kv.values(0, 0)[p * kHeadDim]), pos + kValueOffset);
      out.push_back(pos);
    }
    return out;
  }
  std::vector<int32_t> held() const {
    return std::vector<int32_t>(kv.hold_positions(0, 0), kv.hold_positions(0, 0) + kv.hold_len());
  }
  // A prompt of `length` tokens in chunks, as Runtime::run settles them: every chunk but the
  // last is judged by the lookahead, run again whenever the slot says it is due. Returns whether
  // the needle was ever in the hold.
  bool run(uint32_t length) {
    std::vector<int32_t> prompt(length);
    for (uint32_t i = 0; i < length; ++i) prompt[i] = int32_t(i);
    EXPECT_TRUE(mem.begin_prompt(Span<const int32_t>(prompt.data(), prompt.size())).ok());
    EXPECT_TRUE(mem.lookahead_pending()) << "a prompt over the budget looks ahead first";
    bool needle_held = false;
    for (uint32_t done = 0; done < length;) {
      if (mem.lookahead_pending()) lookahead(length);
      const uint32_t n = length - done < kChunk ? length - done : kChunk;
      const bool end = done + n == length;
      stage(n);
      EXPECT_TRUE(mem.settle(n, true, end).ok());
      done += n;
      // The bound attention sees, after every chunk; the hold is out of its sight.
      EXPECT_LE(kv.visible(), kBudget) << "after " << done;
      EXPECT_LE(kv.hold_len(), shape.hold) << "after " << done;
      const std::vector<int32_t> h = held();
      needle_held |= std::find(h.begin(), h.end(), kNeedle) != h.end();
      const std::vector<int32_t> v = visible();
      EXPECT_TRUE(std::is_sorted(v.begin(), v.end())) << "after " << done;
      EXPECT_TRUE(std::adjacent_find(v.begin(), v.end()) == v.end()) << "after " << done;
      for (int32_t p : h) EXPECT_TRUE(std::find(v.begin(), v.end(), p) == v.end()) << p << " both held and visible";
    }
    return needle_held;
  }
};

bool contains(const std::vector<int32_t>& v, int32_t x) { return std::find(v.begin(), v.end(), x) != v.end(); }

// The needle leaves the ring two compressions before the prompt's end (W / chunk = 2): the
// lookahead evicts it at once, and only the hold lets the real question see it again.
TEST(SnapKvHold, TheRealQuestionJudgesWhatTheLookaheadEvicted) {
  constexpr uint32_t kLength = 58;  // the needle (41) leaves the ring with the chunk ending at 52
  Prefill without(0);
  EXPECT_FALSE(without.run(kLength));
  EXPECT_FALSE(contains(without.visible(), kNeedle)) << "the lookahead's judgement alone lost it";

  Prefill with(Prefill::kWindow);
  EXPECT_TRUE(with.run(kLength)) << "the needle never reached the hold";
  const std::vector<int32_t> v = with.visible();
  EXPECT_TRUE(contains(v, kNeedle)) << "the real question did not get it back";
  EXPECT_EQ(v.size(), Prefill::kBudget);
  EXPECT_EQ(with.kv.hold_len(), 0u) << "the prompt's last compression empties the hold";
  EXPECT_EQ(with.kv.ring_len(), Prefill::kWindow);
  // The ring is the prompt's last W tokens either way.
  const std::vector<int32_t> w = without.visible();
  EXPECT_EQ(std::vector<int32_t>(v.end() - Prefill::kWindow, v.end()),
            std::vector<int32_t>(w.end() - Prefill::kWindow, w.end()));
}

// The slot's memory runs the lookahead when it is due: once before the prompt, again each
// W / chunk = 2 chunks once the prompt is past the budget; after the prompt's last chunk no
// lookahead queries or held entries remain, and clear() forgets the sequence.
TEST(SlotMemory, LooksAheadWhenDueAndLeavesNothingAfterThePrompt) {
  Prefill p(Prefill::kWindow);
  p.run(58);
  // 58 tokens are 15 chunks of at most 4. One pass before the prompt; from the 6th chunk on
  // the cache is full (the next chunk is compressed) and the queries are older than W / chunk =
  // 2 chunks after chunks 6, 8, 10, 12 and 14: six passes.
  EXPECT_EQ(p.lookahead_passes, 6u);
  EXPECT_FALSE(p.mem.lookahead_pending());
  EXPECT_EQ(p.kv.lookahead_count(), 0u);
  EXPECT_EQ(p.kv.hold_len(), 0u);
  EXPECT_EQ(p.kv.next_position(), 58);
  EXPECT_EQ(p.mem.local(), nullptr) << "no local layers";
  p.mem.clear();
  EXPECT_EQ(p.kv.visible(), 0u);
  EXPECT_EQ(p.kv.next_position(), 0);
  // A prompt that fits the budget is not looked ahead at.
  std::vector<int32_t> short_prompt(Prefill::kBudget, 7);
  EXPECT_TRUE(p.mem.begin_prompt(Span<const int32_t>(short_prompt.data(), short_prompt.size())).ok());
  EXPECT_FALSE(p.mem.lookahead_pending());
}

// A hold smaller than what the lookahead evicts between the needle's eviction and the prompt's
// end keeps only the newest evictions: the needle is pushed out before the real question comes.
TEST(SnapKvHold, KeepsTheNewestEvictionsOnly) {
  Prefill small(Prefill::kChunk);
  EXPECT_TRUE(small.run(58));
  EXPECT_FALSE(contains(small.visible(), kNeedle));
  // The needle's own compression is the prompt's second last: a hold of one chunk then has it.
  Prefill late(Prefill::kChunk);
  EXPECT_TRUE(late.run(54));
  EXPECT_TRUE(contains(late.visible(), kNeedle));
}

// The plan: snapstream and rocketkv hold what they are asked to (none by default), counted in
// the KV bytes; the policies without a ring hold none.
TEST(SnapKvHold, ThePlanCountsTheHold) {
  const PlanShape shape{49152, 576, 30, 9, 3, 64, 1536, 0};  // SmolLM2-135M
  PlanConfig c;
  c.kv_budget_tokens = 1024;
  KvPolicyConfig kv;
  kv.kind = KvPolicyKind::SnapStream;
  EXPECT_EQ(plan_memory(shape, c, kv).kv_hold_tokens, 0u);
  EXPECT_EQ(plan_memory(shape, c, kv).regions[uint32_t(Region::KvHoldKeysValues)].bytes, 0u);
  kv.hold = 256;
  for (KvPolicyKind k : {KvPolicyKind::SnapStream, KvPolicyKind::RocketKV, KvPolicyKind::SnapKV,
                         KvPolicyKind::Streaming, KvPolicyKind::Full}) {
    kv.kind = k;
    const MemoryPlan p = plan_memory(shape, c, kv);
    const uint64_t hold = kv_policy_is_snapstream_like(k) ? 256 : 0;
    EXPECT_EQ(p.kv_hold_tokens, hold) << kv_policy_name(k);
    EXPECT_EQ(p.regions[uint32_t(Region::KvHoldKeysValues)].elements, 2 * 30 * 3 * hold * 64) << kv_policy_name(k);
    EXPECT_EQ(p.regions[uint32_t(Region::KvHoldPositions)].elements, 30 * 3 * hold * 2) << kv_policy_name(k);
    if (kv_policy_uses_snapkv(k)) {
      EXPECT_EQ(p.regions[uint32_t(Region::SnapRows)].elements, 1024 + 64 + hold) << kv_policy_name(k);
    }
  }
}

}  // namespace
}  // namespace keel
