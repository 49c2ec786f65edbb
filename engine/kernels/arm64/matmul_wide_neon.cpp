// Armv8.0 NEON kernels of the 5-bit and K-quant formats (Q5, Q5M, Q4K, Q5K, Q6K), for CPUs
// without SDOT (Cortex-A53, A72). The panel walk, decode and f32 side are shared with the
// dotprod tier (matmul_wide_panel.h); here a group's 4 rows x 32 columns are multiplied with
// SMULL/SMLAL (int8 x int8 -> int16) against the 4 activation bytes of each column group
// broadcast to all lanes, then widened pairwise to int32 (SADDLP) and folded to one sum per row
// (ADDP).
//
// int16 bounds: a lane of the products holds one (row, j) of the group and receives one product
// per u vector: 8 products over the block for the 5-bit and 4-bit formats, |u q| <= 31 * 127, so
// at most 8 * 3937 = 31496; Q6K sums each 16-column half apart (its two scales), 4 products of
// |u q| <= 63 * 127: at most 4 * 8001 = 32004. Both are below 32767 because the activations
// never hold -128 (quantize_act's q is in [-127, 127]).
#include "kernels/arm64/matmul_wide_panel.h"

namespace keel::arm64 {

namespace {

struct NeonDot {
  // Per token and 32 weights of a row, llvm-mca (cortex-a72 model), tiles of 1-3: Q4K 5.93,
  // 5.47, 6.64; Q5K 8.37, 7.37; Q6K 9.25, 8.34, 9.12 cycles: each token adds 8 broadcast
  // activation vectors and 4 accumulators, which spill beyond two tokens.
  static constexpr int tile(DType) { return 2; }

  // Products of u[i0..i0+3] with their broadcast activation groups: rows 4k, 4k+1 in p01
  // (low 8 bytes), rows 4k+2, 4k+3 in p23 (high 8 bytes), accumulated on top of p01/p23 unless
  // kFirst.
  template <bool kFirst, int kI0>
  static inline __attribute__((always_inline)) void mul4(const uint8x16_t u[8], const int8_t* q, int16x8_t& p01,
                                                         int16x8_t& p23) {
    unrolled<4>([&](auto di) {
      constexpr int i = kI0 + di;
      const int8x16_t a = vreinterpretq_s8_s32(vdupq_n_s32(load_i32(q + 4 * i)));
      const int8x16_t w = vreinterpretq_s8_u8(u[i]);
      if constexpr (kFirst && di == 0) {
        p01 = vmull_s8(vget_low_s8(w), vget_low_s8(a));
        p23 = vmull_high_s8(w, a);
      } else {
        p01 = vmlal_s8(p01, vget_low_s8(w), vget_low_s8(a));
        p23 = vmlal_high_s8(p23, w, a);
      }
    });
  }

  // [r0 j0..3, r1 j0..3] and [r2 .., r3 ..] -> [r0, r1, r2, r3].
  static int32x4_t rows(int16x8_t p01, int16x8_t p23) { return vpaddq_s32(vpaddlq_s16(p01), vpaddlq_s16(p23)); }

  template <bool kHalves>
  static inline __attribute__((always_inline)) void group(const uint8x16_t u[8], const int8_t* q, int32x4_t s[2]) {
    int16x8_t p01, p23;
    mul4<true, 0>(u, q, p01, p23);
    if constexpr (kHalves) {
      s[0] = vaddq_s32(s[0], rows(p01, p23));
      mul4<true, 4>(u, q, p01, p23);
      s[1] = vaddq_s32(s[1], rows(p01, p23));
    } else {
      mul4<false, 4>(u, q, p01, p23);
      s[0] = vaddq_s32(s[0], rows(p01, p23));
    }
  }
};

}  // namespace

void matmul_wide_neon(const WeightView& w, const ActBlock* x, uint32_t n_tokens, float* y, uint32_t y_stride,
                      uint32_t panel_begin, uint32_t panel_end) {
  matmul_panels<WidePanels<NeonDot>>(w, x, n_tokens, y, y_stride, panel_begin, panel_end);
}

}  // namespace keel::arm64
