// Attention kernels (ref and, where the CPU has them, x86 or arm64) against double-precision arithmetic
// over head dims 1..130 (8-wide heads like stories260K's, 64 like SmolLM2's, and sizes with a
// scalar tail) and 0..41 keys (whole and partial blocks of eight).
//
// Tolerances, u = 2^-24: both kernels compute f32 sums of exact products of halves with floats
// in some order, so each is within (terms + 2) u S of the exact value, S = sum |products|.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "core/f16.h"
#include "core/kv_type.h"
#include "kernels/attention.h"
#include "kernels/rope.h"

namespace keel {
namespace {

constexpr double kU = 1.0 / 16777216.0;

// Ref and the build's SIMD tables: on arm64 every tier the CPU has (NEON always, dotprod where
// the CPU has it), on x86 the best table (the other x86 table is added where a test needs it).
std::vector<const AttentionKernels*> tables() {
  std::vector<const AttentionKernels*> t{&attention_kernels_ref()};
#if defined(__aarch64__)
  const AttentionKernels* neon = attention_kernels_arm64_neon();
  EXPECT_NE(neon, nullptr) << "every arm64 CPU has NEON";
  if (neon != nullptr) t.push_back(neon);
  if (attention_kernels_arm64_dotprod() != nullptr) t.push_back(attention_kernels_arm64_dotprod());
#else
  if (attention_kernels_x86() != nullptr) t.push_back(attention_kernels_x86());
#endif
  return t;
}

// Whether a table is one of this build's SIMD tables.
bool simd_table(const AttentionKernels* k) { return k != nullptr && k != &attention_kernels_ref(); }

TEST(AttentionKernels, ScoresMatchDoubleArithmetic) {
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 1.5f);
  for (const AttentionKernels* k : tables()) {
    for (uint32_t hd : {1u, 3u, 8u, 16u, 24u, 40u, 64u, 72u, 128u, 130u}) {
      for (uint32_t n : {0u, 1u, 7u, 8u, 9u, 15u, 16u, 17u, 41u}) {
        std::vector<float> q(hd);
        std::vector<uint16_t> keys(uint64_t(n) * hd);
        for (float& x : q) x = nd(rng);
        for (uint16_t& x : keys) x = f32_to_f16(nd(rng));
        const float scale = 1.0f / std::sqrt(float(hd));
        std::vector<float> got(n + 1, -7.0f);
        k->scores(q.data(), keys.data(), n, hd, scale, got.data());
        for (uint32_t j = 0; j < n; ++j) {
          double exact = 0.0, mag = 0.0;
          for (uint32_t i = 0; i < hd; ++i) {
            const double p = double(q[i]) * f16_to_f32(keys[uint64_t(j) * hd + i]);
            exact += p;
            mag += std::fabs(p);
          }
          const double tol = (hd + 3) * kU * mag * scale + 1e-30;
          EXPECT_NEAR(got[j], exact * scale, tol) << k->name << " hd " << hd << " n " << n << " key " << j;
        }
        EXPECT_EQ(got[n], -7.0f) << k->name << " wrote past " << n << " scores";
      }
    }
  }
}

// A key's score does not depend on how many keys one call takes (the x86 kernel takes eight at a
// time for head dims past 16 and one at a time for the rest): decode with one query and a
// prefill chunk then see the same scores, bit for bit.
TEST(AttentionKernels, ScoresDoNotDependOnTheKeysTakenTogether) {
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 1.5f);
  for (const AttentionKernels* k : tables()) {
    for (uint32_t hd : {24u, 64u, 128u}) {
      const uint32_t n = 27;
      std::vector<float> q(hd);
      std::vector<uint16_t> keys(uint64_t(n) * hd);
      for (float& x : q) x = nd(rng);
      for (uint16_t& x : keys) x = f32_to_f16(nd(rng));
      const float scale = 1.0f / std::sqrt(float(hd));
      std::vector<float> together(n);
      k->scores(q.data(), keys.data(), n, hd, scale, together.data());
      for (uint32_t j = 0; j < n; ++j) {
        float alone = 0.0f;
        k->scores(q.data(), keys.data() + uint64_t(j) * hd, 1, hd, scale, &alone);
        EXPECT_EQ(together[j], alone) << k->name << " hd " << hd << " key " << j;
      }
    }
  }
}

// The grouped-query entries give each query the bits the single-query entries give it alone
// (a request's tokens then do not depend on whether its heads went through together), for
// groups split into blocks of three, row counts across the AVX2 kernels' 64-row blocks, and head
// dims inside and outside their fast paths.
TEST(AttentionKernels, GroupedQueriesGetTheirBitsAlone) {
  std::vector<const AttentionKernels*> grouped;
  for (const AttentionKernels* k : tables()) {
    if (k->scores_group != nullptr) grouped.push_back(k);
  }
  for (const AttentionKernels* k : tables()) {
    if (simd_table(k)) {
      ASSERT_NE(k->scores_group, nullptr) << "the " << k->name << " table has grouped-query kernels";
    }
  }
  const AttentionKernels* avx2 = attention_kernels_x86_avx2();
  if (avx2 != nullptr && avx2 != attention_kernels_x86()) grouped.push_back(avx2);
  std::mt19937 rng(13);
  std::normal_distribution<float> nd(0.0f, 1.5f);
  std::uniform_real_distribution<float> ud(0.0f, 1.0f);
  for (const AttentionKernels* k : grouped) {
    ASSERT_NE(k->weighted_sum_group, nullptr);
    for (uint32_t hd : {8u, 24u, 64u, 72u, 128u, 256u}) {
      for (uint32_t g : {1u, 2u, 3u, 4u, 7u}) {
        for (uint32_t n : {0u, 1u, 7u, 8u, 9u, 17u, 41u, 64u, 65u, 139u}) {
          SCOPED_TRACE(testing::Message() << k->name << " hd " << hd << " g " << g << " n " << n);
          const uint64_t stride = n + 3;
          std::vector<float> q(uint64_t(g) * hd), p(g * stride);
          std::vector<uint16_t> rows(uint64_t(n) * hd);
          for (float& x : q) x = nd(rng);
          for (float& x : p) x = ud(rng);
          for (uint16_t& x : rows) x = f32_to_f16(nd(rng));
          const float scale = 1.0f / std::sqrt(float(hd));
          std::vector<float> together(g * stride, -7.0f), alone(n + 1);
          k->scores_group(q.data(), g, rows.data(), n, hd, scale, together.data(), stride);
          std::vector<float> sums(uint64_t(g + 1) * hd, -7.0f), one(hd);
          k->weighted_sum_group(p.data(), stride, g, rows.data(), n, hd, sums.data());
          for (uint32_t i = 0; i < g; ++i) {
            k->scores(q.data() + uint64_t(i) * hd, rows.data(), n, hd, scale, alone.data());
            for (uint32_t j = 0; j < n; ++j)
              ASSERT_EQ(together[i * stride + j], alone[j]) << "query " << i << " key " << j;
            for (uint64_t j = n; j < stride; ++j) ASSERT_EQ(together[i * stride + j], -7.0f) << "wrote past the scores";
            k->weighted_sum(p.data() + i * stride, rows.data(), n, hd, one.data());
            for (uint32_t c = 0; c < hd; ++c)
              ASSERT_EQ(sums[uint64_t(i) * hd + c], one[c]) << "query " << i << " lane " << c;
          }
          for (uint32_t c = 0; c < hd; ++c) ASSERT_EQ(sums[uint64_t(g) * hd + c], -7.0f) << "wrote past the outputs";
        }
      }
    }
  }
}

// The same over q8 and q4 rows: head dims on the AVX-512 chunked paths (64..256) and one outside
// (96), row counts around the 16-row blocks of AVX-512 and the 64-row blocks of AVX2, groups
// split into blocks of four (AVX-512) and eight (AVX2).
TEST(AttentionKernels, GroupedQueriesOverQuantizedRowsGetTheirBitsAlone) {
  const AttentionKernels* avx512 = attention_kernels_x86_avx512();
  const AttentionKernels* avx2 = attention_kernels_x86_avx2();
  std::vector<const AttentionKernels*> simd{avx512, avx2};
  for (const AttentionKernels* k : tables()) {
    if (simd_table(k)) simd.push_back(k);
  }
  for (const AttentionKernels* k : simd) {
    if (k == nullptr) continue;
    for (KvType t : {KvType::Q8, KvType::Q4}) {
      ASSERT_NE(k->scores_group_of(t), nullptr) << "the " << k->name << " table groups " << kv_type_name(t);
      ASSERT_NE(k->weighted_sum_group_of(t), nullptr) << "the " << k->name << " table groups " << kv_type_name(t);
    }
  }
  std::vector<const AttentionKernels*> all = tables();
  for (const AttentionKernels* x86 : {avx512, avx2}) {
    if (x86 != nullptr && x86 != attention_kernels_x86()) all.push_back(x86);
  }
  std::mt19937 rng(17);
  std::normal_distribution<float> nd(0.0f, 1.5f);
  std::uniform_real_distribution<float> ud(0.0f, 1.0f);
  uint32_t checked = 0;
  for (const AttentionKernels* k : all) {
    for (KvType t : {KvType::Q8, KvType::Q4}) {
      const KvScoresGroupFn scores_group = k->scores_group_of(t);
      const KvWeightedSumGroupFn weighted_sum_group = k->weighted_sum_group_of(t);
      if (scores_group == nullptr) {
        EXPECT_EQ(weighted_sum_group, nullptr) << k->name;
        continue;
      }
      ASSERT_NE(weighted_sum_group, nullptr) << k->name;
      for (uint32_t hd : {64u, 96u, 128u, 192u, 256u}) {
        const uint32_t row = kv_row_halves(t, hd);
        for (uint32_t g : {1u, 2u, 3u, 4u, 5u, 7u, 9u}) {
          for (uint32_t n : {0u, 1u, 15u, 16u, 17u, 33u, 47u, 64u, 71u, 139u}) {
            SCOPED_TRACE(testing::Message()
                         << k->name << " " << kv_type_name(t) << " hd " << hd << " g " << g << " n " << n);
            const uint64_t stride = n + 3;
            std::vector<float> q(uint64_t(g) * hd), p(g * stride), x(hd);
            std::vector<uint16_t> rows(uint64_t(n) * row);
            for (float& e : q) e = nd(rng);
            // Probabilities as softmax leaves them: some rows far below the largest.
            for (float& e : p) e = ud(rng) < 0.2f ? ud(rng) * 1e-4f : ud(rng);
            for (uint32_t j = 0; j < n; ++j) {
              for (float& e : x) e = nd(rng);
              kv_quantize_row(t, x.data(), hd, rows.data() + uint64_t(j) * row);
            }
            const float scale = 1.0f / std::sqrt(float(hd));
            std::vector<float> together(g * stride, -7.0f), alone(n + 1);
            scores_group(q.data(), g, rows.data(), n, hd, scale, together.data(), stride);
            std::vector<float> sums(uint64_t(g + 1) * hd, -7.0f), one(hd);
            weighted_sum_group(p.data(), stride, g, rows.data(), n, hd, sums.data());
            for (uint32_t i = 0; i < g; ++i) {
              k->scores_of(t)(q.data() + uint64_t(i) * hd, rows.data(), n, hd, scale, alone.data());
              for (uint32_t j = 0; j < n; ++j)
                ASSERT_EQ(together[i * stride + j], alone[j]) << "query " << i << " key " << j;
              for (uint64_t j = n; j < stride; ++j)
                ASSERT_EQ(together[i * stride + j], -7.0f) << "wrote past the scores";
              k->weighted_sum_of(t)(p.data() + i * stride, rows.data(), n, hd, one.data());
              for (uint32_t c = 0; c < hd; ++c)
                ASSERT_EQ(sums[uint64_t(i) * hd + c], one[c]) << "query " << i << " lane " << c;
            }
            for (uint32_t c = 0; c < hd; ++c) ASSERT_EQ(sums[uint64_t(g) * hd + c], -7.0f) << "wrote past the outputs";
            ++checked;
          }
        }
      }
    }
  }
  if (avx512 != nullptr || avx2 != nullptr || all.size() > 1) {
    EXPECT_GT(checked, 0u);
  }
}

TEST(AttentionKernels, WeightedSumMatchesDoubleArithmetic) {
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_real_distribution<float> ud(0.0f, 1.0f);
  for (const AttentionKernels* k : tables()) {
    for (uint32_t hd : {1u, 3u, 8u, 16u, 24u, 64u, 130u}) {
      for (uint32_t n : {0u, 1u, 3u, 4u, 5u, 8u, 17u, 41u}) {
        std::vector<float> p(n);
        std::vector<uint16_t> values(uint64_t(n) * hd);
        for (float& x : p) x = ud(rng);
        for (uint16_t& x : values) x = f32_to_f16(nd(rng));
        std::vector<float> got(hd + 1, -7.0f);
        k->weighted_sum(p.data(), values.data(), n, hd, got.data());
        for (uint32_t i = 0; i < hd; ++i) {
          double exact = 0.0, mag = 0.0;
          for (uint32_t j = 0; j < n; ++j) {
            const double t = double(p[j]) * f16_to_f32(values[uint64_t(j) * hd + i]);
            exact += t;
            mag += std::fabs(t);
          }
          EXPECT_NEAR(got[i], exact, (n + 3) * kU * mag + 1e-30)
              << k->name << " hd " << hd << " n " << n << " lane " << i;
        }
        EXPECT_EQ(got[hd], -7.0f) << k->name << " wrote past " << hd << " lanes";
      }
    }
  }
}

// weighted_sum over [0, a) continued by weighted_sum_more over [a, n) is the untiled sum: bit
// for bit where the table's order allows it (ref and arm64 always; x86 for head_dim a multiple of
// 8 but not 8, whose kernel keeps four interleaved sums), within rounding otherwise.
TEST(AttentionKernels, WeightedSumMoreContinuesTheSum) {
  std::mt19937 rng(12);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_real_distribution<float> ud(0.0f, 1.0f);
  for (const AttentionKernels* k : tables()) {
    for (uint32_t hd : {3u, 8u, 16u, 64u, 128u, 130u}) {
      for (uint32_t n : {2u, 17u, 64u}) {
        std::vector<float> p(n);
        std::vector<uint16_t> values(uint64_t(n) * hd);
        for (float& x : p) x = ud(rng);
        for (uint16_t& x : values) x = f32_to_f16(nd(rng));
        std::vector<float> whole(hd), tiled(hd + 1, -7.0f);
        k->weighted_sum(p.data(), values.data(), n, hd, whole.data());
        const uint32_t a = n / 3 + 1;
        k->weighted_sum(p.data(), values.data(), a, hd, tiled.data());
        k->weighted_sum_more(p.data() + a, values.data() + uint64_t(a) * hd, n - a, hd, tiled.data());
#if defined(__aarch64__)
        const bool exact = true;
#else
        const bool exact = std::string(k->name) == "ref" || (hd % 8 == 0 && hd != 8 && hd <= 128);
#endif
        for (uint32_t i = 0; i < hd; ++i) {
          if (exact)
            EXPECT_EQ(tiled[i], whole[i]) << k->name << " hd " << hd << " n " << n << " lane " << i;
          else
            EXPECT_NEAR(tiled[i], whole[i], 1e-4f * (1 + std::fabs(whole[i]))) << k->name << " hd " << hd;
        }
        EXPECT_EQ(tiled[hd], -7.0f);
      }
    }
  }
}

TEST(AttentionKernels, ToHalfRoundsToNearestEven) {
  std::mt19937 rng(13);
  std::normal_distribution<float> nd(0.0f, 100.0f);
  std::vector<float> x(1000);
  for (float& v : x) v = nd(rng);
  x[0] = 65504.0f;
  x[1] = 1e-8f;
  x[2] = -0.0f;
  for (const AttentionKernels* k : tables()) {
    std::vector<uint16_t> got(x.size());
    k->to_half(x.data(), uint32_t(x.size()), got.data());
    for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(got[i], f32_to_f16(x[i])) << k->name << " at " << i << ": " << x[i];
  }
}

// Re-rotating f16 keys: each table's rotate_rows gives the ref table's bits, for both pair
// layouts, partial rotations (pairs < head_dim / 2) and odd pair counts; and the ref table's are
// rope_rotate_rows' (compared on x86 only: this unit is not built without contraction, so on Arm
// the compiler may fuse the reference's products here, as the engine's build does not).
TEST(AttentionKernels, RotateRowsEqualsTheScalarRotation) {
  std::mt19937 rng(17);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  std::uniform_real_distribution<float> angle(-3.2f, 3.2f);
  uint32_t checked = 0;
  const AttentionKernels& ref = attention_kernels_ref();
  ASSERT_NE(ref.rotate_rows, nullptr);
  for (const AttentionKernels* k : tables()) {
    ASSERT_NE(k->rotate_rows, nullptr) << k->name;
    for (const uint32_t hd : {8u, 64u, 80u, 128u, 256u, 6u})
      for (const uint32_t pairs : {hd / 2, hd / 4, 3u})
        for (const bool halves : {true, false}) {
          if (pairs == 0 || 2 * pairs > hd) continue;
          const uint32_t n = 5;
          std::vector<uint16_t> rows(uint64_t(n) * hd);
          for (uint16_t& h : rows) h = f32_to_f16(nd(rng));
          std::vector<float> c(pairs), s(pairs), tmp(hd);
          for (uint32_t i = 0; i < pairs; ++i) {
            const float a = angle(rng);
            c[i] = std::cos(a), s[i] = std::sin(a);
          }
          std::vector<uint16_t> want = rows;
          ref.rotate_rows(want.data(), n, hd, pairs, halves, c.data(), s.data());
#if !defined(__aarch64__)
          std::vector<uint16_t> scalar = rows;
          rope_rotate_rows(KvType::F16, scalar.data(), n, hd, pairs, halves, c.data(), s.data(), tmp.data());
          EXPECT_EQ(want, scalar) << "ref hd " << hd << " pairs " << pairs;
#endif
          k->rotate_rows(rows.data(), n, hd, pairs, halves, c.data(), s.data());
          EXPECT_EQ(rows, want) << k->name << " hd " << hd << " pairs " << pairs << (halves ? " halves" : " pairs");
          ++checked;
        }
  }
  EXPECT_GT(checked, 0u);
}

}  // namespace
}  // namespace keel
