// Activation quantization in Armv8.0 NEON, bit-identical to quantize_act_ref: the same f32
// amax, d = amax / 127 and id = 1 / d in scalar, the same products x * id, and FCVTNS
// (vcvtnq_s32_f32) rounds them to nearest, ties to even, as the ref's magic-number rounding.
#include <cstring>

#include "kernels/arm64/neon_util.h"

namespace keel::arm64 {

void quantize_act_neon(const float* x, uint32_t cols, ActBlock* out) {
  const uint32_t nb = act_blocks(cols);
  const float32x4_t big = vdupq_n_f32(3.4028235e38f);
  for (uint32_t b = 0; b < nb; ++b) {
    const uint32_t c0 = b * kQuantBlock;
    const uint32_t n = cols - c0 < kQuantBlock ? cols - c0 : kQuantBlock;
    float tail[kQuantBlock];
    const float* src = x + c0;
    if (n < kQuantBlock) {
      memset(tail, 0, sizeof(tail));
      memcpy(tail, src, n * sizeof(float));
      src = tail;
    }
    float32x4_t v[8];
    for (int k = 0; k < 8; ++k) v[k] = vld1q_f32(src + 4 * k);
    float32x4_t m = vabsq_f32(v[0]);
    // |x| <= FLT_MAX is false for inf and NaN: the lanes' AND says whether all are finite.
    uint32x4_t fin = vcleq_f32(m, big);
    for (int k = 1; k < 8; ++k) {
      const float32x4_t a = vabsq_f32(v[k]);
      fin = vandq_u32(fin, vcleq_f32(a, big));
      m = vmaxq_f32(m, a);
    }
    const float amax = vmaxvq_f32(m);
    float d = 0.0f, id = 0.0f;
    if (vminvq_u32(fin) == 0) {
      // Non-finite activations (a corrupted model) are not converted: zeros and a NaN scale.
      d = __builtin_nanf("");
      for (int k = 0; k < 8; ++k) v[k] = vdupq_n_f32(0.0f);
    } else if (amax >= 1e-30f) {
      d = amax / 127.0f;
      id = 1.0f / d;
    }
    int32x4_t q[8];
    for (int k = 0; k < 8; ++k) q[k] = vcvtnq_s32_f32(vmulq_n_f32(v[k], id));
    // |q| <= 127: the saturating narrowings are exact.
    int8x16_t lo = vcombine_s8(vqmovn_s16(vcombine_s16(vqmovn_s32(q[0]), vqmovn_s32(q[1]))),
                               vqmovn_s16(vcombine_s16(vqmovn_s32(q[2]), vqmovn_s32(q[3]))));
    int8x16_t hi = vcombine_s8(vqmovn_s16(vcombine_s16(vqmovn_s32(q[4]), vqmovn_s32(q[5]))),
                               vqmovn_s16(vcombine_s16(vqmovn_s32(q[6]), vqmovn_s32(q[7]))));
    const int32x4_t s = vaddq_s32(vaddq_s32(vaddq_s32(q[0], q[1]), vaddq_s32(q[2], q[3])),
                                  vaddq_s32(vaddq_s32(q[4], q[5]), vaddq_s32(q[6], q[7])));
    ActBlock& blk = out[b];
    vst1q_s8(blk.q, lo);
    vst1q_s8(blk.q + 16, hi);
    blk.d = d;
    blk.sum = vaddvq_s32(s);
  }
}

}  // namespace keel::arm64
