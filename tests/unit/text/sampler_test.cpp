// Sampler: greedy ties, determinism per seed, the effect of each filter on a crafted
// distribution, repetition penalty, arena sizing.
#include "text/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace keel::test {
namespace {

using text::Sampler;
using text::SamplerConfig;

struct Fixture {
  std::vector<uint8_t> mem;
  Arena arena;
  Sampler sampler;
  explicit Fixture(const SamplerConfig& cfg, uint32_t vocab) {
    mem.resize(Sampler::arena_bytes(vocab));
    arena.reset(mem.data(), mem.size());
    const Error e = sampler.init(cfg, vocab, arena);
    EXPECT_TRUE(e.ok()) << e.message();
  }
  int32_t sample(std::vector<float> logits, const std::vector<int32_t>& recent = {}) {
    return sampler.sample(Span<float>(logits.data(), logits.size()), Span<const int32_t>(recent.data(), recent.size()));
  }
};

// log-probabilities of p (normalized), as logits.
std::vector<float> logits_of(const std::vector<double>& p) {
  std::vector<float> l;
  for (double x : p) l.push_back(x > 0 ? float(std::log(x)) : -INFINITY);
  return l;
}

std::vector<int> histogram(Fixture& f, const std::vector<float>& logits, int draws) {
  std::vector<int> h(logits.size(), 0);
  for (int i = 0; i < draws; ++i) {
    const int32_t id = f.sample(logits);
    EXPECT_GE(id, 0);
    if (id >= 0) ++h[size_t(id)];
  }
  return h;
}

TEST(Sampler, GreedyTakesTheLowestIdAmongEqualMaxima) {
  Fixture f(SamplerConfig{}, 6);
  EXPECT_EQ(f.sample({0.1f, 2.0f, -1.0f, 2.0f, 1.9f, 2.0f}), 1);
  EXPECT_EQ(f.sample({NAN, 1.0f, 3.0f, NAN, 3.0f, 0.0f}), 2);
  EXPECT_EQ(f.sample({-INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY}), 0);
  EXPECT_EQ(f.sample({NAN, NAN, NAN, NAN, NAN, NAN}), -1);
  EXPECT_EQ(f.sample({}), -1);
  EXPECT_EQ(f.sample(std::vector<float>(7, 0.0f)), -1);  // more logits than the sized vocab
}

TEST(Sampler, SameSeedSameSequence) {
  SamplerConfig cfg;
  cfg.temperature = 1.0f;
  cfg.seed = 42;
  const std::vector<float> logits = logits_of({0.2, 0.2, 0.2, 0.2, 0.2});
  Fixture a(cfg, 5), b(cfg, 5);
  cfg.seed = 43;
  Fixture c(cfg, 5);
  std::vector<int32_t> sa, sb, sc;
  for (int i = 0; i < 64; ++i) {
    sa.push_back(a.sample(logits));
    sb.push_back(b.sample(logits));
    sc.push_back(c.sample(logits));
  }
  EXPECT_EQ(sa, sb);
  EXPECT_NE(sa, sc);
  a.sampler.reseed(42);
  for (int i = 0; i < 64; ++i) EXPECT_EQ(a.sample(logits), sa[size_t(i)]);
  // The same seed gives the same ids on every platform: the generator is our own PCG32.
  const std::vector<int32_t> first = {sa.begin(), sa.begin() + 8};
  EXPECT_EQ(first, (std::vector<int32_t>{3, 2, 2, 1, 4, 2, 3, 4}));
}

TEST(Sampler, PlainSamplingFollowsTheDistribution) {
  SamplerConfig cfg;
  cfg.temperature = 1.0f;
  cfg.seed = 7;
  Fixture f(cfg, 4);
  const auto h = histogram(f, logits_of({0.5, 0.25, 0.15, 0.1}), 20000);
  EXPECT_NEAR(h[0] / 20000.0, 0.5, 0.02);
  EXPECT_NEAR(h[1] / 20000.0, 0.25, 0.02);
  EXPECT_NEAR(h[2] / 20000.0, 0.15, 0.02);
  EXPECT_NEAR(h[3] / 20000.0, 0.1, 0.02);
}

TEST(Sampler, TemperatureSharpensAndFlattens) {
  const std::vector<float> logits = logits_of({0.6, 0.3, 0.1});
  SamplerConfig cold;
  cold.temperature = 0.25f;  // p^4: 0.6^4 / sum = 0.94
  Fixture c(cold, 3);
  EXPECT_GT(histogram(c, logits, 5000)[0], 4500);
  SamplerConfig hot;
  hot.temperature = 100.0f;  // nearly uniform
  Fixture h(hot, 3);
  EXPECT_GT(histogram(h, logits, 6000)[2], 1700);
}

TEST(Sampler, TopKKeepsTheKMostLikely) {
  SamplerConfig cfg;
  cfg.temperature = 1.0f;
  cfg.top_k = 2;
  Fixture f(cfg, 5);
  // Ids 3 and 1 are the two most likely; the tie at 0.1 between ids 0 and 4 is excluded.
  const auto h = histogram(f, logits_of({0.1, 0.3, 0.1, 0.4, 0.1}), 10000);
  EXPECT_EQ(h[0] + h[2] + h[4], 0);
  EXPECT_NEAR(h[3] / 10000.0, 0.4 / 0.7, 0.02);
}

TEST(Sampler, TopPKeepsTheSmallestPrefixReachingP) {
  SamplerConfig cfg;
  cfg.temperature = 1.0f;
  cfg.top_p = 0.75f;
  Fixture f(cfg, 4);
  // 0.5 + 0.25 reaches 0.75: ids 0 and 1 survive, renormalized to 2/3 and 1/3.
  const auto h = histogram(f, logits_of({0.5, 0.25, 0.15, 0.1}), 12000);
  EXPECT_EQ(h[2] + h[3], 0);
  EXPECT_NEAR(h[0] / 12000.0, 2.0 / 3.0, 0.02);
  // top-p is measured on what top-k kept: with k = 3 the mass is 0.9, and 0.75 * 0.9 = 0.675
  // is reached by ids 0 and 1 again; with top_p = 0.9 all three of top-k survive.
  cfg.top_k = 3;
  cfg.top_p = 0.9f;
  Fixture g(cfg, 4);
  const auto hg = histogram(g, logits_of({0.5, 0.25, 0.15, 0.1}), 12000);
  EXPECT_EQ(hg[3], 0);
  EXPECT_GT(hg[2], 0);
}

TEST(Sampler, MinPDropsTheUnlikely) {
  SamplerConfig cfg;
  cfg.temperature = 1.0f;
  cfg.min_p = 0.25f;  // keep p >= 0.25 * 0.5 = 0.125
  Fixture f(cfg, 4);
  const auto h = histogram(f, logits_of({0.5, 0.25, 0.15, 0.1}), 12000);
  EXPECT_EQ(h[3], 0);
  EXPECT_GT(h[2], 0);
  EXPECT_NEAR(h[0] / 12000.0, 0.5 / 0.9, 0.02);
}

TEST(Sampler, FiltersCompose) {
  SamplerConfig cfg;
  cfg.temperature = 1.0f;
  cfg.top_k = 3;
  cfg.top_p = 0.95f;
  cfg.min_p = 0.4f;  // keep p >= 0.2: only ids 0 and 1
  Fixture f(cfg, 1000);
  std::vector<double> p(1000, 0.05 / 996);
  p[0] = 0.5;
  p[1] = 0.25;
  p[2] = 0.15;
  p[3] = 0.05;
  const auto h = histogram(f, logits_of(p), 3000);
  EXPECT_EQ(h[0] + h[1], 3000);
}

TEST(Sampler, RepetitionPenaltyDiscouragesRecentTokens) {
  SamplerConfig cfg;
  cfg.repetition_penalty = 2.0f;
  cfg.repetition_window = 2;
  Fixture f(cfg, 4);
  // Greedy: id 0 (logit 3) would win; penalized to 1.5 it loses to id 1 (2.0).
  EXPECT_EQ(f.sample({3.0f, 2.0f, 1.0f, -1.0f}, {0}), 1);
  // Repeated ids are penalized once; negative logits are multiplied.
  std::vector<float> logits = {3.0f, 2.0f, 1.0f, -1.0f};
  const std::vector<int32_t> recent = {1, 0, 0, 3, 3};  // window 2: only {3}
  EXPECT_EQ(
      f.sampler.sample(Span<float>(logits.data(), logits.size()), Span<const int32_t>(recent.data(), recent.size())),
      0);
  EXPECT_EQ(logits, (std::vector<float>{3.0f, 2.0f, 1.0f, -2.0f}));
  // Out-of-range history is ignored.
  EXPECT_EQ(f.sample({3.0f, 2.0f, 1.0f, -1.0f}, {-5, 99}), 0);
}

TEST(Sampler, ConfigIsChecked) {
  std::vector<uint8_t> mem(Sampler::arena_bytes(8));
  Arena arena(mem.data(), mem.size());
  Sampler s;
  SamplerConfig bad;
  bad.temperature = -1.0f;
  EXPECT_EQ(s.init(bad, 8, arena).status(), Status::InvalidArgument);
  bad = SamplerConfig{};
  bad.repetition_penalty = 0.0f;
  EXPECT_EQ(s.init(bad, 8, arena).status(), Status::InvalidArgument);
  bad = SamplerConfig{};
  bad.min_p = NAN;
  EXPECT_EQ(s.init(bad, 8, arena).status(), Status::InvalidArgument);
  EXPECT_EQ(s.init(SamplerConfig{}, 0, arena).status(), Status::InvalidArgument);
  Arena tiny(mem.data(), 16);
  EXPECT_EQ(s.init(SamplerConfig{}, 8, tiny).status(), Status::ArenaTooSmall);
  // 49152 candidates of 8 bytes plus a 1536-word bitmap.
  EXPECT_EQ(Sampler::arena_bytes(49152), 399368u);
}

}  // namespace
}  // namespace keel::test
