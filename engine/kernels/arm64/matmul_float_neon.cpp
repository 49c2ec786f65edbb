// F32 / F16 / BF16 row-major weights in Armv8.0 NEON under the row walk of
// kernels/matmul_driver.h: FMLA, FCVTL for f16 (base Armv8), bf16 widened by a 16-bit left shift
// (its bits are the top half of an f32); 4 lanes, a scalar column tail.
#include "kernels/arm64/neon_util.h"

namespace keel::arm64 {

namespace {

struct NeonF32 {
  using Vec = float32x4_t;
  static constexpr uint32_t kLanes = 4;
  static constexpr bool kMaskedTail = false;
  static Vec zero() { return vdupq_n_f32(0.0f); }
  static Vec load_x(const float* p) { return vld1q_f32(p); }
  template <fb::DType DT>
  static Vec load_w(const uint8_t* row, uint32_t c) {
    if constexpr (DT == fb::DType::F32) {
      return vld1q_f32(reinterpret_cast<const float*>(row) + c);
    } else if constexpr (DT == fb::DType::F16) {
      return load_f16x4(row + 2 * c);
    } else {
      const uint16x4_t h = vld1_u16(reinterpret_cast<const uint16_t*>(row + 2 * c));
      return vreinterpretq_f32_u32(vshll_n_u16(h, 16));
    }
  }
  // vfmaq_f32 takes the accumulator first.
  static Vec fma(Vec w, Vec x, Vec acc) { return vfmaq_f32(acc, w, x); }
  static Vec add(Vec a, Vec b) { return vaddq_f32(a, b); }
  static float hsum(Vec v) { return vaddvq_f32(v); }
};

}  // namespace

void matmul_f_neon(const WeightView& w, const float* x, uint32_t n_tokens, uint32_t x_stride, float* y,
                   uint32_t y_stride, uint32_t panel_begin, uint32_t panel_end) {
  matmul_float_rows<NeonF32>(w, x, n_tokens, x_stride, y, y_stride, panel_begin, panel_end);
}

}  // namespace keel::arm64
