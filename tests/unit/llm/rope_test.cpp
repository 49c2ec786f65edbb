// RoPE angles stay exact at very large positions: compared with a long-double reference.
#include <gtest/gtest.h>

#include <cmath>

#include "kernels/rope.h"

namespace keel {
namespace {

TEST(Rope, ExactAtTenMillionAndBeyond) {
  // SmolLM2's frequencies: theta 100000, 64 dims per head.
  constexpr uint32_t kPairs = 32;
  double inv_freq[kPairs];
  for (uint32_t i = 0; i < kPairs; ++i) inv_freq[i] = 1.0 / std::pow(100000.0, double(2 * i) / 64.0);
  float c[kPairs], s[kPairs];
  for (double pos : {0.0, 1.0, 8191.0, 1e7, 1e7 + 1, 123456789.0, 2147483647.0, 1e10}) {
    rope_angles(pos, inv_freq, kPairs, c, s);
    for (uint32_t i = 0; i < kPairs; ++i) {
      const long double a = static_cast<long double>(pos) * static_cast<long double>(inv_freq[i]);
      // One float rounding of cos/sin, plus the double product's error (|a| * 2^-53).
      const double tol = 2.0 * 5.96e-8 + std::fabs(double(a)) * 1.2e-16;
      EXPECT_NEAR(c[i], double(std::cos(a)), tol) << "position " << pos << " pair " << i;
      EXPECT_NEAR(s[i], double(std::sin(a)), tol) << "position " << pos << " pair " << i;
    }
  }
  // A float product would not be: at 10^7 the first pair's angle is off by radians.
  const float bad = float(1e7) * float(inv_freq[0]);
  EXPECT_EQ(double(bad), 1e7);  // pair 0 rotates by exactly 1 radian per position...
  const float fine = 1e7f * float(inv_freq[5]);
  EXPECT_GT(std::fabs(double(fine) - 1e7 * inv_freq[5]), 1e-3);  // ...others lose precision
}

}  // namespace
}  // namespace keel
