// Allocation-failure stress on stories260K (snapstream, budget 1024: every region of the plan
// is non-empty). A Runtime given arenas of every size from 0 bytes up to what its plan needs
// (persistent and scratch independently, about a million sizes) refuses every size below the
// need with ArenaTooSmall naming both numbers, never crashes, and keeps nothing of the
// attempt: it refuses requests meanwhile, and the same Runtime object then initializes with
// the right sizes (over arenas full of garbage) and serves the same greedy tokens as a fresh
// one. The first size that fits works, and so do larger ones. The C API's single caller block
// is swept the same way. (Runtime::init checks both sizes against the plan before touching
// anything, so no allocation inside init can fail half-way; this pins that behaviour.)
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "keel.h"
#include "unit/robust/robust_util.h"

namespace keel {
namespace {

using robust::describe;

constexpr size_t kGreedyTokens = 24;

bool mentions(const char* message, uint64_t n) {
  return std::string(message).find(std::to_string(n)) != std::string::npos;
}

// The sizes a sweep tries below `need`: every one. A refusal costs about a microsecond, so
// all of them (not only multiples of the 64-byte alignment) fit in about a second.
std::vector<size_t> sizes_below(size_t need) {
  std::vector<size_t> sizes(need);
  for (size_t s = 0; s < need; ++s) sizes[s] = s;
  return sizes;
}

struct Fixture {
  std::unique_ptr<robust::LoadedModel> loaded;
  RuntimeConfig rc;
  std::vector<int32_t> prompt;
  std::vector<int32_t> want;  // a fresh runtime's greedy continuation
};

// stories260K with the CLI's default policy (snapstream, budget 1024, SnapKV window 32): the
// plan's every region is non-empty.
bool make_fixture(Fixture& f) {
  const std::vector<uint8_t>& bytes = robust::stories_keel_bytes();
  if (bytes.empty()) return false;
  f.loaded = robust::load_image(bytes);
  if (!f.loaded->model.loaded()) return false;
  f.rc = robust::stories_config(KvPolicyKind::SnapStream, 1024);
  robust::Arenas a(f.loaded->model, f.rc);
  Runtime fresh;
  const Error e = fresh.init(f.loaded->model, f.rc, a.persistent.span(), a.scratch.span(), nullptr);
  EXPECT_TRUE(e.ok()) << describe(e);
  if (!e.ok()) return false;
  f.prompt = robust::tokenize(fresh, robust::kStoryPrompt);
  f.want = robust::greedy_request(fresh, 0, f.prompt, kGreedyTokens);
  return f.want.size() == kGreedyTokens;
}

// A refused runtime refuses requests too, cleanly.
void expect_refuses_requests(Runtime& rt) {
  EXPECT_FALSE(rt.initialized());
  const int32_t one = 1;
  EXPECT_EQ(rt.prefill(0, Span<const int32_t>(&one, 1)).status(), Status::InvalidArgument);
  EXPECT_EQ(rt.decode(0, 1).status(), Status::InvalidArgument);
  EXPECT_FALSE(rt.sample(0).ok());
  EXPECT_EQ(rt.reset(0).status(), Status::InvalidArgument);
  EXPECT_TRUE(rt.logits(0).empty());
  EXPECT_EQ(rt.sequence_length(0), 0u);
}

// Initializes `rt` with exactly planned arenas, first filled with garbage (0xff bytes are NaN
// floats and -1 ints: init must not depend on what the memory held), and checks it serves
// the fresh runtime's tokens.
void expect_recovers(Runtime& rt, const Fixture& f, robust::Arenas& a, const char* when) {
  SCOPED_TRACE(when);
  memset(a.persistent.data(), 0xff, a.plan.persistent_bytes);
  memset(a.scratch.data(), 0xff, a.plan.scratch_bytes);
  const Error e = rt.init(f.loaded->model, f.rc, a.persistent.span(), a.scratch.span(), nullptr);
  ASSERT_TRUE(e.ok()) << describe(e);
  EXPECT_EQ(robust::greedy_request(rt, 0, f.prompt, kGreedyTokens), f.want);
  const RuntimeStats st = rt.stats();
  EXPECT_EQ(st.persistent_used_bytes, a.plan.persistent_bytes);
  EXPECT_EQ(st.scratch_high_water_bytes, a.plan.scratch_bytes);
}

// Sweeps one arena (the other at its planned size) from 0 to its need on one Runtime object
// that served a request before; checks recovery at 16 points along the way.
void sweep(bool persistent_side) {
  Fixture f;
  ASSERT_TRUE(make_fixture(f));
  robust::Arenas a(f.loaded->model, f.rc);
  const size_t need = persistent_side ? a.plan.persistent_bytes : a.plan.scratch_bytes;
  const std::vector<size_t> sizes = sizes_below(need);
  ASSERT_GT(sizes.size(), 1000u) << "the sweep is meant to be dense";

  Runtime rt;
  expect_recovers(rt, f, a, "before the sweep");
  size_t refused = 0, wrong_status = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    const size_t n = sizes[i];
    const Span<uint8_t> p = persistent_side ? a.persistent.span(n) : a.persistent.span();
    const Span<uint8_t> s = persistent_side ? a.scratch.span() : a.scratch.span(n);
    const Error e = rt.init(f.loaded->model, f.rc, p, s, nullptr);
    if (e.status() != Status::ArenaTooSmall || !mentions(e.message(), n) || !mentions(e.message(), need)) {
      // One message per wrong answer would flood the log over thousands of sizes.
      if (wrong_status++ < 5) ADD_FAILURE() << "arena of " << n << " bytes (need " << need << "): " << describe(e);
      continue;
    }
    ++refused;
    if (i % 256 == 0) expect_refuses_requests(rt);
    if (i % (sizes.size() / 16) == 0) expect_recovers(rt, f, a, ("after a refusal at " + std::to_string(n)).c_str());
  }
  EXPECT_EQ(refused, sizes.size());
  EXPECT_EQ(wrong_status, 0u);
  std::printf("[arena-stress] %s arena: %zu sizes from 0 to %zu refused with ArenaTooSmall\n",
              persistent_side ? "persistent" : "scratch", refused, need - 1);

  // The first size that fits works, and so does anything larger.
  for (size_t extra : {size_t(0), size_t(1), size_t(63), size_t(64)}) {
    robust::Arenas big(f.loaded->model, f.rc);
    robust::AlignedBuffer p(big.plan.persistent_bytes + (persistent_side ? extra : 0));
    robust::AlignedBuffer s(big.plan.scratch_bytes + (persistent_side ? 0 : extra));
    memset(p.data(), 0xff, p.size);
    memset(s.data(), 0xff, s.size);
    const Error e = rt.init(f.loaded->model, f.rc, p.span(), s.span(), nullptr);
    ASSERT_TRUE(e.ok()) << "need + " << extra << ": " << describe(e);
    EXPECT_EQ(robust::greedy_request(rt, 0, f.prompt, kGreedyTokens), f.want) << "need + " << extra;
    EXPECT_EQ(rt.stats().persistent_used_bytes, big.plan.persistent_bytes) << "need + " << extra;
  }
}

TEST(ArenaStress, PersistentFromZeroToNeed) { sweep(true); }
TEST(ArenaStress, ScratchFromZeroToNeed) { sweep(false); }

TEST(ArenaStress, BothShortEmptyAndMisaligned) {
  Fixture f;
  ASSERT_TRUE(make_fixture(f));
  robust::Arenas a(f.loaded->model, f.rc);
  Runtime rt;
  // Both short, on a coarse grid: the persistent arena is named first.
  for (int i = 0; i < 8; ++i) {
    for (int j = 0; j < 8; ++j) {
      const size_t p = a.plan.persistent_bytes * i / 8, s = a.plan.scratch_bytes * j / 8;
      const Error e = rt.init(f.loaded->model, f.rc, a.persistent.span(p), a.scratch.span(s), nullptr);
      EXPECT_EQ(e.status(), Status::ArenaTooSmall) << p << ", " << s << ": " << describe(e);
      EXPECT_TRUE(mentions(e.message(), p)) << e.message();
    }
  }
  // No memory at all: null spans.
  Error e = rt.init(f.loaded->model, f.rc, Span<uint8_t>(), Span<uint8_t>(), nullptr);
  EXPECT_EQ(e.status(), Status::ArenaTooSmall) << describe(e);
  expect_refuses_requests(rt);
  // Big enough but not 64-byte aligned: a bad argument, not a size problem.
  robust::AlignedBuffer p(a.plan.persistent_bytes + 64), s(a.plan.scratch_bytes + 64);
  e = rt.init(f.loaded->model, f.rc, Span<uint8_t>(p.data() + 8, a.plan.persistent_bytes), s.span(), nullptr);
  EXPECT_EQ(e.status(), Status::InvalidArgument) << describe(e);
  EXPECT_NE(std::string(e.message()).find("aligned"), std::string::npos) << e.message();
  e = rt.init(f.loaded->model, f.rc, p.span(), Span<uint8_t>(s.data() + 1, a.plan.scratch_bytes), nullptr);
  EXPECT_EQ(e.status(), Status::InvalidArgument) << describe(e);
  expect_refuses_requests(rt);
  expect_recovers(rt, f, a, "after empty and misaligned arenas");
}

// The C API: one caller block, from 0 bytes to what keel_init needs. The block starts one byte
// past an alignment boundary, so the engine's own alignment padding is part of the need. Each
// attempt verifies the whole model first (about 10 us), so this sweep takes every 8th size,
// plus every size around the engine object's end and in the last 64 bytes.
TEST(ArenaStress, CApiBlockFromZeroToNeed) {
  const std::vector<uint8_t>& bytes = robust::stories_keel_bytes();
  ASSERT_FALSE(bytes.empty());
  robust::Image image(bytes);
  keel_config cfg{};
  cfg.kv_budget_tokens = 256;
  cfg.chunk_tokens = 16;
  cfg.backend = KEEL_BACKEND_NATIVE;
  keel_plan_info plan{};
  ASSERT_EQ(keel_plan(image.bytes(), image.size(), &cfg, &plan), KEEL_OK);
  const size_t need = 63 + plan.engine_bytes + plan.persistent_bytes + plan.scratch_bytes;
  ASSERT_LE(need, plan.total_bytes);

  robust::AlignedBuffer block(plan.total_bytes + 64);
  uint8_t* base = block.data() + 1;
  auto greedy = [&](keel_engine* e) {
    std::vector<int32_t> out;
    size_t n = 0;
    int32_t ids[64];
    EXPECT_EQ(keel_tokenize(e, robust::kStoryPrompt, strlen(robust::kStoryPrompt), 1, 0, ids, 64, &n), KEEL_OK);
    EXPECT_EQ(keel_prefill(e, 0, ids, n), KEEL_OK) << keel_last_error(e);
    for (size_t i = 0; i < kGreedyTokens; ++i) {
      int32_t t = -1;
      if (keel_sample(e, 0, &t) != KEEL_OK || keel_decode(e, 0, t) != KEEL_OK) {
        ADD_FAILURE() << keel_last_error(e);
        break;
      }
      out.push_back(t);
    }
    return out;
  };
  std::vector<int32_t> want;
  {
    robust::AlignedBuffer fresh(plan.total_bytes);
    keel_engine* e = nullptr;
    char msg[300] = {};
    ASSERT_EQ(keel_init(fresh.data(), plan.total_bytes, image.bytes(), image.size(), &cfg, &e, msg, sizeof msg),
              KEEL_OK)
        << msg;
    want = greedy(e);
    ASSERT_EQ(want.size(), kGreedyTokens);
  }

  size_t refused = 0, wrong = 0;
  std::vector<size_t> sizes;
  const size_t object_end = 63 + plan.engine_bytes;
  for (size_t n = 0; n < need; ++n) {
    const bool near_object_end = n + 64 >= object_end && n < object_end + 64;
    if (n % 8 == 0 || near_object_end || n + 64 >= need) sizes.push_back(n);
  }
  for (size_t n : sizes) {
    keel_engine* e = reinterpret_cast<keel_engine*>(&refused);  // must be overwritten with NULL
    char msg[300] = {};
    const keel_status st = keel_init(base, n, image.bytes(), image.size(), &cfg, &e, msg, sizeof msg);
    if (st != KEEL_ERR_OUT_OF_MEMORY || e != nullptr || strstr(msg, "arena too small") == nullptr) {
      if (wrong++ < 5) ADD_FAILURE() << "block of " << n << " bytes: status " << st << ": " << msg;
      continue;
    }
    ++refused;
  }
  EXPECT_EQ(refused, sizes.size());
  std::printf("[arena-stress] C API block: %zu sizes from 0 to %zu refused\n", refused, need - 1);
  keel_engine* e = nullptr;
  char msg[300] = {};
  ASSERT_EQ(keel_init(base, need, image.bytes(), image.size(), &cfg, &e, msg, sizeof msg), KEEL_OK) << msg;
  EXPECT_EQ(greedy(e), want);
}

}  // namespace
}  // namespace keel
