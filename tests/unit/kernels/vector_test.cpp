// The element-wise ops of the build's SIMD table (x86: vector_kernels_x86(), AVX2; arm64:
// vector_kernels_arm64(), NEON) and of ref against double arithmetic, with matmul_test's
// VectorOps bounds (u = 2^-24; exp within 4 ulp of 2^-23), and gelu_mul, which VectorOps does not
// cover. Lengths cover the vector bodies and every tail. On arm64 the NEON table must exist (every
// arm64 CPU has NEON); on x86 a CPU without AVX2 checks ref only, and says so.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/kernels.h"

namespace keel {
namespace {

constexpr double kU = 1.0 / 16777216.0;
const uint32_t kLens[] = {1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 33, 64, 100, 576, 1536, 4097};

std::vector<const VectorKernels*> tables() {
  std::vector<const VectorKernels*> t{&vector_kernels_ref()};
#if defined(__aarch64__)
  const VectorKernels* simd = vector_kernels_arm64();
  EXPECT_NE(simd, nullptr) << "every arm64 CPU has NEON";
#else
  const VectorKernels* simd = vector_kernels_x86();
  if (simd == nullptr) std::printf("    this CPU lacks AVX2 + FMA + F16C: ref only\n");
#endif
  if (simd != nullptr) t.push_back(simd);
  return t;
}

std::vector<float> randv(uint32_t n, std::mt19937& rng, float s) {
  std::normal_distribution<float> nd(0.0f, s);
  std::vector<float> v(n);
  for (float& f : v) f = nd(rng);
  return v;
}

TEST(VectorKernels, RmsNormMatchesDoubleArithmeticAndMayWorkInPlace) {
  std::mt19937 rng(61);
  for (const VectorKernels* v : tables()) {
    for (uint32_t n : kLens) {
      const std::vector<float> x = randv(n, rng, 3.0f), w = randv(n, rng, 1.0f);
      std::vector<float> out(n + 1, -7.0f);
      v->rmsnorm(x.data(), w.data(), n, 1e-5f, out.data());
      double ss = 0;
      for (float f : x) ss += double(f) * f;
      const double inv = 1.0 / std::sqrt(ss / n + 1e-5);
      for (uint32_t i = 0; i < n; ++i) {
        const double want = x[i] * inv * w[i];
        ASSERT_NEAR(out[i], want, (n / 2.0 + 5) * 2 * kU * std::fabs(want) + 1e-37) << v->name << " " << n << " " << i;
      }
      ASSERT_EQ(out[n], -7.0f) << v->name << " wrote past " << n;
      std::vector<float> inplace = x;
      v->rmsnorm(inplace.data(), w.data(), n, 1e-5f, inplace.data());
      ASSERT_EQ(memcmp(inplace.data(), out.data(), n * 4), 0) << v->name << " " << n;
    }
  }
}

TEST(VectorKernels, SoftmaxMatchesDoubleArithmetic) {
  std::mt19937 rng(67);
  for (const VectorKernels* v : tables()) {
    for (uint32_t n : kLens) {
      std::vector<float> x = randv(n, rng, 4.0f);
      // Masked positions in the vector body and in the tail, and a dominant entry.
      for (uint32_t i = 2; i < n; i += 5) x[i] = -INFINITY;
      x[0] += 50.0f;
      const std::vector<float> in = x;
      double mx = -INFINITY, sum = 0;
      for (float f : x) mx = std::max(mx, double(f));
      std::vector<double> want(n);
      for (uint32_t i = 0; i < n; ++i) sum += (want[i] = std::exp(double(x[i]) - mx));
      v->softmax(x.data(), n);
      double total = 0;
      for (uint32_t i = 0; i < n; ++i) {
        want[i] /= sum;
        total += x[i];
        const double arg = std::isfinite(in[i]) ? std::fabs(double(in[i]) - mx) : 0.0;
        ASSERT_NEAR(x[i], want[i], (8.0 + n + 2 + arg) * kU * want[i] + 1e-38) << v->name << " " << n << " " << i;
        if (!std::isfinite(in[i])) {
          ASSERT_EQ(x[i], 0.0f) << v->name << " " << n << " " << i;
        }
      }
      ASSERT_NEAR(total, 1.0, (n + 10) * kU) << v->name << " " << n;
    }
  }
}

// Where exp's argument passes 88 it is clamped there (the result stays finite): g / (1 + e^88)
// instead of about 0, below 1e-38 |g u|.
double tiny(float g, float u) { return 1e-38 * std::fabs(double(g) * u) + 1e-38; }

// silu(g) * u and gelu_tanh(g) * u, including arguments where exp overflows or flushes.
TEST(VectorKernels, GatedActivationsMatchDoubleArithmetic) {
  std::mt19937 rng(71);
  constexpr double kSqrt2OverPi = 0.7978845608028654;
  for (const VectorKernels* v : tables()) {
    for (uint32_t n : kLens) {
      std::vector<float> g = randv(n, rng, 6.0f);
      const std::vector<float> u = randv(n, rng, 1.0f);
      if (n > 5) {
        g[1] = -200.0f;
        g[3] = 200.0f;
        g[4] = 0.0f;
      }
      std::vector<float> out(n + 1, -7.0f);
      v->silu_mul(g.data(), u.data(), n, out.data());
      for (uint32_t i = 0; i < n; ++i) {
        const double want = g[i] / (1.0 + std::exp(-double(g[i]))) * u[i];
        // exp 8 u, then 1 + e, the division and the product: 3 more roundings.
        ASSERT_NEAR(out[i], want, 12 * kU * std::fabs(want) + tiny(g[i], u[i])) << v->name << " silu " << n << " " << i;
      }
      ASSERT_EQ(out[n], -7.0f) << v->name << " silu wrote past " << n;
      v->gelu_mul(g.data(), u.data(), n, out.data());
      for (uint32_t i = 0; i < n; ++i) {
        const double gd = g[i];
        const double inner = kSqrt2OverPi * (gd + 0.044715 * gd * gd * gd);
        const double want = gd / (1.0 + std::exp(-2.0 * inner)) * u[i];
        // The argument 2 inner is rounded (4 roundings: |2 inner| 4u relative), which exp
        // turns into an absolute error of the exponent; then the silu bound.
        const double arg_err = 6 * kU * std::fabs(2.0 * inner);
        const double rel = 12 * kU + arg_err / (1.0 + std::exp(2.0 * inner));  // e / (1 + e), e = exp(-2 inner)
        ASSERT_NEAR(out[i], want, rel * std::fabs(want) + tiny(g[i], u[i])) << v->name << " gelu " << n << " " << i;
      }
      ASSERT_EQ(out[n], -7.0f) << v->name << " gelu wrote past " << n;
    }
  }
}

TEST(VectorKernels, AddScaleAxpyDot) {
  std::mt19937 rng(73);
  for (const VectorKernels* v : tables()) {
    for (uint32_t n : kLens) {
      const std::vector<float> a = randv(n, rng, 1.0f), b = randv(n, rng, 1.0f);
      std::vector<float> out(n + 1, -7.0f);
      v->add(a.data(), b.data(), n, out.data());
      for (uint32_t i = 0; i < n; ++i) ASSERT_EQ(out[i], a[i] + b[i]) << v->name << " " << n;
      ASSERT_EQ(out[n], -7.0f);
      std::vector<float> s = a;
      v->scale(s.data(), n, 0.125f);
      for (uint32_t i = 0; i < n; ++i) ASSERT_EQ(s[i], a[i] * 0.125f) << v->name << " " << n;
      std::vector<float> y = b;
      y.push_back(-7.0f);
      v->axpy(0.3f, a.data(), n, y.data());
      for (uint32_t i = 0; i < n; ++i) {
        const double want = 0.3f * double(a[i]) + b[i];
        ASSERT_NEAR(y[i], want, 2 * kU * (std::fabs(0.3f * a[i]) + std::fabs(b[i])) + 1e-38) << v->name << " " << n;
      }
      ASSERT_EQ(y[n], -7.0f);
      double want = 0, mag = 0;
      for (uint32_t i = 0; i < n; ++i) {
        want += double(a[i]) * b[i];
        mag += std::fabs(double(a[i]) * b[i]);
      }
      ASSERT_NEAR(v->dot(a.data(), b.data(), n), want, (n + 1) * kU * mag) << v->name << " " << n;
    }
  }
}

#if defined(__aarch64__)
TEST(VectorKernels, Arm64PicksNeon) {
  ASSERT_NE(vector_kernels_arm64(), nullptr);
  EXPECT_STREQ(vector_kernels_arm64()->name, "neon");
  EXPECT_EQ(vector_kernels_native(), vector_kernels_arm64());
}
#endif

}  // namespace
}  // namespace keel
