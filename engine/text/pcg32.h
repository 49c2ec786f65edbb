// PCG32 (permuted congruential generator, XSH-RR output): small state, good statistics,
// reproducible from a seed on every platform.
#pragma once

#include <cstdint>

namespace keel::text {

class Pcg32 {
 public:
  explicit Pcg32(uint64_t seed = 0) { reseed(seed); }
  void reseed(uint64_t seed) {
    state_ = 0;
    next_u32();
    state_ += seed;
    next_u32();
  }
  uint32_t next_u32() {
    const uint64_t old = state_;
    state_ = old * 6364136223846793005ull + kIncrement;
    const uint32_t xorshifted = uint32_t(((old >> 18) ^ old) >> 27);
    const uint32_t rot = uint32_t(old >> 59);
    return (xorshifted >> rot) | (xorshifted << ((32 - rot) & 31));
  }
  // Uniform in [0, 1) with 24 random bits (every value exactly representable as a float).
  float next_float() { return float(next_u32() >> 8) * (1.0f / 16777216.0f); }

 private:
  static constexpr uint64_t kIncrement = 1442695040888963407ull;  // any odd constant
  uint64_t state_ = 0;
};

}  // namespace keel::text
