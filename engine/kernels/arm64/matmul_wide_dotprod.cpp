// Armv8.2 dotprod kernels of the 5-bit and K-quant formats (Q5, Q5M, Q4K, Q5K, Q6K). The panel
// walk, decode and f32 side are shared with the NEON tier (matmul_wide_panel.h), so the results
// are bit for bit those of matmul_wide_neon. A group's 16 bytes are 4 rows x 4 columns, SDOT's
// indexed form: lane r of the accumulator adds row r's 4 u times the 4 activation bytes of one
// 32-bit lane of the block's q, in int32 (exact: |sum u q| <= 32 * 63 * 127 per block).
#include "kernels/arm64/matmul_wide_panel.h"

namespace keel::arm64 {

namespace {

struct DotprodDot {
  // Per token and 32 weights of a row, llvm-mca (cortex-a76 model of LLVM 14), tiles of 1-4:
  // Q4K 5.06, 3.81, 4.04, 4.57; Q5K 6.40, 4.75, 6.02, 4.92; Q6K 5.19, 4.68, 3.81, 3.90 cycles.
  // Beyond, the 4 accumulators and 2 activation vectors per token spill.
  static constexpr int tile(DType dt) { return dt == DType::Q6K ? 3 : 2; }

  template <bool kHalves>
  static inline __attribute__((always_inline)) void group(const uint8x16_t u[8], const int8_t* q, int32x4_t s[2]) {
    const int8x16_t q0 = vld1q_s8(q), q1 = vld1q_s8(q + 16);
    const auto w = [&](int i) { return vreinterpretq_s8_u8(u[i]); };
    if constexpr (kHalves) {
      // Two chains, one per 16-column half.
      s[0] = vdotq_laneq_s32(s[0], w(0), q0, 0);
      s[1] = vdotq_laneq_s32(s[1], w(4), q1, 0);
      s[0] = vdotq_laneq_s32(s[0], w(1), q0, 1);
      s[1] = vdotq_laneq_s32(s[1], w(5), q1, 1);
      s[0] = vdotq_laneq_s32(s[0], w(2), q0, 2);
      s[1] = vdotq_laneq_s32(s[1], w(6), q1, 2);
      s[0] = vdotq_laneq_s32(s[0], w(3), q0, 3);
      s[1] = vdotq_laneq_s32(s[1], w(7), q1, 3);
    } else {
      // One chain: a second one would cost a register copy and an add per group, and the four
      // groups of a block are independent chains already.
      s[0] = vdotq_laneq_s32(s[0], w(0), q0, 0);
      s[0] = vdotq_laneq_s32(s[0], w(1), q0, 1);
      s[0] = vdotq_laneq_s32(s[0], w(2), q0, 2);
      s[0] = vdotq_laneq_s32(s[0], w(3), q0, 3);
      s[0] = vdotq_laneq_s32(s[0], w(4), q1, 0);
      s[0] = vdotq_laneq_s32(s[0], w(5), q1, 1);
      s[0] = vdotq_laneq_s32(s[0], w(6), q1, 2);
      s[0] = vdotq_laneq_s32(s[0], w(7), q1, 3);
    }
  }
};

}  // namespace

void matmul_wide_dotprod(const WeightView& w, const ActBlock* x, uint32_t n_tokens, float* y, uint32_t y_stride,
                         uint32_t panel_begin, uint32_t panel_end) {
  matmul_panels<WidePanels<DotprodDot>>(w, x, n_tokens, y, y_stride, panel_begin, panel_end);
}

}  // namespace keel::arm64
