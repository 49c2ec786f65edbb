// Armv8.2 dotprod kernels of the 5-bit and K-quant formats (Q5, Q5M, Q4K, Q5K, Q6K). The panel
// walk, decode and f32 side are shared with the NEON tier (matmul_wide_panel.h), so the results
// are bit for bit those of matmul_wide_neon. A group's 16 bytes are 4 rows x 4 columns, SDOT's
// indexed form: lane r of the accumulator adds row r's 4 u times the 4 activation bytes of one
// 32-bit lane of the block's q, in int32 (exact: |sum u q| <= 32 * 63 * 127 per block).
#include "kernels/arm64/matmul_wide_panel.h"

namespace keel::arm64 {

namespace {

struct DotprodDot {
  template <bool kHalves>
  static void group(const uint8x16_t u[8], const int8_t* q, int32x4_t s[2]) {
    const int8x16_t q0 = vld1q_s8(q), q1 = vld1q_s8(q + 16);
    const int32x4_t zero = vdupq_n_s32(0);
    // Two chains (columns 0-15, 16-31) so that consecutive SDOTs do not wait on each other.
    int32x4_t a = vdotq_laneq_s32(zero, vreinterpretq_s8_u8(u[0]), q0, 0);
    int32x4_t b = vdotq_laneq_s32(zero, vreinterpretq_s8_u8(u[4]), q1, 0);
    a = vdotq_laneq_s32(a, vreinterpretq_s8_u8(u[1]), q0, 1);
    b = vdotq_laneq_s32(b, vreinterpretq_s8_u8(u[5]), q1, 1);
    a = vdotq_laneq_s32(a, vreinterpretq_s8_u8(u[2]), q0, 2);
    b = vdotq_laneq_s32(b, vreinterpretq_s8_u8(u[6]), q1, 2);
    a = vdotq_laneq_s32(a, vreinterpretq_s8_u8(u[3]), q0, 3);
    b = vdotq_laneq_s32(b, vreinterpretq_s8_u8(u[7]), q1, 3);
    if constexpr (kHalves) {
      s[0] = a;
      s[1] = b;
    } else {
      s[0] = vaddq_s32(a, b);
    }
  }
};

// Four tokens per panel pass: 16 f32 accumulators, 8 decoded u and the block's scales fit the
// 32 vector registers; the decode is then a quarter of the work it is for one token.
constexpr int kTileTokens = 4;

}  // namespace

void matmul_wide_dotprod(const WeightView& w, const ActBlock* x, uint32_t n_tokens, float* y, uint32_t y_stride,
                         uint32_t panel_begin, uint32_t panel_end) {
  matmul_wide_dispatch<kTileTokens, DotprodDot>(w, x, n_tokens, y, y_stride, panel_begin, panel_end);
}

}  // namespace keel::arm64
