// The KV cache's ring, sink pinning and compaction bookkeeping, and SnapKV selection, on small
// hand-checked cases.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <vector>

#include "core/arena.h"
#include "kv/kv_cache.h"
#include "kv/kv_policy.h"
#include "kv/snapkv.h"

namespace keel {
namespace {

struct Cache {
  std::vector<uint8_t> mem;
  Arena arena;
  KvCache kv;
  explicit Cache(uint32_t budget, uint32_t chunk) : mem(1 << 20) {
    arena.reset(mem.data() + (64 - reinterpret_cast<uintptr_t>(mem.data()) % 64) % 64, mem.size() - 64);
    KvShape s{1, 1, 2, budget + chunk, budget, 2, 0};
    KvBuffers b;
    b.keys_values = arena.allocate_array<uint16_t>(2ull * s.capacity * s.head_dim);
    b.positions = arena.allocate_array<int32_t>(s.capacity);
    EXPECT_TRUE(kv.init(s, b).ok());
  }
  // Stages n tokens with consecutive positions (what the transformer writes), key = position.
  void stage(uint32_t n) {
    const int64_t p0 = kv.next_position();
    for (uint32_t j = 0; j < n; ++j) {
      const uint32_t at = kv.visible() + j;
      kv.positions(0, 0)[at] = int32_t(p0 + j);
      kv.keys(0, 0)[at * 2] = uint16_t(p0 + j);
    }
    kv.advance(n);
  }
  // Positions in logical order.
  std::vector<int32_t> logical() const {
    std::vector<int32_t> out;
    for (uint32_t i = 0; i < kv.visible(); ++i) out.push_back(kv.positions(0, 0)[kv.physical(i)]);
    return out;
  }
};

std::vector<int32_t> range(int32_t a, int32_t b) {
  std::vector<int32_t> v(size_t(b - a));
  std::iota(v.begin(), v.end(), a);
  return v;
}

TEST(KvCache, RingKeepsTheLastBudgetTokensInOrder) {
  Cache c(8, 4);
  c.stage(4);
  c.kv.append_ring(4);
  EXPECT_EQ(c.logical(), range(0, 4));
  c.stage(4);
  c.kv.append_ring(4);
  EXPECT_EQ(c.logical(), range(0, 8));
  EXPECT_EQ(c.kv.evicted(), 0u);
  c.stage(3);
  c.kv.append_ring(3);  // wraps
  EXPECT_EQ(c.logical(), range(3, 11));
  EXPECT_EQ(c.kv.evicted(), 3u);
  for (int i = 0; i < 20; ++i) {
    c.stage(1);
    c.kv.append_ring(1);
  }
  EXPECT_EQ(c.logical(), range(23, 31));
  EXPECT_EQ(c.kv.visible(), 8u);
}

TEST(KvCache, ChunkLargerThanFreeRoomOverwritesOldest) {
  Cache c(8, 6);
  c.stage(5);
  c.kv.append_ring(5);
  c.stage(6);  // 11 > 8: keeps positions 3..10
  c.kv.append_ring(6);
  EXPECT_EQ(c.logical(), range(3, 11));
}

TEST(KvCache, SinksStayWhileTheRestStreams) {
  Cache c(8, 4);
  c.stage(4);
  c.kv.append_ring(4);
  c.stage(4);
  c.kv.append_ring(4);
  c.stage(4);
  c.kv.pin_sinks(2);  // at the first overflow
  c.kv.append_ring(4);
  std::vector<int32_t> want = {0, 1};
  for (int32_t p : range(6, 12)) want.push_back(p);
  EXPECT_EQ(c.logical(), want);
  for (int i = 0; i < 13; ++i) {
    c.stage(1);
    c.kv.append_ring(1);
  }
  want = {0, 1};
  for (int32_t p : range(19, 25)) want.push_back(p);
  EXPECT_EQ(c.logical(), want);
}

void no_rotation(void*, uint16_t*, uint32_t, int64_t) {}

TEST(KvCache, CompactionKeepsTheChosenEntriesInOrder) {
  Cache c(8, 4);
  c.stage(4);
  c.kv.append_ring(4);
  c.stage(4);
  c.kv.append_ring(4);
  c.stage(3);  // staged, not yet in the ring: logical 8..10
  const uint32_t keep[] = {0, 2, 5, 9, 10};
  std::vector<uint8_t> scratch(c.kv.compact_scratch_bytes());
  c.kv.compact_head(0, 0, keep, 5, 0, 3, no_rotation, nullptr, scratch.data());
  c.kv.finish_compact(5, 0, 3);
  EXPECT_EQ(c.kv.prefix(), 5u);
  EXPECT_EQ(c.kv.ring_len(), 0u);
  EXPECT_EQ(c.logical(), (std::vector<int32_t>{0, 2, 5, 9, 10}));
  EXPECT_EQ(c.kv.evicted(), 6u);
  // New tokens go to the ring behind the prefix.
  c.stage(2);
  c.kv.append_ring(2);
  EXPECT_EQ(c.logical(), (std::vector<int32_t>{0, 2, 5, 9, 10, 11, 12}));
}

// Where compaction rotates keys: with Cache positions the new prefix's keys go from their
// rotation to their cache index (and a second compaction moves them from that index on); with
// Original positions nothing is ever rotated, rotation_of() is every entry's position, and what
// goes to the hold is recorded at its position.
TEST(KvCache, CompactionRotatesThePrefixOnlyWithCachePositions) {
  // A run of keys re-rotated alike: its first key's index in the compaction's new order, its
  // length and the distance.
  struct Rotation {
    int64_t first, n, by;
    bool operator==(const Rotation& o) const { return first == o.first && n == o.n && by == o.by; }
  };
  struct Recorder {
    const uint16_t* scratch;  // the compaction's gathered keys, 2 halves a row here
    std::vector<Rotation> got;
  };
  auto record = [](void* ctx, uint16_t* keys, uint32_t n, int64_t by) {
    auto* r = static_cast<Recorder*>(ctx);
    r->got.push_back({(keys - r->scratch) / 2, n, by});
  };
  for (KvPositions mode : {KvPositions::Cache, KvPositions::Original}) {
    SCOPED_TRACE(mode == KvPositions::Cache ? "cache" : "original");
    constexpr uint32_t kBudget = 8, kChunk = 4, kHold = 4;
    KvShape s{1, 1, 2, kBudget + kChunk, kBudget, 2, 0, KvType::F16, 0, 0, kHold, mode};
    std::vector<uint16_t> rows(2ull * s.capacity * 2), hold_rows(2ull * kHold * 2);
    std::vector<int32_t> positions(s.capacity), hold_positions(2ull * kHold);
    KvBuffers b;
    b.keys_values = rows.data();
    b.positions = positions.data();
    b.hold_keys_values = hold_rows.data();
    b.hold_positions = hold_positions.data();
    KvCache kv;
    ASSERT_TRUE(kv.init(s, b).ok());
    auto stage = [&](uint32_t n) {
      for (uint32_t j = 0; j < n; ++j) kv.positions(0, 0)[kv.visible() + j] = int32_t(kv.next_position() + j);
      kv.advance(n);
    };
    stage(4);
    kv.append_ring(4);
    stage(4);
    kv.append_ring(4);
    stage(3);  // logical 8..10
    std::vector<uint8_t> scratch(kv.compact_scratch_bytes());
    Recorder rec{reinterpret_cast<const uint16_t*>(scratch.data()), {}};
    std::vector<Rotation>& got = rec.got;
    const uint32_t keep[] = {0, 2, 5, 9, 10};  // prefix 0, 2, 5; ring 9, 10
    kv.compact_head(0, 0, keep, 5, 2, 3, record, &rec, scratch.data(), HoldMode::Fill);
    kv.finish_compact(5, 2, 3, HoldMode::Fill);
    const bool cache = mode == KvPositions::Cache;
    // Position 2 to index 1, position 5 to index 2: two runs of one key.
    EXPECT_EQ(got, cache ? (std::vector<Rotation>{{1, 1, -1}, {2, 1, -3}}) : std::vector<Rotation>{});
    EXPECT_EQ(kv.index_rotated(), cache ? 3u : 0u);
    for (uint32_t i = 0; i < kv.visible(); ++i) {
      const int64_t position = kv.positions(0, 0)[kv.physical(i)];
      EXPECT_EQ(kv.rotation_of(0, 0, i), cache && i < 3 ? int64_t(i) : position) << "entry " << i;
    }
    // Evicted: positions 1, 3, 4, 6, 7, 8; the hold keeps the newest four (4, 6, 7, 8), each at
    // the rotation it had when it left (all ring entries, so their positions).
    ASSERT_EQ(kv.hold_len(), kHold);
    for (uint32_t i = 0; i < kHold; ++i) EXPECT_EQ(kv.hold_rotations(0, 0)[i], kv.hold_positions(0, 0)[i]);

    // A second compaction evicts the prefix's entry at position 2 and moves the ring's oldest
    // (position 9) into the prefix: with Cache positions the entry at position 5 goes from
    // cache index 2 to 1, position 9 from its position to index 2, and what leaves the prefix
    // is held at the cache index it had.
    got.clear();
    stage(2);  // logical 5..6 (positions 11, 12)
    const uint32_t keep2[] = {0, 2, 3, 4, 5, 6};
    kv.compact_head(0, 0, keep2, 6, 3, 2, record, &rec, scratch.data(), HoldMode::Fill);
    kv.finish_compact(6, 3, 2, HoldMode::Fill);
    EXPECT_EQ(got, cache ? (std::vector<Rotation>{{1, 1, -1}, {2, 1, -7}}) : std::vector<Rotation>{});
    bool found = false;
    for (uint32_t i = 0; i < kv.hold_len(); ++i) {
      if (kv.hold_positions(0, 0)[i] != 2) continue;
      found = true;
      EXPECT_EQ(kv.hold_rotations(0, 0)[i], cache ? 1 : 2);
    }
    EXPECT_TRUE(found) << "position 2 went to the hold";
  }
}

// Keys that move by the same distance reach the rotator as one run of consecutive rows: RoPE's
// angles are formed once for all of them.
TEST(KvCache, KeysMovingAlikeRotateAsOneRun) {
  constexpr uint32_t kBudget = 8, kChunk = 4;
  KvShape s{1, 1, 2, kBudget + kChunk, kBudget, 2, 0, KvType::F16, 0, 0, 0, KvPositions::Cache};
  std::vector<uint16_t> rows(2ull * s.capacity * 2);
  std::vector<int32_t> positions(s.capacity);
  KvBuffers b;
  b.keys_values = rows.data();
  b.positions = positions.data();
  KvCache kv;
  ASSERT_TRUE(kv.init(s, b).ok());
  auto stage = [&](uint32_t n) {
    for (uint32_t j = 0; j < n; ++j) kv.positions(0, 0)[kv.visible() + j] = int32_t(kv.next_position() + j);
    kv.advance(n);
  };
  stage(8);
  kv.append_ring(8);
  stage(3);  // logical 8..10
  struct Run {
    uint16_t* keys;
    uint32_t n;
    int64_t by;
  };
  std::vector<Run> runs;
  auto record = [](void* ctx, uint16_t* keys, uint32_t n, int64_t by) {
    static_cast<std::vector<Run>*>(ctx)->push_back({keys, n, by});
  };
  std::vector<uint8_t> scratch(kv.compact_scratch_bytes());
  const uint32_t keep[] = {0, 3, 4, 5, 7, 9, 10};  // prefix 0, 3, 4, 5, 7; ring 9, 10
  kv.compact_head(0, 0, keep, 7, 2, 3, record, &runs, scratch.data());
  kv.finish_compact(7, 2, 3);
  // Positions 3, 4, 5 go to indices 1, 2, 3 (by -2 each), position 7 to index 4 (by -3); the
  // sink at 0 and the ring do not move.
  const auto* gathered = reinterpret_cast<uint16_t*>(scratch.data());
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[0].keys, gathered + 1 * 2);
  EXPECT_EQ(runs[0].n, 3u);
  EXPECT_EQ(runs[0].by, -2);
  EXPECT_EQ(runs[1].keys, gathered + 4 * 2);
  EXPECT_EQ(runs[1].n, 1u);
  EXPECT_EQ(runs[1].by, -3);
  EXPECT_EQ(kv.index_rotated(), 5u);
}

// Quantized rows (q8, q4) move whole: after ring overwrites and a compaction every logical
// entry still holds, bit for bit, the row written for its position, key and value.
TEST(KvCache, QuantizedRowsMoveWhole) {
  for (KvType t : {KvType::Q8, KvType::Q4}) {
    constexpr uint32_t kHd = 64, kBudget = 8, kChunk = 4;
    std::vector<uint8_t> mem(1 << 20);
    Arena arena(mem.data() + (64 - reinterpret_cast<uintptr_t>(mem.data()) % 64) % 64, mem.size() - 64);
    KvShape s{1, 1, kHd, kBudget + kChunk, kBudget, kHd, 0, t};
    KvBuffers b;
    const uint32_t row = kv_row_halves(t, kHd);
    b.keys_values = arena.allocate_array<uint16_t>(2ull * s.capacity * row);
    b.positions = arena.allocate_array<int32_t>(s.capacity);
    KvCache kv;
    ASSERT_TRUE(kv.init(s, b).ok());
    ASSERT_EQ(kv.row_halves(), row);
    auto row_of = [&](int64_t pos, bool value, uint16_t* out) {
      float x[kHd];
      for (uint32_t i = 0; i < kHd; ++i) x[i] = float((pos * 7 + i * (value ? 3 : 5)) % 23) - 11.0f;
      kv_quantize_row(t, x, kHd, out);
    };
    auto stage = [&](uint32_t n) {
      for (uint32_t j = 0; j < n; ++j) {
        const uint32_t at = kv.visible() + j;
        const int64_t pos = kv.next_position() + j;
        kv.positions(0, 0)[at] = int32_t(pos);
        row_of(pos, false, kv.keys(0, 0) + uint64_t(at) * row);
        row_of(pos, true, kv.values(0, 0) + uint64_t(at) * row);
      }
      kv.advance(n);
    };
    auto check = [&](const char* when) {
      std::vector<uint16_t> want(row);
      for (uint32_t i = 0; i < kv.visible(); ++i) {
        const uint32_t p = kv.physical(i);
        const int64_t pos = kv.positions(0, 0)[p];
        row_of(pos, false, want.data());
        EXPECT_EQ(memcmp(want.data(), kv.keys(0, 0) + uint64_t(p) * row, row * 2), 0) << when << " key " << pos;
        row_of(pos, true, want.data());
        EXPECT_EQ(memcmp(want.data(), kv.values(0, 0) + uint64_t(p) * row, row * 2), 0) << when << " value " << pos;
      }
    };
    for (int i = 0; i < 5; ++i) {
      stage(3);
      kv.append_ring(3);
      check("ring");
    }
    stage(3);
    const uint32_t keep[] = {0, 2, 5, 9, 10};
    std::vector<uint8_t> scratch(kv.compact_scratch_bytes());
    kv.compact_head(0, 0, keep, 5, 2, 3, no_rotation, nullptr, scratch.data());
    kv.finish_compact(5, 2, 3);
    check("compaction");
    stage(2);
    kv.append_ring(2);
    check("after compaction");
  }
}

TEST(SnapKvSelect, PoolsThenKeepsTheTopInOriginalOrder) {
  // scores: a peak at 2 and one at 9; kernel 3 widens each to its neighbours.
  const float scores[] = {0.1f, 0.2f, 5.0f, 0.1f, 0.0f, 0.0f, 0.3f, 0.0f, 0.0f, 4.0f, 0.0f, 0.0f};
  const uint32_t n = sizeof scores / sizeof scores[0];
  float work[n];
  uint32_t order[n], out[n];
  ASSERT_EQ(snapkv_select(scores, n, 6, 3, work, order, out), 6u);
  EXPECT_EQ(std::vector<uint32_t>(out, out + 6), (std::vector<uint32_t>{1, 2, 3, 8, 9, 10}));
  // Kernel 1 is no pooling: the plain top 3.
  ASSERT_EQ(snapkv_select(scores, n, 3, 1, work, order, out), 3u);
  EXPECT_EQ(std::vector<uint32_t>(out, out + 3), (std::vector<uint32_t>{2, 6, 9}));
  // Ties go to the earlier token; keep >= n keeps everything.
  const float flat[] = {1, 1, 1, 1};
  ASSERT_EQ(snapkv_select(flat, 4, 2, 1, work, order, out), 2u);
  EXPECT_EQ(std::vector<uint32_t>(out, out + 2), (std::vector<uint32_t>{0, 1}));
  ASSERT_EQ(snapkv_select(flat, 4, 9, 1, work, order, out), 4u);
}

// The prompt's last compression under the hold (docs/kv.md, "The hold") pools over positions:
// merged, the prefix's survivors and the held entries are array neighbours far apart in the text.
TEST(SnapKvSelect, PoolsOverPositionsWhenCandidatesAreNotContiguous) {
  const int32_t positions[] = {10, 11, 12, 200, 201, 500, 502, 503, 504, 900};
  const float scores[] = {0.1f, 0.3f, 5.0f, 0.1f, 0.2f, 0.0f, 0.0f, 4.0f, 0.0f, 0.6f};
  const uint32_t n = sizeof scores / sizeof scores[0];
  float pooled[n], work[n];
  uint32_t order[n], out[n];
  const auto position = [&](uint32_t i) -> int64_t { return positions[i]; };
  snapkv_pool_by_position(scores, n, 5, position, pooled);
  // The peak at 12 lifts 10 and 11 (within 2 positions), not 200 and 201 (its array neighbours
  // within 2); the one at 503 lifts 502 and 504 but not 500 (3 away).
  EXPECT_EQ(std::vector<float>(pooled, pooled + n),
            (std::vector<float>{5.0f, 5.0f, 5.0f, 0.2f, 0.2f, 0.0f, 4.0f, 4.0f, 4.0f, 0.6f}));
  ASSERT_EQ(snapkv_select(pooled, n, 6, 1, work, order, out), 6u);
  EXPECT_EQ(std::vector<uint32_t>(out, out + 6), (std::vector<uint32_t>{0, 1, 2, 6, 7, 8}));
  // Pooled over the array, the peak at 12 carries 200 and 201, and the one at 503 is lost.
  ASSERT_EQ(snapkv_select(scores, n, 6, 5, work, order, out), 6u);
  EXPECT_EQ(std::vector<uint32_t>(out, out + 6), (std::vector<uint32_t>{0, 1, 2, 3, 4, 5}));

  // Over one contiguous stretch the two poolings are the same thing.
  const float flat[] = {0.1f, 0.2f, 5.0f, 0.1f, 0.0f, 0.0f, 0.3f, 0.0f, 0.0f, 4.0f, 0.0f, 0.0f};
  const uint32_t m = sizeof flat / sizeof flat[0];
  float pooled_flat[m], work_flat[m];
  uint32_t order_flat[m], by_index[m], by_position[m];
  for (uint32_t kernel : {1u, 3u, 7u}) {
    snapkv_pool_by_position(
        flat, m, kernel, [](uint32_t i) { return int64_t(i) + 7000; }, pooled_flat);
    ASSERT_EQ(snapkv_select(pooled_flat, m, 5, 1, work_flat, order_flat, by_position), 5u);
    ASSERT_EQ(snapkv_select(flat, m, 5, kernel, work_flat, order_flat, by_index), 5u);
    EXPECT_EQ(std::vector<uint32_t>(by_position, by_position + 5), std::vector<uint32_t>(by_index, by_index + 5))
        << "kernel " << kernel;
  }
}

TEST(SnapKvSelect, AdaptiveKernel) {
  EXPECT_EQ(snapkv_kernel(7, 1000, 100), 7u);
  EXPECT_EQ(snapkv_kernel(0, 1000, 100), 21u);    // 2 * 10 + 1
  EXPECT_EQ(snapkv_kernel(0, 100, 100), 3u);      // clamped low
  EXPECT_EQ(snapkv_kernel(0, 100000, 100), 31u);  // clamped high
}

TEST(KvPolicy, BudgetsThatCannotHoldThePolicyAreRefused) {
  KvPolicyConfig c;
  c.kind = KvPolicyKind::Streaming;
  c.sinks = 4;
  EXPECT_EQ(validate_kv_policy(c, 4, 16).status(), Status::BudgetTooSmall);
  EXPECT_TRUE(validate_kv_policy(c, 5, 16).ok());
  c.kind = KvPolicyKind::SnapStream;
  const Error e = validate_kv_policy(c, 48, 16);  // 4 sinks + 32 observed + 12 recent = 48
  EXPECT_EQ(e.status(), Status::BudgetTooSmall);
  EXPECT_NE(std::string(e.message()).find("leaves nothing for the prompt"), std::string::npos) << e.message();
  EXPECT_TRUE(validate_kv_policy(c, 1024, 64).ok());
  c.kind = KvPolicyKind::SnapKV;
  EXPECT_EQ(validate_kv_policy(c, 32, 16).status(), Status::BudgetTooSmall);
  c.snap_kernel = 4;
  EXPECT_EQ(validate_kv_policy(c, 1024, 64).status(), Status::InvalidArgument);
  KvPolicyKind k;
  EXPECT_TRUE(parse_kv_policy("snapstream", k));
  EXPECT_EQ(k, KvPolicyKind::SnapStream);
  EXPECT_FALSE(parse_kv_policy("h2o", k));
}

}  // namespace
}  // namespace keel
