// NEON element-wise ops (Armv8.0). exp evaluates the constants of kernels/ref/expf_ref.h in
// its order, fused where the AVX2 version fuses, so that ref, AVX2 and NEON differ only by FMA
// rounding. Tails shorter than a vector take the ref arithmetic.
#include <arm_neon.h>

#include "kernels/arm64/arm64_tables.h"
#include "kernels/ref/expf_ref.h"

namespace keel::arm64 {

namespace {

inline float32x4_t exp4(float32x4_t x) {
  using namespace expf_poly;
  // keep: x >= kMinInput, false for NaN too; nan: x != x.
  const uint32x4_t keep = vcgeq_f32(x, vdupq_n_f32(kMinInput));
  const uint32x4_t nan = vmvnq_u32(vceqq_f32(x, x));
  const float32x4_t xc = vminq_f32(x, vdupq_n_f32(kMaxInput));
  const float32x4_t magic = vdupq_n_f32(kRoundMagic);
  const float32x4_t n = vsubq_f32(vfmaq_f32(magic, xc, vdupq_n_f32(kLog2e)), magic);
  float32x4_t r = vfmsq_f32(xc, n, vdupq_n_f32(kLn2Hi));
  r = vfmsq_f32(r, n, vdupq_n_f32(kLn2Lo));
  float32x4_t p = vdupq_n_f32(kP0);
  p = vfmaq_f32(vdupq_n_f32(kP1), p, r);
  p = vfmaq_f32(vdupq_n_f32(kP2), p, r);
  p = vfmaq_f32(vdupq_n_f32(kP3), p, r);
  p = vfmaq_f32(vdupq_n_f32(kP4), p, r);
  p = vfmaq_f32(vdupq_n_f32(kP5), p, r);
  p = vaddq_f32(vfmaq_f32(r, p, vmulq_f32(r, r)), vdupq_n_f32(1.0f));
  // n is an integer in [-126, 127] wherever `keep` holds (n converts exactly); other lanes are
  // discarded below.
  const int32x4_t e = vshlq_n_s32(vaddq_s32(vcvtq_s32_f32(n), vdupq_n_s32(127)), 23);
  const float32x4_t res =
      vreinterpretq_f32_u32(vandq_u32(vreinterpretq_u32_f32(vmulq_f32(p, vreinterpretq_f32_s32(e))), keep));
  return vbslq_f32(nan, x, res);
}

// sqrt as one FSQRT: __builtin_sqrtf keeps a libm call for the errno case.
inline float sqrt1(float x) { return vget_lane_f32(vsqrt_f32(vdup_n_f32(x)), 0); }

void rmsnorm_neon(const float* x, const float* w, uint32_t n, float eps, float* out) {
  float32x4_t s0 = vdupq_n_f32(0.0f), s1 = s0, s2 = s0, s3 = s0;
  uint32_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const float32x4_t a = vld1q_f32(x + i), b = vld1q_f32(x + i + 4);
    const float32x4_t c = vld1q_f32(x + i + 8), d = vld1q_f32(x + i + 12);
    s0 = vfmaq_f32(s0, a, a);
    s1 = vfmaq_f32(s1, b, b);
    s2 = vfmaq_f32(s2, c, c);
    s3 = vfmaq_f32(s3, d, d);
  }
  for (; i + 4 <= n; i += 4) {
    const float32x4_t a = vld1q_f32(x + i);
    s0 = vfmaq_f32(s0, a, a);
  }
  float ss = vaddvq_f32(vaddq_f32(vaddq_f32(s0, s1), vaddq_f32(s2, s3)));
  for (; i < n; ++i) ss += x[i] * x[i];
  const float inv = 1.0f / sqrt1(ss / float(n) + eps);
  // Each output depends only on its own x, w and inv: out may alias x.
  const float32x4_t vinv = vdupq_n_f32(inv);
  i = 0;
  for (; i + 4 <= n; i += 4) vst1q_f32(out + i, vmulq_f32(vmulq_f32(vld1q_f32(x + i), vinv), vld1q_f32(w + i)));
  for (; i < n; ++i) out[i] = x[i] * inv * w[i];
}

void softmax_neon(float* x, uint32_t n) {
  if (n == 0) return;
  float mx = x[0];
  uint32_t i = 0;
  if (n >= 4) {
    float32x4_t vm = vld1q_f32(x);
    for (i = 4; i + 4 <= n; i += 4) vm = vmaxq_f32(vm, vld1q_f32(x + i));
    mx = vmaxvq_f32(vm);
  }
  for (; i < n; ++i) mx = x[i] > mx ? x[i] : mx;
  const float32x4_t vmx = vdupq_n_f32(mx);
  float32x4_t s0 = vdupq_n_f32(0.0f), s1 = s0;
  i = 0;
  for (; i + 8 <= n; i += 8) {
    const float32x4_t e0 = exp4(vsubq_f32(vld1q_f32(x + i), vmx));
    const float32x4_t e1 = exp4(vsubq_f32(vld1q_f32(x + i + 4), vmx));
    vst1q_f32(x + i, e0);
    vst1q_f32(x + i + 4, e1);
    s0 = vaddq_f32(s0, e0);
    s1 = vaddq_f32(s1, e1);
  }
  for (; i + 4 <= n; i += 4) {
    const float32x4_t e = exp4(vsubq_f32(vld1q_f32(x + i), vmx));
    vst1q_f32(x + i, e);
    s0 = vaddq_f32(s0, e);
  }
  float sum = vaddvq_f32(vaddq_f32(s0, s1));
  for (; i < n; ++i) {
    x[i] = expf_poly::exp_ref(x[i] - mx);
    sum += x[i];
  }
  const float inv = 1.0f / sum;
  const float32x4_t vinv = vdupq_n_f32(inv);
  i = 0;
  for (; i + 4 <= n; i += 4) vst1q_f32(x + i, vmulq_f32(vld1q_f32(x + i), vinv));
  for (; i < n; ++i) x[i] *= inv;
}

void silu_mul_neon(const float* gate, const float* up, uint32_t n, float* out) {
  const float32x4_t one = vdupq_n_f32(1.0f);
  uint32_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const float32x4_t g = vld1q_f32(gate + i);
    const float32x4_t den = vaddq_f32(one, exp4(vnegq_f32(g)));
    vst1q_f32(out + i, vmulq_f32(vdivq_f32(g, den), vld1q_f32(up + i)));
  }
  for (; i < n; ++i) {
    const float g = gate[i];
    out[i] = g / (1.0f + expf_poly::exp_ref(-g)) * up[i];
  }
}

void add_neon(const float* a, const float* b, uint32_t n, float* out) {
  uint32_t i = 0;
  for (; i + 4 <= n; i += 4) vst1q_f32(out + i, vaddq_f32(vld1q_f32(a + i), vld1q_f32(b + i)));
  for (; i < n; ++i) out[i] = a[i] + b[i];
}

void scale_neon(float* x, uint32_t n, float s) {
  const float32x4_t vs = vdupq_n_f32(s);
  uint32_t i = 0;
  for (; i + 4 <= n; i += 4) vst1q_f32(x + i, vmulq_f32(vld1q_f32(x + i), vs));
  for (; i < n; ++i) x[i] *= s;
}

float dot_neon(const float* a, const float* b, uint32_t n) {
  // Four chains so the FMAs do not wait on each other's latency.
  float32x4_t s0 = vdupq_n_f32(0.0f), s1 = s0, s2 = s0, s3 = s0;
  uint32_t i = 0;
  for (; i + 16 <= n; i += 16) {
    s0 = vfmaq_f32(s0, vld1q_f32(a + i), vld1q_f32(b + i));
    s1 = vfmaq_f32(s1, vld1q_f32(a + i + 4), vld1q_f32(b + i + 4));
    s2 = vfmaq_f32(s2, vld1q_f32(a + i + 8), vld1q_f32(b + i + 8));
    s3 = vfmaq_f32(s3, vld1q_f32(a + i + 12), vld1q_f32(b + i + 12));
  }
  for (; i + 4 <= n; i += 4) s0 = vfmaq_f32(s0, vld1q_f32(a + i), vld1q_f32(b + i));
  float s = vaddvq_f32(vaddq_f32(vaddq_f32(s0, s1), vaddq_f32(s2, s3)));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

void axpy_neon(float a, const float* x, uint32_t n, float* y) {
  const float32x4_t va = vdupq_n_f32(a);
  uint32_t i = 0;
  for (; i + 4 <= n; i += 4) vst1q_f32(y + i, vfmaq_f32(vld1q_f32(y + i), va, vld1q_f32(x + i)));
  for (; i < n; ++i) y[i] += a * x[i];
}

void gelu_mul_neon(const float* gate, const float* up, uint32_t n, float* out) {
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
  const float32x4_t one = vdupq_n_f32(1.0f), c = vdupq_n_f32(0.044715f);
  const float32x4_t minus_two_k = vdupq_n_f32(-2.0f * kSqrt2OverPi);
  uint32_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const float32x4_t g = vld1q_f32(gate + i);
    const float32x4_t inner = vfmaq_f32(g, vmulq_f32(c, g), vmulq_f32(g, g));  // g + c g^3
    const float32x4_t den = vaddq_f32(one, exp4(vmulq_f32(minus_two_k, inner)));
    vst1q_f32(out + i, vmulq_f32(vdivq_f32(g, den), vld1q_f32(up + i)));
  }
  for (; i < n; ++i) {
    const float g = gate[i];
    const float u = kSqrt2OverPi * (g + 0.044715f * g * g * g);
    out[i] = g / (1.0f + expf_poly::exp_ref(-2.0f * u)) * up[i];
  }
}

constexpr VectorKernels kNeon = {"neon",     rmsnorm_neon, softmax_neon, silu_mul_neon, add_neon,
                                 scale_neon, dot_neon,     axpy_neon,    gelu_mul_neon};

}  // namespace

const VectorKernels& vector_neon_table() { return kNeon; }

}  // namespace keel::arm64
