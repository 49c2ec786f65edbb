// RocketKV's stage 2, the pure parts: the budget split, the choice of dimensions, each head's
// page estimates, the page scores and the top-k page selection against brute-force references;
// and the cache's page summaries and key moments equal to a recomputation from the keys after
// every mutation (append, ring overwrite, sink pinning, compaction, clear), for f16 and q8 rows.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "core/f16.h"
#include "core/kv_type.h"
#include "kv/kv_cache.h"
#include "kv/rocketkv_select.h"
#include "kv/rocketkv_split.h"

namespace keel {
namespace {

TEST(RocketKvSplit, PaperCapacityAndDerivedPages) {
  // S = 8192 + 64, B = 1024: c = 8.06, alpha = 0.2 + 0.06 log2 c = 0.3807, S / c^alpha.
  const double c = 8256.0 / 1024.0, alpha = 0.2 + 0.06 * std::log2(c);
  EXPECT_EQ(rocketkv_capacity(8256, 1024), uint32_t(std::floor(8256.0 / std::pow(c, alpha))));
  EXPECT_EQ(rocketkv_capacity(100, 1024), 100u);  // c = 1: no compression
  EXPECT_EQ(rocketkv_capacity(1u << 30, 1), uint32_t(std::floor(double(1u << 30) / std::pow(double(1u << 30), 0.8))));
  KvPolicyConfig kv;
  kv.kind = KvPolicyKind::Full;
  EXPECT_EQ(sparse_split(kv, 4096, 64, 128).budget, 0u);  // off
  kv.sparse_budget = 512;
  const SparseSplit s = sparse_split(kv, 4096, 64, 128);
  // c2 = 4096 / 256 = 16, e = 2 c2 = 32 (f32 summaries, f16 rows): P = 4, r = 64 * 4 / 32 = 8.
  EXPECT_EQ(s.topk, 256u);
  EXPECT_EQ(s.page, 4u);
  EXPECT_EQ(s.dims, 8u);
  // The estimate then reads (4096 / 4) pages * 2 * 8 f32 = 64 KiB = 256 tokens of K and V rows.
  EXPECT_EQ(4096u / s.page * 2 * s.dims * 4, (s.budget - s.topk) * 2 * 128);
  EXPECT_EQ(s.gather_rows, 260u);
  EXPECT_GE(s.max_pages, 4096u / 4 + 2);
  kv.rocket_page = 16;
  kv.rocket_topk = 100;
  kv.rocket_r = 500;
  const SparseSplit o = sparse_split(kv, 4096, 64, 128);
  EXPECT_EQ(o.page, 16u);
  EXPECT_EQ(o.topk, 100u);
  EXPECT_EQ(o.dims, 64u);  // clamped to the head
  KvPolicyConfig rk;
  rk.kind = KvPolicyKind::RocketKV;
  EXPECT_EQ(sparse_split(rk, 2048, 64, 128).budget, 512u);  // rocketkv's default: budget / 4
}

// One trial's random query of a group and random pages of 1-5 keys, with their summaries
// (mins, maxs: [head_dim][stride]); every 5th trial ties two |q|, every 7th repeats pages.
struct RandomPages {
  uint32_t hd, group, n_pages, stride, r, k;
  std::vector<float> q, mins, maxs;
  std::vector<uint32_t> tokens;
  std::vector<std::vector<float>> keys;  // [page][token * hd + i]
  RandomPages(std::mt19937& rng, int trial, uint32_t max_group) {
    std::normal_distribution<float> nd(0.0f, 1.0f);
    hd = 8 + 8 * (trial % 4), group = 1 + trial % max_group, n_pages = 1 + trial % 37, stride = n_pages + 3;
    r = 1 + uint32_t(trial) % hd, k = 1 + uint32_t(trial * 7) % 90;
    q.resize(group * hd), mins.resize(hd * stride), maxs.resize(hd * stride), tokens.resize(n_pages);
    keys.resize(n_pages);
    for (float& x : q) x = nd(rng);
    if (trial % 5 == 0) q[0] = q[1];
    for (uint32_t p = 0; p < n_pages; ++p) {
      tokens[p] = 1 + uint32_t(rng() % 5);
      keys[p].resize(tokens[p] * hd);
      for (float& x : keys[p]) x = nd(rng);
      if (trial % 7 == 0 && p > 0) keys[p] = keys[p - 1], tokens[p] = tokens[p - 1];
      for (uint32_t i = 0; i < hd; ++i) {
        float lo = INFINITY, hi = -INFINITY;
        for (uint32_t t = 0; t < tokens[p]; ++t)
          lo = std::min(lo, keys[p][t * hd + i]), hi = std::max(hi, keys[p][t * hd + i]);
        mins[i * stride + p] = lo;
        maxs[i * stride + p] = hi;
      }
    }
  }
  // The r dimensions a stable sort by decreasing weight(i) puts first, in increasing order.
  template <class Weight>
  std::vector<uint32_t> reference_dims(Weight weight) const {
    std::vector<uint32_t> d(hd);
    std::iota(d.begin(), d.end(), 0u);
    std::stable_sort(d.begin(), d.end(), [&](uint32_t a, uint32_t b) { return weight(a) > weight(b); });
    d.resize(r);
    std::sort(d.begin(), d.end());
    return d;
  }
  void expect_selection(const std::vector<float>& score, int trial) const { expect_top_pages(score, tokens, k, trial); }
  // rocketkv_select_pages against the reference on the same float scores (the order of equal
  // floats is the contract): pages by decreasing score until k tokens, nothing left out above
  // anything taken.
  static void expect_top_pages(const std::vector<float>& score, const std::vector<uint32_t>& tokens, uint32_t k,
                               int trial) {
    const uint32_t n_pages = uint32_t(score.size());
    std::vector<uint32_t> order(n_pages);
    const uint32_t m = rocketkv_select_pages(score.data(), tokens.data(), n_pages, k, order.data());
    std::vector<uint32_t> ref(n_pages);
    std::iota(ref.begin(), ref.end(), 0u);
    std::stable_sort(ref.begin(), ref.end(), [&](uint32_t a, uint32_t b) { return score[a] > score[b]; });
    uint32_t held = 0, n = 0;
    while (n < n_pages && held < k) held += tokens[ref[n++]];
    ref.resize(n);
    std::sort(ref.begin(), ref.end());
    ASSERT_EQ(std::vector<uint32_t>(order.begin(), order.begin() + m), ref) << "trial " << trial;
    for (uint32_t p = 0; p < n_pages; ++p) {
      if (std::binary_search(ref.begin(), ref.end(), p)) continue;
      for (uint32_t c : ref) ASSERT_LE(score[p], score[c]) << "trial " << trial;
    }
  }
};

// Decode-sized selections (thousands of pages, as a 4k-8k cache cut into pages of 2-4 gives)
// whose scores are continuous, coarsely rounded (many ties at the cut), signed zeros, or
// partly -inf; two partial pages as the prefix's and the ring's last.
TEST(RocketKvSelect, LargeSelectionsWithTiesZerosAndInfinitiesEqualTheSortedReference) {
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  for (int trial = 0; trial < 48; ++trial) {
    const uint32_t n_pages = 500 + uint32_t(rng() % 4000), page = 1u << (trial % 3);
    std::vector<float> score(n_pages);
    for (float& x : score) {
      x = nd(rng);
      switch (trial % 4) {
        case 1: x = std::round(x); break;  // ~20 distinct values
        case 2: x = rng() % 3 == 0 ? (rng() % 2 ? 0.0f : -0.0f) : x; break;
        case 3: x = rng() % 5 == 0 ? -INFINITY : x; break;
        default: break;
      }
    }
    std::vector<uint32_t> tokens(n_pages, page);
    tokens[rng() % n_pages] = 1;
    tokens[n_pages - 1] = 1 + uint32_t(rng() % page);
    const uint32_t k = 1 + uint32_t(rng() % (n_pages * page / 2));
    RandomPages::expect_top_pages(score, tokens, k, trial);
  }
}

// RocketSelect::Group: dims by sum |q|, the group's summed bound in double, the selection.
TEST(RocketKvSelect, GroupRankingEqualsBruteForceTopKOfTheBound) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    const RandomPages t(rng, trial, 3);
    const uint32_t hd = t.hd, group = t.group, stride = t.stride, r = t.r;
    const std::vector<float>& q = t.q;
    std::vector<uint32_t> dims(hd);
    rocketkv_choose_dims(q.data(), group, hd, nullptr, r, dims.data());
    const auto ref_dims = t.reference_dims([&](uint32_t i) {
      double s = 0;
      for (uint32_t g = 0; g < group; ++g) s += std::fabs(q[g * hd + i]);
      return s;
    });
    ASSERT_EQ(std::vector<uint32_t>(dims.begin(), dims.begin() + r), ref_dims) << "trial " << trial;
    std::vector<float> bound(t.n_pages);
    rocketkv_group_bounds(q.data(), group, hd, dims.data(), r, t.mins.data(), t.maxs.data(), stride, t.n_pages,
                          bound.data());
    for (uint32_t p = 0; p < t.n_pages; ++p) {
      double ref = 0.0;
      for (uint32_t g = 0; g < group; ++g) {
        for (uint32_t i : ref_dims) {
          const double x = q[g * hd + i];
          ref += std::max(x * t.mins[i * stride + p], x * t.maxs[i * stride + p]);
        }
      }
      EXPECT_NEAR(bound[p], ref, 1e-4 * (1 + std::fabs(ref)));
      // An upper bound of every token's group score on those dimensions.
      for (uint32_t tk = 0; tk < t.tokens[p]; ++tk) {
        double s = 0;
        for (uint32_t g = 0; g < group; ++g)
          for (uint32_t i : ref_dims) s += double(q[g * hd + i]) * t.keys[p][tk * hd + i];
        EXPECT_LE(s, ref + 1e-4);
      }
    }
    t.expect_selection(bound, trial);
  }
}

// RocketSelect::Head: dims by spread * sum |q| (a zero-spread dimension never chosen while
// others remain), each head's scaled estimates in double, scores relative to each head's best.
TEST(RocketKvSelect, HeadRankingEqualsBruteForceTopKOfTheEstimates) {
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const float scale = 0.125f;
  for (int trial = 0; trial < 200; ++trial) {
    const RandomPages t(rng, trial, 4);
    const uint32_t hd = t.hd, group = t.group, stride = t.stride, r = t.r, n_pages = t.n_pages;
    const std::vector<float>& q = t.q;
    std::vector<float> spread(hd);
    for (float& x : spread) x = trial % 3 == 0 ? 1.0f : std::fabs(nd(rng));
    if (trial % 4 == 1) spread[hd / 2] = 0.0f;  // a dimension on which every key is the same
    std::vector<uint32_t> dims(hd);
    rocketkv_choose_dims(q.data(), group, hd, spread.data(), r, dims.data());
    const auto ref_dims = t.reference_dims([&](uint32_t i) {
      float s = 0;
      for (uint32_t g = 0; g < group; ++g) s += std::fabs(q[g * hd + i]);
      return s * spread[i];
    });
    if (spread[hd / 2] == 0.0f && r < hd) {
      EXPECT_FALSE(std::binary_search(dims.begin(), dims.begin() + r, hd / 2)) << "trial " << trial;
    }
    ASSERT_EQ(std::vector<uint32_t>(dims.begin(), dims.begin() + r), ref_dims) << "trial " << trial;

    std::vector<float> est(group * stride), score(n_pages);
    rocketkv_head_estimates(q.data(), group, hd, dims.data(), r, scale, t.mins.data(), t.maxs.data(), stride, n_pages,
                            est.data(), stride);
    for (uint32_t g = 0; g < group; ++g) {
      double all = 0, chosen = 0;
      for (uint32_t i = 0; i < hd; ++i) all += std::fabs(q[g * hd + i]);
      for (uint32_t i : ref_dims) chosen += std::fabs(q[g * hd + i]);
      const double temp = scale / std::sqrt(chosen / all);
      for (uint32_t p = 0; p < n_pages; ++p) {
        double ref = 0;
        for (uint32_t i : ref_dims) {
          const double x = q[g * hd + i];
          ref += std::max(x * t.mins[i * stride + p], x * t.maxs[i * stride + p]);
        }
        ref *= temp;
        EXPECT_NEAR(est[g * stride + p], ref, 1e-4 * (1 + std::fabs(ref))) << "trial " << trial;
        // An upper bound of every token's scaled score of head g on those dimensions.
        for (uint32_t tk = 0; tk < t.tokens[p]; ++tk) {
          double s = 0;
          for (uint32_t i : ref_dims) s += double(q[g * hd + i]) * t.keys[p][tk * hd + i];
          EXPECT_LE(s * temp, ref + 1e-4);
        }
      }
    }
    rocketkv_page_scores(est.data(), group, stride, n_pages, score.data());
    for (uint32_t p = 0; p < n_pages; ++p) {
      float ref = -INFINITY;
      for (uint32_t g = 0; g < group; ++g) {
        const float best = *std::max_element(est.begin() + g * stride, est.begin() + g * stride + n_pages);
        ref = std::max(ref, est[g * stride + p] - best);
      }
      ASSERT_EQ(score[p], ref) << "trial " << trial << " page " << p;
      ASSERT_LE(score[p], 0.0f);
    }
    t.expect_selection(score, trial);
  }
}

// A cache of 2 layers x 2 heads with page summaries; keys random, written into staging the
// way the transformer does.
struct PagedCache {
  std::vector<uint8_t> mem;
  KvCache kv;
  KvShape s;
  std::mt19937 rng{11};
  PagedCache(KvType type, uint32_t budget, uint32_t chunk, uint32_t page) {
    s = KvShape{2, 2, 32, budget + chunk, budget, 64, 0, type, page, budget / page + 2};
    const uint64_t row = kv_row_halves(type, s.head_dim), heads = 4;
    const uint64_t kv_bytes = 2 * heads * s.capacity * row * 2, pos_bytes = heads * s.capacity * 4,
                   page_bytes = heads * 2 * s.head_dim * s.max_pages * 4, moment_bytes = heads * 2 * s.head_dim * 8;
    mem.resize(kv_bytes + pos_bytes + page_bytes + moment_bytes + 256);
    uint8_t* base = mem.data() + (64 - reinterpret_cast<uintptr_t>(mem.data()) % 64) % 64;
    KvBuffers b;
    b.keys_values = reinterpret_cast<uint16_t*>(base);
    b.positions = reinterpret_cast<int32_t*>(base + kv_bytes);
    b.pages = reinterpret_cast<float*>(base + kv_bytes + pos_bytes);
    b.key_moments = reinterpret_cast<double*>(base + kv_bytes + pos_bytes + page_bytes);
    EXPECT_TRUE(kv.init(s, b).ok());
  }
  void stage(uint32_t n) {
    std::normal_distribution<float> nd(0.0f, 2.0f);
    float x[32];
    const int64_t p0 = kv.next_position();
    for (uint32_t l = 0; l < 2; ++l) {
      for (uint32_t h = 0; h < 2; ++h) {
        for (uint32_t j = 0; j < n; ++j) {
          const uint32_t at = kv.visible() + j;
          for (float& v : x) v = nd(rng);
          kv_quantize_row(s.kv_type, x, 32, kv.keys(l, h) + uint64_t(at) * kv.row_halves());
          kv.positions(l, h)[at] = int32_t(p0 + j);
        }
      }
    }
    kv.advance(n);
  }
  // Every page's summary equals its rows' min and max; pages tile prefix and ring exactly, none
  // straddles the two, and page_sizes agrees with page_range. The key moments equal sums over the visible rows (up to
  // rounding of the running sums), and the spread their standard deviation.
  void expect_summaries(const char* when) {
    SCOPED_TRACE(when);
    uint32_t covered = 0;
    std::vector<uint32_t> sizes(s.max_pages);
    kv.page_sizes(sizes.data());
    for (uint32_t p = 0; p < kv.page_count(); ++p) {
      uint32_t b, e;
      kv.page_range(p, &b, &e);
      ASSERT_EQ(sizes[p], e - b) << "page " << p;
      ASSERT_EQ(b, covered);
      ASSERT_GT(e, b);
      ASSERT_LE(e - b, s.page_tokens);
      ASSERT_TRUE(e <= kv.prefix() || b >= kv.prefix()) << "page " << p << " straddles the prefix end";
      covered = e;
    }
    ASSERT_EQ(covered, kv.visible());
    float x[32];
    for (uint32_t l = 0; l < 2; ++l) {
      for (uint32_t h = 0; h < 2; ++h) {
        double sum[32] = {}, sq[32] = {};
        for (uint32_t e = 0; e < kv.visible(); ++e) {
          kv_dequantize_row(s.kv_type, kv.keys(l, h) + uint64_t(e) * kv.row_halves(), 32, x);
          for (uint32_t i = 0; i < 32; ++i) sum[i] += x[i], sq[i] += double(x[i]) * x[i];
        }
        float spread[32];
        kv.key_spread(l, h, spread);
        const double* m = kv.key_moments(l, h);
        for (uint32_t i = 0; i < 32; ++i) {
          ASSERT_NEAR(m[i], sum[i], 1e-9 * (1 + std::fabs(sum[i]))) << "layer " << l << " head " << h << " dim " << i;
          ASSERT_NEAR(m[32 + i], sq[i], 1e-9 * (1 + sq[i])) << "layer " << l << " head " << h << " dim " << i;
          const double n = kv.visible(), mean = n ? sum[i] / n : 0.0;
          const double sd = n ? std::sqrt(std::max(0.0, sq[i] / n - mean * mean)) : 0.0;
          ASSERT_NEAR(spread[i], sd, 1e-5 * (1 + sd));
        }
      }
    }
    for (uint32_t l = 0; l < 2; ++l) {
      for (uint32_t h = 0; h < 2; ++h) {
        for (uint32_t p = 0; p < kv.page_count(); ++p) {
          uint32_t b, e;
          kv.page_range(p, &b, &e);
          for (uint32_t i = 0; i < 32; ++i) {
            float lo = INFINITY, hi = -INFINITY;
            for (uint32_t t = b; t < e; ++t) {
              kv_dequantize_row(s.kv_type, kv.keys(l, h) + uint64_t(t) * kv.row_halves(), 32, x);
              lo = std::min(lo, x[i]);
              hi = std::max(hi, x[i]);
            }
            ASSERT_EQ(kv.page_min(l, h)[i * s.max_pages + p], lo) << "layer " << l << " head " << h << " page " << p;
            ASSERT_EQ(kv.page_max(l, h)[i * s.max_pages + p], hi) << "layer " << l << " head " << h << " page " << p;
          }
        }
      }
    }
  }
};

void no_rotate(void*, uint16_t*, uint32_t, int64_t) {}

void exercise(KvType type) {
  PagedCache c(type, 23, 5, 4);  // ring and prefix lengths not multiples of the page
  for (int step = 0; step < 4; ++step) {
    c.stage(5);
    c.kv.append_ring(5);
    c.expect_summaries("append");
  }
  for (int step = 0; step < 9; ++step) {  // overwrites, one and several at a time, wrapping
    const uint32_t n = 1 + step % 5;
    c.stage(n);
    c.kv.append_ring(n);
    c.expect_summaries("ring overwrite");
  }
  // Compaction: keep an arbitrary subset of the visible + staged entries, the newest 6 as ring.
  std::vector<uint8_t> scratch(c.kv.compact_scratch_bytes());
  for (int round = 0; round < 3; ++round) {
    c.stage(5);
    const uint32_t total = c.kv.visible() + 5;
    std::vector<uint32_t> keep;
    for (uint32_t i = 0; i < total - 6; ++i)
      if ((i * 7 + round) % 3 != 0 && keep.size() < 23 - 6) keep.push_back(i);
    for (uint32_t i = total - 6; i < total; ++i) keep.push_back(i);
    for (uint32_t l = 0; l < 2; ++l)
      for (uint32_t h = 0; h < 2; ++h)
        c.kv.compact_head(l, h, keep.data(), uint32_t(keep.size()), 6, 5, no_rotate, nullptr, scratch.data());
    c.kv.finish_compact(uint32_t(keep.size()), 6, 5);
    c.expect_summaries("compaction");
    for (int step = 0; step < 7; ++step) {
      c.stage(1);
      c.kv.append_ring(1);
      c.expect_summaries("append after compaction");
    }
  }
  c.kv.clear();
  c.expect_summaries("clear");
  c.stage(3);
  c.kv.append_ring(3);
  c.kv.pin_sinks(2);
  c.expect_summaries("sinks pinned");
  c.stage(5);
  c.kv.append_ring(5);
  c.expect_summaries("append after pinning");
}

TEST(KvPages, SummariesEqualRecomputationAfterEveryMutationF16) { exercise(KvType::F16); }
TEST(KvPages, SummariesEqualRecomputationAfterEveryMutationQ8) { exercise(KvType::Q8); }

}  // namespace
}  // namespace keel
