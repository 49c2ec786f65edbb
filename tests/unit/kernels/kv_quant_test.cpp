// Quantized KV rows (core/kv_type.h) and the attention kernels that read them directly.
//
// Error bounds, per group of a row with scale d (and minimum m for q4):
//   q8: |x - x~| <= d/2 + 2^-10 |x|       (d = half(amax / 127): rounding to the nearest step,
//                                          plus the half rounding of d that may push the largest
//                                          number just past 127 steps)
//   q4: |x - x~| <= d/2 + 2^-10 (|x| + |m|) (d = half((max - min) / 15), m = half(min))
// The weighted sums must compute exactly the sums of the dequantized rows, up to f32 rounding:
// within (terms + 3) u S, u = 2^-24, S = sum of |products|. The ref scores too; the x86 scores
// quantize the query per call to int8 per group of 32 (scale dq = max|q|/127, an integer dot
// product per group), which adds at most dq/2 * |k~_i| per number (|k~_i - m| for q4, whose
// minimum meets the f32 query): scale * sum_i dq/2 |k~_i|.
// Against the f32 inputs the scores are then within scale * sum_i |q_i| e_i more, e_i the bound
// above. The AVX-512 scores (heads of 64 to 256, multiples of 64) take the same int8 query and
// integer dot products, so the same bound.
// The AVX-512 weighted sums (the same heads) quantize the coefficients c_j = p_j d_j of each
// whole block of 16 rows to 16 bits against the largest S of the row's group pair (groups 2c and
// 2c + 1: a chunk of 64 numbers) in the block: each c_j is off by at most S / 131070, which
// adds S / 131070 * |n_j,i| per row to lane i, n_j,i the stored integer (|x~ - m| / d). Rows
// past the last whole block are summed in f32.
// arm64: both tiers' scores quantize the query as x86 does (the same bound); the NEON weighted
// sums are f32; the dotprod ones over q8 quantize the coefficients as AVX-512 does for heads of 32
// to 256 (multiples of 32), but against the largest of the block's rows in lane i's group alone, a
// bound no larger than the pair's (its q4 sums are NEON's).
#include <algorithm>
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/f16.h"
#include "core/kv_type.h"
#include "kernels/attention.h"

namespace keel {
namespace {

constexpr double kU = 1.0 / 16777216.0;

// Ref and the build's SIMD tables: x86 AVX2 and AVX-512 VNNI, or arm64 NEON and dotprod, each
// where the CPU has it (NEON always).
std::vector<const AttentionKernels*> tables() {
  std::vector<const AttentionKernels*> t{&attention_kernels_ref()};
#if defined(__aarch64__)
  EXPECT_NE(attention_kernels_arm64_neon(), nullptr) << "every arm64 CPU has NEON";
  if (attention_kernels_arm64_neon() != nullptr) t.push_back(attention_kernels_arm64_neon());
  if (attention_kernels_arm64_dotprod() != nullptr) t.push_back(attention_kernels_arm64_dotprod());
#else
  if (attention_kernels_x86_avx2() != nullptr) t.push_back(attention_kernels_x86_avx2());
  if (attention_kernels_x86_avx512() != nullptr) t.push_back(attention_kernels_x86_avx512());
#endif
  return t;
}

// How a table's weighted sums quantize the coefficients of whole blocks: not at all, per group
// pair (AVX-512: heads of 64 to 256, multiples of 64) or per group (arm64 dotprod, q8: heads of
// 32 to 256, multiples of 32).
enum class CoefBlocks { None, GroupPair, Group };

CoefBlocks blocks_coefficients(const AttentionKernels* k, KvType t, uint32_t hd) {
  if (k == nullptr) return CoefBlocks::None;
  if (k == attention_kernels_x86_avx512() && hd % 64 == 0 && hd <= 256) return CoefBlocks::GroupPair;
  if (k == attention_kernels_arm64_dotprod() && t == KvType::Q8 && hd % 32 == 0 && hd <= 256) return CoefBlocks::Group;
  return CoefBlocks::None;
}

constexpr uint32_t kCoefBlock = 16;

// What the 16-bit coefficients of whole blocks may add to lane i of a weighted sum (above): the
// largest coefficient of a block is taken over the pair of groups lane i's group belongs to, or
// over its group alone.
double coefficient_rounding(CoefBlocks how, KvType t, const float* p, const uint16_t* rows, const float* deq,
                            uint32_t n, uint32_t hd, uint32_t i) {
  if (how == CoefBlocks::None) return 0.0;
  const uint32_t row = kv_row_halves(t, hd), groups = hd / 32, g = i / 32;
  const uint32_t first = how == CoefBlocks::GroupPair ? g & ~1u : g, last = how == CoefBlocks::GroupPair ? g | 1u : g;
  double bound = 0;
  for (uint32_t b0 = 0; b0 + kCoefBlock <= n; b0 += kCoefBlock) {
    double largest = 0;
    for (uint32_t j = b0; j < b0 + kCoefBlock; ++j) {
      for (uint32_t h = first; h <= last; ++h) {
        largest = std::fmax(largest, double(p[j]) * f16_to_f32(rows[uint64_t(j) * row + h]));
      }
    }
    for (uint32_t j = b0; j < b0 + kCoefBlock; ++j) {
      const double d = f16_to_f32(rows[uint64_t(j) * row + g]);
      const double m = t == KvType::Q4 ? f16_to_f32(rows[uint64_t(j) * row + groups + g]) : 0.0;
      if (d > 0) bound += largest / 131070 * (1 + 1e-5) * std::fabs(deq[uint64_t(j) * hd + i] - m) / d;
    }
  }
  return bound;
}

// Per-number error bounds of x stored as `t`.
std::vector<double> error_bounds(KvType t, const float* x, const uint16_t* row, uint32_t hd) {
  const uint32_t g = kv_group(hd), groups = hd / g;
  std::vector<double> e(hd);
  for (uint32_t b = 0; b < groups; ++b) {
    const double d = f16_to_f32(row[b]);
    const double m = t == KvType::Q4 ? std::fabs(f16_to_f32(row[groups + b])) : 0.0;
    for (uint32_t i = 0; i < g; ++i) e[b * g + i] = d / 2 + std::ldexp(std::fabs(x[b * g + i]) + m, -10) + 1e-30;
  }
  return e;
}

struct Rows {
  std::vector<float> x;     // [n][hd] the numbers
  std::vector<uint16_t> q;  // [n] rows
  std::vector<float> deq;   // [n][hd] what the rows stand for
};

Rows make_rows(KvType t, uint32_t n, uint32_t hd, std::mt19937& rng) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_real_distribution<float> off(-3.0f, 3.0f);
  Rows r;
  const uint32_t row = kv_row_halves(t, hd);
  r.x.resize(uint64_t(n) * hd);
  r.q.resize(uint64_t(n) * row);
  r.deq.resize(uint64_t(n) * hd);
  for (uint32_t j = 0; j < n; ++j) {
    // Keys have outlier channels and offsets: a few numbers ten times the others.
    const float shift = off(rng);
    for (uint32_t i = 0; i < hd; ++i) r.x[uint64_t(j) * hd + i] = nd(rng) * (i % 13 == 5 ? 10.0f : 1.0f) + shift;
    kv_quantize_row(t, &r.x[uint64_t(j) * hd], hd, &r.q[uint64_t(j) * row]);
    kv_dequantize_row(t, &r.q[uint64_t(j) * row], hd, &r.deq[uint64_t(j) * hd]);
  }
  return r;
}

TEST(KvQuant, RowsRoundTripWithinBounds) {
  std::mt19937 rng(3);
  for (KvType t : {KvType::Q8, KvType::Q4}) {
    for (uint32_t hd : {8u, 16u, 24u, 64u, 96u, 128u, 130u, 256u}) {
      if (!kv_type_fits(t, hd)) continue;  // q4 at 130: refused by the plan (RowSizes checks it)
      const Rows r = make_rows(t, 20, hd, rng);
      const uint32_t row = kv_row_halves(t, hd);
      for (uint32_t j = 0; j < 20; ++j) {
        const std::vector<double> e = error_bounds(t, &r.x[uint64_t(j) * hd], &r.q[uint64_t(j) * row], hd);
        for (uint32_t i = 0; i < hd; ++i) {
          EXPECT_NEAR(r.deq[uint64_t(j) * hd + i], r.x[uint64_t(j) * hd + i], e[i])
              << kv_type_name(t) << " hd " << hd << " row " << j << " at " << i;
        }
      }
    }
  }
  // Constant and zero rows come back exactly.
  for (KvType t : {KvType::Q8, KvType::Q4}) {
    std::vector<float> zero(64, 0.0f), back(64, 1.0f);
    std::vector<uint16_t> row(kv_row_halves(t, 64));
    kv_quantize_row(t, zero.data(), 64, row.data());
    kv_dequantize_row(t, row.data(), 64, back.data());
    for (float v : back) EXPECT_EQ(v, 0.0f) << kv_type_name(t);
  }
}

TEST(KvQuant, RowSizes) {
  EXPECT_EQ(kv_row_bytes(KvType::F16, 64), 128u);
  EXPECT_EQ(kv_row_bytes(KvType::Q8, 64), 68u);  // 64 int8 + 2 half scales
  EXPECT_EQ(kv_row_bytes(KvType::Q4, 64), 40u);  // 32 bytes of nibbles + 2 scales + 2 minima
  EXPECT_EQ(kv_row_bytes(KvType::Q8, 8), 10u);   // one group: the whole row
  EXPECT_FALSE(kv_type_fits(KvType::Q4, 7));
  EXPECT_FALSE(kv_type_fits(KvType::Q4, 130));  // 65 bytes of nibbles: not whole 16-bit units
  EXPECT_TRUE(kv_type_fits(KvType::Q8, 130));
  KvType t;
  EXPECT_TRUE(parse_kv_type("q4", t));
  EXPECT_EQ(t, KvType::Q4);
  EXPECT_FALSE(parse_kv_type("q5", t));
}

TEST(KvQuant, ScoresReadRowsDirectly) {
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (const AttentionKernels* k : tables()) {
    for (KvType t : {KvType::Q8, KvType::Q4}) {
      for (uint32_t hd : {8u, 24u, 32u, 64u, 96u, 128u, 130u, 256u, 320u}) {
        if (!kv_type_fits(t, hd)) continue;
        for (uint32_t n : {0u, 1u, 8u, 9u, 33u, 80u}) {
          const Rows r = make_rows(t, n, hd, rng);
          std::vector<float> q(hd);
          for (float& x : q) x = nd(rng);
          const float scale = 1.0f / std::sqrt(float(hd));
          std::vector<float> got(n + 1, -7.0f);
          k->scores_of(t)(q.data(), r.q.data(), n, hd, scale, got.data());
          const uint32_t row = kv_row_halves(t, hd);
          // The query's quantization step per number (x86 kernels, groups of 32 only).
          std::vector<double> q_step(hd, 0.0);
          if (k != &attention_kernels_ref() && kv_group(hd) == 32) {
            for (uint32_t b = 0; b < hd / 32; ++b) {
              double amax = 0;
              for (uint32_t i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(double(q[b * 32 + i])));
              for (uint32_t i = 0; i < 32; ++i) q_step[b * 32 + i] = amax / 127;
            }
          }
          for (uint32_t j = 0; j < n; ++j) {
            double on_rows = 0, mag = 0, on_f32 = 0, bound = 0, q_err = 0;
            const std::vector<double> e = error_bounds(t, &r.x[uint64_t(j) * hd], &r.q[uint64_t(j) * row], hd);
            for (uint32_t i = 0; i < hd; ++i) {
              on_rows += double(q[i]) * r.deq[uint64_t(j) * hd + i];
              mag += std::fabs(double(q[i]) * r.deq[uint64_t(j) * hd + i]);
              on_f32 += double(q[i]) * r.x[uint64_t(j) * hd + i];
              bound += std::fabs(q[i]) * e[i];
              // q4's minimum is applied with the f32 query's sum: only d * nibble meets the
              // quantized query.
              const double m = t == KvType::Q4 ? f16_to_f32(r.q[uint64_t(j) * row + hd / 32 + i / 32]) : 0.0;
              q_err += q_step[i] / 2 * std::fabs(r.deq[uint64_t(j) * hd + i] - m);
            }
            // q4 folds the minimum in as m * sum(q): its terms count twice.
            EXPECT_NEAR(got[j], on_rows * scale, (q_err + (2 * hd + 6) * kU * mag) * scale + 1e-6 * scale)
                << k->name << " " << kv_type_name(t) << " hd " << hd << " key " << j;
            EXPECT_NEAR(got[j], on_f32 * scale, (bound + q_err + (2 * hd + 6) * kU * mag) * scale + 1e-6)
                << k->name << " " << kv_type_name(t) << " hd " << hd << " key " << j;
          }
          EXPECT_EQ(got[n], -7.0f) << k->name << " wrote past " << n << " scores";
        }
      }
    }
  }
}

TEST(KvQuant, WeightedSumsReadRowsDirectly) {
  std::mt19937 rng(9);
  std::uniform_real_distribution<float> ud(0.0f, 1.0f);
  for (const AttentionKernels* k : tables()) {
    for (KvType t : {KvType::Q8, KvType::Q4}) {
      for (uint32_t hd : {8u, 24u, 32u, 64u, 96u, 128u, 130u, 256u, 320u}) {
        if (!kv_type_fits(t, hd)) continue;
        for (uint32_t n : {0u, 1u, 5u, 8u, 41u, 80u}) {
          const Rows r = make_rows(t, n, hd, rng);
          std::vector<float> p(n);
          float total = 0;
          for (float& x : p) total += (x = ud(rng));
          for (float& x : p) x /= total;  // probabilities, as attention passes them
          std::vector<float> got(hd + 1, -7.0f);
          k->weighted_sum_of(t)(p.data(), r.q.data(), n, hd, got.data());
          const uint32_t row = kv_row_halves(t, hd);
          for (uint32_t i = 0; i < hd; ++i) {
            double on_rows = 0, mag = 0, on_f32 = 0, bound = 0;
            const double coef =
                coefficient_rounding(blocks_coefficients(k, t, hd), t, p.data(), r.q.data(), r.deq.data(), n, hd, i);
            for (uint32_t j = 0; j < n; ++j) {
              const std::vector<double> e = error_bounds(t, &r.x[uint64_t(j) * hd], &r.q[uint64_t(j) * row], hd);
              on_rows += double(p[j]) * r.deq[uint64_t(j) * hd + i];
              mag += std::fabs(double(p[j]) * r.deq[uint64_t(j) * hd + i]);
              on_f32 += double(p[j]) * r.x[uint64_t(j) * hd + i];
              bound += p[j] * e[i];
            }
            EXPECT_NEAR(got[i], on_rows, coef + (2 * n + 6) * kU * mag + 1e-6)
                << k->name << " " << kv_type_name(t) << " hd " << hd << " lane " << i;
            EXPECT_NEAR(got[i], on_f32, bound + coef + (2 * n + 6) * kU * mag + 1e-6)
                << k->name << " " << kv_type_name(t) << " hd " << hd << " lane " << i;
          }
          EXPECT_EQ(got[hd], -7.0f) << k->name << " wrote past " << hd << " lanes";
        }
      }
    }
  }
}

// Attention after a softmax: one row (a sink) takes almost all the probability, the rest a long
// tail of tiny ones. The AVX-512 block coefficients must keep the tail's sum within the stated
// bound, not round it away: rows in the sink's block lose most precision, other blocks keep 16
// bits against their own largest.
TEST(KvQuant, WeightedSumsKeepATailOfSmallProbabilities) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> ud(0.0f, 1.0f);
  const uint32_t hd = 64, n = 4096 + 7;
  for (const AttentionKernels* k : tables()) {
    for (KvType t : {KvType::Q8, KvType::Q4}) {
      const Rows r = make_rows(t, n, hd, rng);
      std::vector<float> p(n);
      double total = 0;
      for (uint32_t j = 0; j < n; ++j) total += (p[j] = j == 3 ? 6.0f : 1e-3f + ud(rng) * 1e-3f);
      for (float& x : p) x = float(x / total);
      std::vector<float> got(hd);
      k->weighted_sum_of(t)(p.data(), r.q.data(), n, hd, got.data());
      double tail_bound = 0, worst = 0;
      for (uint32_t i = 0; i < hd; ++i) {
        double on_rows = 0, mag = 0;
        for (uint32_t j = 0; j < n; ++j) {
          on_rows += double(p[j]) * r.deq[uint64_t(j) * hd + i];
          mag += std::fabs(double(p[j]) * r.deq[uint64_t(j) * hd + i]);
        }
        const double coef =
            coefficient_rounding(blocks_coefficients(k, t, hd), t, p.data(), r.q.data(), r.deq.data(), n, hd, i);
        EXPECT_NEAR(got[i], on_rows, coef + (2 * n + 6) * kU * mag + 1e-6)
            << k->name << " " << kv_type_name(t) << " lane " << i;
        tail_bound = std::fmax(tail_bound, coef);
        worst = std::fmax(worst, std::fabs(got[i] - on_rows));
      }
      // The sink holds about half the probability, the tail the other half. The bound stays
      // small: 16-bit coefficients (8-bit ones would allow 256 times as much, about 0.3 here).
      EXPECT_LT(tail_bound, 5e-3) << k->name << " " << kv_type_name(t);
    }
  }
}

#if defined(__aarch64__)
// The dotprod table's f16 entries are the NEON functions, and its scores over quantized rows
// take the NEON table's quantized query and f32 arithmetic with SDOT's exact integer sums: f16
// results and quantized scores do not depend on the tier.
TEST(KvQuant, F16KernelsAndQuantizedScoresAreTheSameWhicheverArm64Table) {
  const AttentionKernels* a = attention_kernels_arm64_neon();
  ASSERT_NE(a, nullptr) << "every arm64 CPU has NEON";
  const AttentionKernels* b = attention_kernels_arm64_dotprod();
  if (b == nullptr) {
    EXPECT_EQ(attention_kernels_arm64(), a) << "without dotprod the NEON table runs";
    return;
  }
  EXPECT_EQ(attention_kernels_arm64(), b);
  EXPECT_EQ(a->scores, b->scores);
  EXPECT_EQ(a->weighted_sum, b->weighted_sum);
  EXPECT_EQ(a->weighted_sum_more, b->weighted_sum_more);
  EXPECT_EQ(a->to_half, b->to_half);
  std::mt19937 rng(15);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (KvType t : {KvType::Q8, KvType::Q4}) {
    for (uint32_t hd : {32u, 64u, 96u, 128u, 256u}) {
      const uint32_t n = 37;
      const Rows r = make_rows(t, n, hd, rng);
      std::vector<float> q(hd), sa(n), sb(n);
      for (float& x : q) x = nd(rng);
      a->scores_of(t)(q.data(), r.q.data(), n, hd, 0.125f, sa.data());
      b->scores_of(t)(q.data(), r.q.data(), n, hd, 0.125f, sb.data());
      for (uint32_t j = 0; j < n; ++j) EXPECT_EQ(sa[j], sb[j]) << kv_type_name(t) << " hd " << hd << " key " << j;
    }
  }
}
#else
// The AVX-512 table's f16 entries are the AVX2 functions: f16 results do not depend on the table.
TEST(KvQuant, F16KernelsAreTheSameWhicheverX86Table) {
  const AttentionKernels* a = attention_kernels_x86_avx2();
  const AttentionKernels* b = attention_kernels_x86_avx512();
  if (a == nullptr || b == nullptr) GTEST_SKIP() << "this CPU lacks AVX2 or AVX-512 VNNI";
  EXPECT_EQ(a->scores, b->scores);
  EXPECT_EQ(a->weighted_sum, b->weighted_sum);
  EXPECT_EQ(a->weighted_sum_more, b->weighted_sum_more);
  EXPECT_EQ(a->to_half, b->to_half);
  EXPECT_EQ(attention_kernels_x86(), b);
}
#endif

}  // namespace
}  // namespace keel
